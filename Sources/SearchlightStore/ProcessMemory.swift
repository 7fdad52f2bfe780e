import CSQLite
import Foundation

/// The daemon's memory as the kernel, glibc's allocator and SQLite count it (`admin.status`'s
/// `memory`): what is resident and of what kind, how much of the heap is in use and how much is
/// free but kept, and SQLite's share of it.
public struct ProcessMemory: Sendable, Equatable {
    /// VmRSS, RssAnon and RssFile of /proc/self/status, bytes.
    public var residentBytes = 0
    public var anonymousBytes = 0
    public var fileBytes = 0
    /// mallinfo2 over every arena: taken from the system (sbrk and mmap), in use, free but kept.
    public var mallocArenaBytes = 0
    public var mallocMmapBytes = 0
    public var mallocInUseBytes = 0
    public var mallocFreeBytes = 0
    /// sqlite3_memory_used, its highwater, and the page caches' share of it.
    public var sqliteBytes = 0
    public var sqliteHighwaterBytes = 0
    public var sqlitePageCacheBytes = 0
    /// Heap trims since the start once reads went quiet (`HeapTrimmer`).
    public var quietTrims = 0

    public static func current() -> ProcessMemory {
        var m = ProcessMemory()
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) {
            for line in status.split(separator: "\n") {
                let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard parts.count >= 2, let kib = Int(parts[1]) else { continue }
                switch parts[0] {
                case "VmRSS:": m.residentBytes = kib * 1024
                case "RssAnon:": m.anonymousBytes = kib * 1024
                case "RssFile:": m.fileBytes = kib * 1024
                default: break
                }
            }
        }
        let f = csqlite_malloc_stats()
        m.mallocArenaBytes = f.arena
        m.mallocMmapBytes = f.mmapped
        m.mallocInUseBytes = f.inUse
        m.mallocFreeBytes = f.free
        var used: sqlite3_int64 = 0, high: sqlite3_int64 = 0, cache: sqlite3_int64 = 0
        csqlite_memory(&used, &high, &cache)
        m.sqliteBytes = Int(used)
        m.sqliteHighwaterBytes = Int(high)
        m.sqlitePageCacheBytes = Int(cache)
        m.quietTrims = HeapTrimmer.shared.trims
        return m
    }

    /// Hands the heap's free memory at its top and in whole free pages back to the system
    /// (glibc's malloc_trim). Called by `HeapTrimmer` alone, on its own thread: once reads go
    /// quiet, and after a load, a partition build, a write stream or a ranked build asked for it
    /// (their temporaries would otherwise stay resident, free but kept, in the arena of the
    /// thread that made them). `SEARCHLIGHT_HEAP_TRIM=0` turns it off (for measuring against no
    /// trim).
    public static func releaseFreeHeap() {
        guard HeapTrimmer.enabled else { return }
        csqlite_release_heap()
    }
}
