import CSemanticKernels
import Glibc

/// Which committed state of a store's vectors a saved index holds: the store's identity (random,
/// made once with its file: a recovered, recreated or swapped-in file has another), its vector
/// epoch (changed by every committed change to its vectors), its store format, and the largest
/// rowid of its vector table (read in O(log n): a table dropped, recreated or edited by hand past
/// the epoch's reach is told apart by it too).
public struct VectorStamp: Sendable, Equatable {
    /// 16 random bytes made once with the store's file.
    public var identity: [UInt8]
    /// Moved by every committed transaction that wrote the store's vectors.
    public var epoch: Int64
    /// The store's format (a migration in place changes it).
    public var storeFormat: Int
    /// The largest rowid of the store's vector table, 0 when it is empty.
    public var topRowid: Int64

    public init(identity: [UInt8], epoch: Int64, storeFormat: Int, topRowid: Int64) {
        self.identity = identity
        self.epoch = epoch
        self.storeFormat = storeFormat
        self.topRowid = topRowid
    }
}

/// A loaded `VectorIndex` saved beside its store (`<index>.sqlite-vectors`) at a clean close, so
/// that the next load reads it instead of every row of the vector table (3.7 s at 1M items).
///
/// Layout (native byte order): a 128-byte header; the rowids (8 bytes a slot) and flags (1 byte a
/// slot); the sign codes and then the records, each at a page boundary. The records come last so
/// that a load adopts the file as their region (appends go past its end) once it has unlinked it.
///
/// Nothing in it is trusted: it is used only when its stamp equals the store's current one
/// (`VectorStamp`: a write after the save, a crash after a write, another file, another format
/// all differ), its size equals what its header's counts give, those counts are bounded by the
/// store's items, its header, rowids and flags match their checksum, its rowids are distinct and
/// its flags known. The sign codes and records are not checksummed (reading 440 MB at 1M would
/// cost most of what the file saves); a damaged one scores its item wrongly, and every read of
/// them is bounds-checked against the sizes checked here.
///
/// Opened without following a link, without opening anything but a regular file (a FIFO or a
/// device is never opened for reading), owned by this process's user, with one link.
public enum VectorIndexFile {
    static let magic: UInt64 = 0x3153_4345_5645_4C53  // "SLVECS1", little-endian
    static let version: UInt32 = 1
    static let headerBytes = 128
    static let page = 4_096
    public static let temporarySuffix = SideFile.temporarySuffix
    /// O_PATH (Linux; not exported to Swift): a descriptor that names the file without opening it.
    static let openPathOnly: Int32 = 0o10000000

    struct Layout: Equatable {
        var slots: Int
        var signsOffset: Int
        var recordsOffset: Int
        var size: Int

        init(slots: Int, words: Int, recordBytes: Int) {
            self.slots = slots
            func aligned(_ n: Int) -> Int { (n + VectorIndexFile.page - 1) / VectorIndexFile.page * VectorIndexFile.page }
            signsOffset = aligned(VectorIndexFile.headerBytes + slots * 9)
            recordsOffset = aligned(signsOffset + slots * words * 8)
            size = recordsOffset + slots * recordBytes
        }
    }

    /// Writes `index` to `path` as a new file, fsynced, renamed over it (its directory fsynced
    /// after): a reader sees the old file or the new one whole. Returns the bytes written, or nil
    /// on any failure, or when `cancelled` is true before the rename: the `.tmp` is removed then.
    /// The `.tmp` is made anew (`O_EXCL`, not following a link): a file planted there is never
    /// written through.
    public static func save(_ index: VectorIndex, stamp: VectorStamp, to path: String, cancelled: () -> Bool = { false }) -> Int? {
        guard stamp.identity.count == 16 else { return nil }
        let state = index.storage.savedState()
        let slots = state.rowids.count
        let layout = Layout(slots: slots, words: index.words, recordBytes: index.dimension + 4)
        let headerAndArrays = layout.signsOffset
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: headerAndArrays, alignment: 8)
        defer { buffer.deallocate() }
        buffer.initializeMemory(as: UInt8.self, repeating: 0, count: headerAndArrays)
        state.rowids.withUnsafeBytes { if let p = $0.baseAddress { (buffer + headerBytes).copyMemory(from: p, byteCount: $0.count) } }
        state.flags.withUnsafeBytes { if let p = $0.baseAddress { (buffer + headerBytes + slots * 8).copyMemory(from: p, byteCount: $0.count) } }
        buffer.storeBytes(of: magic, toByteOffset: 0, as: UInt64.self)
        buffer.storeBytes(of: version, toByteOffset: 8, as: UInt32.self)
        buffer.storeBytes(of: UInt32(index.dimension), toByteOffset: 12, as: UInt32.self)
        buffer.storeBytes(of: UInt32(index.words), toByteOffset: 16, as: UInt32.self)
        buffer.storeBytes(of: UInt32(stamp.storeFormat), toByteOffset: 20, as: UInt32.self)
        buffer.storeBytes(of: UInt64(slots), toByteOffset: 24, as: UInt64.self)
        buffer.storeBytes(of: UInt64(state.live), toByteOffset: 32, as: UInt64.self)
        buffer.storeBytes(of: UInt64(state.refined), toByteOffset: 40, as: UInt64.self)
        buffer.storeBytes(of: stamp.epoch, toByteOffset: 48, as: Int64.self)
        stamp.identity.withUnsafeBytes { (buffer + 56).copyMemory(from: $0.baseAddress!, byteCount: 16) }
        buffer.storeBytes(of: UInt64(layout.signsOffset), toByteOffset: 72, as: UInt64.self)
        buffer.storeBytes(of: UInt64(layout.recordsOffset), toByteOffset: 80, as: UInt64.self)
        buffer.storeBytes(of: UInt64(layout.size), toByteOffset: 88, as: UInt64.self)
        buffer.storeBytes(of: stamp.topRowid, toByteOffset: 104, as: Int64.self)
        buffer.storeBytes(of: checksum(buffer, slots: slots), toByteOffset: 96, as: UInt64.self)
        if cancelled() { return nil }

        let saved = SideFile.replace(path, cancelled: cancelled) { fd in
            RegionCopy.writeFully(fd, buffer, headerAndArrays, 0)
                && state.signs.count == slots * index.words * 8 && state.signs.copy(to: fd, at: layout.signsOffset)
                && state.records.count == slots * (index.dimension + 4) && state.records.copy(to: fd, at: layout.recordsOffset)
                && ftruncate(fd, off_t(layout.size)) == 0
        }
        return saved ? layout.size : nil
    }

    /// The index saved at `path`, when it holds exactly the vectors `stamp` names, with at most
    /// `maxLive` live slots; or why not. The file is removed once read, used or not: its records
    /// become the index's region (a nameless file like the ones a load from the table makes),
    /// and a file not used would be refused again.
    public static func load(_ path: String, dimension: Int, directory: String?, stamp: VectorStamp, maxLive: Int)
        -> Result<VectorIndex, VectorIndexFileError>
    {
        // O_PATH: nothing is opened for reading yet (a FIFO would block, a device's open may act).
        let handle = open(path, openPathOnly | O_NOFOLLOW | O_CLOEXEC)
        guard handle >= 0 else { return .failure(.init(errno == ENOENT ? "no saved vector index" : "the saved vector index cannot be opened")) }
        var st = stat()
        guard fstat(handle, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            close(handle)
            unlinkIfSame(path, st)
            return .failure(.init("the saved vector index is not a regular file"))
        }
        let fd = open("/proc/self/fd/\(handle)", O_RDWR | O_CLOEXEC)
        close(handle)
        guard fd >= 0 else {
            // No /proc (a chroot): not used, and not left to be refused at every load.
            unlinkIfSame(path, st)
            return .failure(.init("the saved vector index cannot be opened"))
        }
        defer { close(fd) }
        var opened = stat()
        guard fstat(fd, &opened) == 0, opened.st_dev == st.st_dev, opened.st_ino == st.st_ino else {
            return .failure(.init("the saved vector index changed while it was opened"))
        }
        // Removed whether used or not, and before it is read: a file whose reading failed in a
        // way not foreseen is not met again at the next start. Only while the path still names
        // the file opened.
        guard unlinkIfSame(path, opened) else { return .failure(.init("the saved vector index cannot be removed")) }
        SideFile.syncDirectory(of: path)
        guard opened.st_uid == geteuid(), opened.st_nlink == 1 else {
            return .failure(.init("the saved vector index is not this process's own file"))
        }
        return read(fd, size: Int(opened.st_size), dimension: dimension, directory: directory, stamp: stamp, maxLive: maxLive)
    }

    /// Reads and checks the file `fd` (the records' region gets a descriptor of its own).
    private static func read(_ fd: Int32, size: Int, dimension: Int, directory: String?, stamp: VectorStamp, maxLive: Int)
        -> Result<VectorIndex, VectorIndexFileError>
    {
        let words = (dimension + 63) / 64, recordBytes = dimension + 4
        guard size >= headerBytes else { return .failure(.init("the saved vector index is cut short")) }
        let header = UnsafeMutableRawPointer.allocate(byteCount: headerBytes, alignment: 8)
        defer { header.deallocate() }
        guard RegionCopy.readFully(fd, header, headerBytes, 0) else { return .failure(.init("the saved vector index cannot be read")) }
        guard header.load(as: UInt64.self) == magic, header.load(fromByteOffset: 8, as: UInt32.self) == version else {
            return .failure(.init("the saved vector index is not one this version writes"))
        }
        guard Int(header.load(fromByteOffset: 12, as: UInt32.self)) == dimension, Int(header.load(fromByteOffset: 16, as: UInt32.self)) == words else {
            return .failure(.init("the saved vector index is of another dimension"))
        }
        let identity = [UInt8](UnsafeRawBufferPointer(start: header + 56, count: 16))
        guard identity == stamp.identity else { return .failure(.init("the saved vector index is of another store file")) }
        guard Int(header.load(fromByteOffset: 20, as: UInt32.self)) == stamp.storeFormat else {
            return .failure(.init("the saved vector index is of another store format"))
        }
        guard header.load(fromByteOffset: 48, as: Int64.self) == stamp.epoch,
              header.load(fromByteOffset: 104, as: Int64.self) == stamp.topRowid else {
            return .failure(.init("the vectors changed since the index was saved"))
        }
        let slots64 = header.load(fromByteOffset: 24, as: UInt64.self)
        let live64 = header.load(fromByteOffset: 32, as: UInt64.self), refined64 = header.load(fromByteOffset: 40, as: UInt64.self)
        // Dead slots stay below a quarter of the live ones (or 4 096: `VectorSlots.needsCompaction`).
        guard live64 <= UInt64(max(0, maxLive)), refined64 <= live64, slots64 >= live64,
              slots64 - live64 <= UInt64(max(4_096, Int(live64) / 4)) else {
            return .failure(.init("the saved vector index's counts are out of bounds"))
        }
        let slots = Int(slots64)
        let layout = Layout(slots: slots, words: words, recordBytes: recordBytes)
        // Compared as they are stored: a converting Int(_:) of a damaged field above Int.max
        // would trap, and the daemon would crash on this file at every restart.
        guard header.load(fromByteOffset: 72, as: UInt64.self) == UInt64(layout.signsOffset),
              header.load(fromByteOffset: 80, as: UInt64.self) == UInt64(layout.recordsOffset),
              header.load(fromByteOffset: 88, as: UInt64.self) == UInt64(layout.size), size == layout.size else {
            return .failure(.init("the saved vector index is cut short or too long"))
        }
        let arrays = UnsafeMutableRawPointer.allocate(byteCount: layout.signsOffset, alignment: 8)
        defer { arrays.deallocate() }
        guard RegionCopy.readFully(fd, arrays, layout.signsOffset, 0) else { return .failure(.init("the saved vector index cannot be read")) }
        guard checksum(arrays, slots: slots) == header.load(fromByteOffset: 96, as: UInt64.self) else {
            return .failure(.init("the saved vector index is corrupt (checksum)"))
        }
        let rowids = [Int64](unsafeUninitializedCapacity: slots) { b, n in
            if slots > 0 { UnsafeMutableRawPointer(b.baseAddress!).copyMemory(from: arrays + headerBytes, byteCount: slots * 8) }
            n = slots
        }
        let flags = [UInt8](unsafeUninitializedCapacity: slots) { b, n in
            if slots > 0 { UnsafeMutableRawPointer(b.baseAddress!).copyMemory(from: arrays + headerBytes + slots * 8, byteCount: slots) }
            n = slots
        }
        // The sign codes into a region of their own (in the kernel: 48 MB at 1M); the records
        // stay where they are, the file becoming their region.
        let signs = ByteRegion(directory: directory)
        guard signs.isFileBacked else { return .failure(.init("no file for the sign codes can be made")) }
        guard signs.adopt(from: fd, at: layout.signsOffset, count: slots * words * 8) else {
            return .failure(.init("the saved vector index's sign codes cannot be copied"))
        }
        let own = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        guard own >= 0 else { return .failure(.init("the saved vector index cannot be opened")) }
        let records = ByteRegion(adopting: own, base: layout.recordsOffset, count: slots * recordBytes)
        guard let storage = VectorSlots(dimension: dimension, words: words, directory: directory, rowids: rowids, flags: flags,
                                        signs: signs, records: records) else {
            return .failure(.init("the saved vector index's rowids repeat or its flags are not valid"))
        }
        guard storage.live == Int(live64), storage.refined == Int(refined64) else {
            return .failure(.init("the saved vector index's counts do not match its flags"))
        }
        // What comes before the records (header, rowids, flags, the sign codes now copied: 57 MB
        // at 1M) is never read again: its blocks go back to the file system (best effort).
        _ = sl_punch_hole(fd, 0, Int64(layout.recordsOffset))
        var index = VectorIndex(dimension: dimension, storage: storage)
        index.buildsPartition = false
        return .success(index)
    }

    /// A 64-bit checksum of the header (but the checksum's own 8 bytes at 96), the rowids and the flags.
    static func checksum(_ p: UnsafeRawPointer, slots: Int) -> UInt64 {
        let header = PartitionFile.checksum(p, 96) ^ PartitionFile.checksum(p + 104, headerBytes - 104, seed: 1)
        return PartitionFile.checksum(p + headerBytes, slots * 9, seed: header)
    }

    /// Unlinks `path` when it names the file `st` describes; false when it names another or
    /// cannot be removed (true when it names nothing).
    @discardableResult
    static func unlinkIfSame(_ path: String, _ st: stat) -> Bool {
        var now = stat()
        guard lstat(path, &now) == 0 else { return errno == ENOENT }
        guard now.st_dev == st.st_dev, now.st_ino == st.st_ino else { return false }
        return unlink(path) == 0 || errno == ENOENT
    }

}

/// Why a saved vector index was not used (`VectorIndexFile.load`): a sentence for the log.
public struct VectorIndexFileError: Error, Sendable {
    public let reason: String
    public init(_ reason: String) { self.reason = reason }
}
