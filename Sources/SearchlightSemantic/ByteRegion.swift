import CSemanticKernels
import Glibc

/// A growable run of bytes kept in an unnamed file (`sl_open_unnamed_file`) and read with
/// `pread`: the pages read stay in the kernel's page cache, which the system reclaims under
/// pressure, and are not the process's resident memory (a `mmap` of the same file would count
/// every page a scan touched in RssFile for as long as it is mapped).
///
/// Appends gather in a buffer of `flushBytes` before one `pwrite`, and reads see that buffer,
/// so a region is always read as written. Without a file (none could be made, or a write
/// failed: a full disk) the bytes are kept in memory instead, as before the file existed.
///
/// Not thread-safe for writes; reads may run side by side with each other, not with a write
/// (`VectorIndex` is a value whose storage is copied before it is changed, and the store's
/// index takes its lock exclusively to change it).
final class ByteRegion: @unchecked Sendable {
    static let flushBytes = 256 << 10

    private var fd: Int32
    /// Where the region starts in its file: 0, or past the header and the other sections of a
    /// saved index adopted as the file (`init(adopting:base:count:)`).
    private let base: Int
    /// Bytes in the file (offsets base ..< base + flushed); the rest are in `pending`.
    private var flushed = 0
    private var pending: [UInt8] = []

    /// A region in an unnamed file in `directory`, or in memory when `directory` is nil or no
    /// file can be made there.
    init(directory: String?) {
        fd = directory.map { sl_open_unnamed_file($0) } ?? -1
        base = 0
    }

    /// A region whose first `count` bytes are at `base` in the file `fd` (taken over: closed with
    /// the region), the last section of the file, so appends go past its end. The caller has
    /// checked the file's size and made it nameless (`VectorIndexFile.load`).
    init(adopting fd: Int32, base: Int, count: Int) {
        self.fd = fd
        self.base = base
        flushed = count
    }

    deinit { if fd >= 0 { close(fd) } }

    var count: Int { flushed + pending.count }
    /// Bytes held in memory (the append buffer, or everything without a file).
    var heapBytes: Int { pending.capacity }
    var fileDescriptorForTesting: Int32 { fd }
    var isFileBacked: Bool { fd >= 0 }

    func append(_ bytes: UnsafeRawBufferPointer) {
        if fd >= 0 && pending.count + bytes.count > Self.flushBytes {
            flush()
            // A large block goes to the file at once, not through the buffer (which would keep
            // its size on the heap).
            if fd >= 0 && bytes.count > Self.flushBytes {
                if writeFully(bytes.baseAddress!, bytes.count, flushed) {
                    flushed += bytes.count
                    return
                }
                degrade()
            }
            if fd >= 0 && pending.capacity < Self.flushBytes { pending.reserveCapacity(Self.flushBytes) }
        }
        pending.append(contentsOf: bytes)
    }

    /// Overwrites `bytes.count` bytes at `offset` (within `count`).
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int) {
        precondition(offset >= 0 && offset + bytes.count <= count, "a write past the end of a vector region")
        var done = 0
        if offset < flushed {
            let n = min(bytes.count, flushed - offset)
            if !writeFully(bytes.baseAddress!, n, offset) {
                degrade()
                return write(bytes, at: offset)
            }
            done = n
        }
        if done < bytes.count {
            let start = offset + done - flushed
            pending.withUnsafeMutableBytes { p in
                (p.baseAddress! + start).copyMemory(from: bytes.baseAddress! + done, byteCount: bytes.count - done)
            }
        }
    }

    /// Reads `count` bytes at `offset` (within `self.count`) into `out`.
    func read(into out: UnsafeMutableRawPointer, count n: Int, at offset: Int) {
        precondition(offset >= 0 && n >= 0 && offset + n <= count, "a read past the end of a vector region")
        var done = 0
        if offset < flushed {
            let want = min(n, flushed - offset)
            while done < want {
                let r = pread(fd, out + done, want - done, off_t(base + offset + done))
                if r > 0 { done += r; continue }
                if r < 0 && errno == EINTR { continue }
                // The file cannot be read back (an I/O error, or it was cut short under us):
                // zeros, so the item scores nothing rather than something made up.
                (out + done).initializeMemory(as: UInt8.self, repeating: 0, count: want - done)
                done = want
            }
        }
        if done < n {
            let start = offset + done - flushed
            pending.withUnsafeBytes { p in (out + done).copyMemory(from: p.baseAddress! + start, byteCount: n - done) }
        }
    }

    /// The region as it is now, to read from another thread while this one changes: its bytes
    /// flushed and a duplicate of the file's descriptor (appends then go past `count`, and a
    /// failed write that moves the region to memory closes only the original). Without a file,
    /// a view of this region itself: to be read only while nothing changes it.
    func frozen() -> FrozenRegion {
        flush()
        if fd >= 0 {
            // Close-on-exec like the original: a child started meanwhile (an extension, a
            // launcher) must not inherit a descriptor of the index's vectors.
            let copy = fcntl(fd, F_DUPFD_CLOEXEC, 0)
            if copy >= 0 { return FrozenRegion(fd: copy, base: base, count: flushed, region: nil) }
        }
        return FrozenRegion(fd: -1, base: 0, count: count, region: self)
    }

    /// Writes what is pending to the file.
    func flush() {
        guard fd >= 0, !pending.isEmpty else { return }
        let ok = pending.withUnsafeBytes { writeFully($0.baseAddress!, $0.count, flushed) }
        guard ok else { return degrade() }
        flushed += pending.count
        pending.removeAll(keepingCapacity: true)
    }

    /// Appends `count` bytes of the file `source` at `offset` (in the kernel when both are
    /// files); false on failure, the region then unchanged.
    func adopt(from source: Int32, at offset: Int, count n: Int) -> Bool {
        flush()
        guard fd >= 0 else { return false }
        guard RegionCopy.copy(from: source, at: offset, count: n, to: fd, at: base + flushed) else { return false }
        flushed += n
        return true
    }

    /// Copies the region's bytes to `target` at `offset` (in the kernel when both are files:
    /// `copy_file_range`); false on any failure.
    func copy(to target: Int32, at offset: Int) -> Bool {
        flush()
        if fd >= 0, RegionCopy.copy(from: fd, at: base, count: flushed, to: target, at: offset) {
            return pending.withUnsafeBytes { RegionCopy.writeFully(target, $0.baseAddress, $0.count, offset + flushed) }
        }
        guard fd < 0 else { return false }
        return pending.withUnsafeBytes { RegionCopy.writeFully(target, $0.baseAddress, $0.count, offset) }
    }

    private func writeFully(_ p: UnsafeRawPointer, _ n: Int, _ offset: Int) -> Bool {
        var done = 0
        while done < n {
            let w = pwrite(fd, p + done, n - done, off_t(base + offset + done))
            if w > 0 { done += w; continue }
            if w < 0 && errno == EINTR { continue }
            return false
        }
        return true
    }

    /// A write failed: everything moves to memory, so the region stays whole (at the heap's cost).
    private func degrade() {
        var all = [UInt8](repeating: 0, count: flushed)
        all.withUnsafeMutableBytes { read(into: $0.baseAddress!, count: flushed, at: 0) }
        all.append(contentsOf: pending)
        close(fd)
        fd = -1
        flushed = 0
        pending = all
    }
}

/// A read-only view of a `ByteRegion`'s first `count` bytes (`ByteRegion.frozen`): its own
/// descriptor of the region's file, closed with it.
final class FrozenRegion: @unchecked Sendable {
    let count: Int
    private let fd: Int32
    private let base: Int
    private let region: ByteRegion?

    init(fd: Int32, base: Int, count: Int, region: ByteRegion?) {
        self.fd = fd
        self.base = base
        self.count = count
        self.region = region
    }

    deinit { if fd >= 0 { close(fd) } }

    var fileDescriptorForTesting: Int32 { fd }

    /// Whether it reads its own descriptor (safe beside changes to the region).
    var isDetached: Bool { fd >= 0 }

    func read(into out: UnsafeMutableRawPointer, count n: Int, at offset: Int) {
        precondition(offset >= 0 && n >= 0 && offset + n <= count, "a read past the end of a frozen vector region")
        guard fd >= 0 else { return region!.read(into: out, count: n, at: offset) }
        var done = 0
        while done < n {
            let r = pread(fd, out + done, n - done, off_t(base + offset + done))
            if r > 0 { done += r; continue }
            if r < 0 && errno == EINTR { continue }
            (out + done).initializeMemory(as: UInt8.self, repeating: 0, count: n - done)
            return
        }
    }
}

/// Copies between files, in the kernel where it can (`copy_file_range`), else through a buffer.
enum RegionCopy {
    static func copy(from source: Int32, at sourceOffset: Int, count: Int, to target: Int32, at targetOffset: Int) -> Bool {
        var inOffset = Int64(sourceOffset), outOffset = Int64(targetOffset)
        var left = count
        while left > 0 {
            let n = sl_copy_file_range(source, &inOffset, target, &outOffset, left)
            if n > 0 { left -= n; continue }
            if n < 0 && errno == EINTR { continue }
            // Not supported between these files (or cut short): the rest through a buffer.
            break
        }
        guard left > 0 else { return true }
        let chunk = 1 << 20
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: chunk, alignment: 16)
        defer { buffer.deallocate() }
        while left > 0 {
            let r = pread(source, buffer, min(chunk, left), off_t(inOffset))
            if r < 0 && errno == EINTR { continue }
            guard r > 0, writeFully(target, buffer, r, Int(outOffset)) else { return false }
            inOffset += Int64(r)
            outOffset += Int64(r)
            left -= r
        }
        return true
    }

    static func writeFully(_ fd: Int32, _ p: UnsafeRawPointer?, _ n: Int, _ offset: Int) -> Bool {
        guard n > 0, let p else { return true }
        var done = 0
        while done < n {
            let w = pwrite(fd, p + done, n - done, off_t(offset + done))
            if w > 0 { done += w; continue }
            if w < 0 && errno == EINTR { continue }
            return false
        }
        return true
    }

    static func readFully(_ fd: Int32, _ p: UnsafeMutableRawPointer, _ n: Int, _ offset: Int) -> Bool {
        var done = 0
        while done < n {
            let r = pread(fd, p + done, n - done, off_t(offset + done))
            if r > 0 { done += r; continue }
            if r < 0 && errno == EINTR { continue }
            return false
        }
        return true
    }
}
