import Glibc

/// What `VectorIndex.restorePartition` did with a saved partition.
public enum PartitionRestore: Sendable, Equatable {
    /// Nothing restored: no file, or one not trusted (why); the partition is built as before.
    case ignored(String)
    /// In place: `placed` slots in their saved lists, `unplaced` (changed or added since it was
    /// saved) searched beside them until the next rebuild.
    case restored(placed: Int, unplaced: Int)

    public var isRestored: Bool { if case .restored = self { true } else { false } }
}

/// A partition saved beside its store (`<index>.sqlite-partition`), so that an index loaded after
/// a restart is probed from its first query rather than scanned whole until a build (3.3 s of CPU
/// at 1M) ends. It holds the centroids and, for each item placed, its rowid, its list and a hash
/// of the sign code the list held for it. Nothing in it is trusted as is:
///
/// - the whole file is checked (a checksum over every byte, its size against its counts, every
///   count bounded) before anything of it is used: a truncated, corrupt or foreign file is ignored;
/// - an entry is used only when its rowid has a live vector whose sign code hashes as saved: a
///   vector changed since (a donation, a refinement, a crash between the store's commit and this
///   file's rewrite) is searched beside the lists as a moved slot, and a deleted one is skipped;
/// - the lists' copies of the sign codes are made again from the index's own files, so a hash
///   that matched by chance costs only that item's placement, never a wrong distance.
///
/// The file is read by the daemon, root in system mode: it is opened without following a link,
/// must be a regular file, and is read whole only once its size matches what its header says,
/// within bounds set by the index it is restored into.
public enum PartitionFile {
    static let magic: UInt64 = 0x3154_5241_5056_4C53  // "SLVPART1", little-endian
    static let version: UInt32 = 1
    static let headerBytes = 48
    static let maxLists = 4_096

    struct Contents {
        var dimension: Int
        var words: Int
        var trainedLive: Int
        var centroids: [Int8]
        var scales: [Float]
        /// Strictly ascending.
        var rowids: [Int64]
        var lists: [UInt16]
        var hashes: [UInt32]
    }

    /// A 32-bit hash of one sign code.
    static func signHash(_ p: UnsafePointer<UInt64>, words: Int) -> UInt32 {
        var h: UInt64 = 0x9E37_79B9_7F4A_7C15
        for i in 0..<words {
            h = (h ^ p[i]) &* 0xBF58_476D_1CE4_E5B9
            h ^= h >> 31
        }
        return UInt32(truncatingIfNeeded: h >> 32)
    }

    /// A 64-bit checksum of `n` bytes (eight at a time, then the tail).
    static func checksum(_ p: UnsafeRawPointer, _ n: Int, seed: UInt64 = 0) -> UInt64 {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325 ^ seed ^ UInt64(n)
        var i = 0
        while i + 8 <= n {
            h = (h ^ p.loadUnaligned(fromByteOffset: i, as: UInt64.self)) &* 0x0000_0100_0000_01B3
            h ^= h >> 29
            i += 8
        }
        while i < n {
            h = (h ^ UInt64(p.load(fromByteOffset: i, as: UInt8.self))) &* 0x0000_0100_0000_01B3
            i += 1
        }
        return h ^ (h >> 32)
    }

    static func size(dimension: Int, lists: Int, entries: Int) -> Int {
        headerBytes + lists * dimension + lists * 4 + entries * (8 + 4 + 2)
    }

    /// The suffix of the file a save writes before renaming it over the saved one.
    public static let temporarySuffix = SideFile.temporarySuffix

    /// Writes `contents` to `path` by a new file, fsynced, renamed over it (a reader sees the old
    /// file or the new one whole; a crash may leave a partial `.tmp`, never read). False on any
    /// failure, or when `cancelled` turns true before the rename, or `publish` (given the rename,
    /// to run under its caller's lock, or not) does not rename: the `.tmp` is removed then.
    ///
    /// The `.tmp` is made anew (`O_EXCL`, after removing what was there, not following a link):
    /// a file planted at that path (a hard link to another file) is never opened and overwritten.
    /// It is renamed or removed only while it is still the file this call made.
    static func write(_ c: Contents, to path: String, cancelled: () -> Bool = { false },
                      publish: (_ rename: () -> Bool) -> Bool = { $0() }) -> Bool {
        let lists = c.scales.count, n = c.rowids.count
        let total = size(dimension: c.dimension, lists: lists, entries: n)
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: total, alignment: 8)
        defer { buffer.deallocate() }
        var at = headerBytes
        func put<T>(_ a: [T]) {
            a.withUnsafeBytes { if let p = $0.baseAddress { (buffer + at).copyMemory(from: p, byteCount: $0.count) } }
            at += a.count * MemoryLayout<T>.stride
        }
        put(c.rowids)
        put(c.hashes)
        put(c.lists)
        put(c.scales)
        put(c.centroids)
        precondition(at == total)
        buffer.storeBytes(of: magic, toByteOffset: 0, as: UInt64.self)
        buffer.storeBytes(of: version, toByteOffset: 8, as: UInt32.self)
        buffer.storeBytes(of: UInt32(c.dimension), toByteOffset: 12, as: UInt32.self)
        buffer.storeBytes(of: UInt32(c.words), toByteOffset: 16, as: UInt32.self)
        buffer.storeBytes(of: UInt32(lists), toByteOffset: 20, as: UInt32.self)
        buffer.storeBytes(of: UInt64(c.trainedLive), toByteOffset: 24, as: UInt64.self)
        buffer.storeBytes(of: UInt64(n), toByteOffset: 32, as: UInt64.self)
        buffer.storeBytes(of: checksum(buffer + headerBytes, total - headerBytes, seed: checksum(buffer, 40)), toByteOffset: 40, as: UInt64.self)
        if cancelled() { return false }
        return SideFile.replace(path, cancelled: cancelled, publish: publish) { fd in RegionCopy.writeFully(fd, buffer, total, 0) }
    }

    /// The contents of the file at `path`, checked whole; or why it is not to be trusted.
    /// `maxEntries` bounds what is read (the caller's live items, with room for deleted ones).
    static func read(_ path: String, dimension: Int, words: Int, maxEntries: Int) -> Result<Contents, PartitionFileError> {
        // Without blocking: a FIFO planted at the path would otherwise hold the opening thread (the
        // store's writer, where the load runs) until something writes to it.
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return .failure(.init(errno == ENOENT ? "no saved partition" : "the saved partition cannot be opened")) }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return .failure(.init("the saved partition is not a regular file")) }
        let fileSize = Int(st.st_size)
        let largest = size(dimension: dimension, lists: maxLists, entries: maxEntries)
        guard fileSize >= headerBytes else { return .failure(.init("the saved partition is cut short")) }
        guard fileSize <= largest else { return .failure(.init("the saved partition is larger than this index allows")) }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: fileSize, alignment: 8)
        defer { buffer.deallocate() }
        var done = 0
        while done < fileSize {
            let r = pread(fd, buffer + done, fileSize - done, off_t(done))
            if r > 0 { done += r; continue }
            if r < 0 && errno == EINTR { continue }
            break
        }
        guard done == fileSize else { return .failure(.init("the saved partition cannot be read")) }
        guard buffer.load(fromByteOffset: 0, as: UInt64.self) == magic,
              buffer.load(fromByteOffset: 8, as: UInt32.self) == version else {
            return .failure(.init("the saved partition is not one this version writes"))
        }
        let fileDimension = Int(buffer.load(fromByteOffset: 12, as: UInt32.self))
        let fileWords = Int(buffer.load(fromByteOffset: 16, as: UInt32.self))
        let lists = Int(buffer.load(fromByteOffset: 20, as: UInt32.self))
        let trainedLive = buffer.load(fromByteOffset: 24, as: UInt64.self)
        let entries = buffer.load(fromByteOffset: 32, as: UInt64.self)
        guard fileDimension == dimension, fileWords == words else { return .failure(.init("the saved partition is of another dimension")) }
        guard lists >= 1, lists <= maxLists, entries <= UInt64(maxEntries), trainedLive <= 1 << 40 else {
            return .failure(.init("the saved partition's counts are out of bounds"))
        }
        let n = Int(entries)
        guard size(dimension: dimension, lists: lists, entries: n) == fileSize else { return .failure(.init("the saved partition is cut short or too long")) }
        let sum = checksum(buffer + headerBytes, fileSize - headerBytes, seed: checksum(buffer, 40))
        guard buffer.load(fromByteOffset: 40, as: UInt64.self) == sum else { return .failure(.init("the saved partition is corrupt (checksum)")) }
        var at = headerBytes
        func take<T>(_ count: Int, _ zero: T) -> [T] {
            var a = [T](repeating: zero, count: count)
            a.withUnsafeMutableBytes { if let p = $0.baseAddress { p.copyMemory(from: buffer + at, byteCount: $0.count) } }
            at += count * MemoryLayout<T>.stride
            return a
        }
        let rowids: [Int64] = take(n, 0)
        let hashes: [UInt32] = take(n, 0)
        let entryLists: [UInt16] = take(n, 0)
        let scales: [Float] = take(lists, 0)
        let centroids: [Int8] = take(lists * dimension, 0)
        for i in 0..<n {
            guard Int(entryLists[i]) < lists, i == 0 || rowids[i] > rowids[i - 1] else {
                return .failure(.init("the saved partition's entries are out of order or name no list"))
            }
        }
        guard scales.allSatisfy({ $0.isFinite }) else { return .failure(.init("the saved partition's centroids are not valid")) }
        return .success(Contents(dimension: dimension, words: words, trainedLive: Int(trainedLive), centroids: centroids, scales: scales,
                                 rowids: rowids, lists: entryLists, hashes: hashes))
    }
}

struct PartitionFileError: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}
