import Foundation
import Testing
@testable import SearchlightStore
import SearchlightWire

@Suite("WAL checkpoints")
struct CheckpointTests {
    /// A store that checkpoints after `checkpointFrames` frames and restarts the log at `walFrameLimit`.
    static func fixture(checkpointFrames: Int, walFrameLimit: Int = 16_384) throws -> StoreFixture {
        let f = try StoreFixture()
        var options = StoreFixture.options(f.clock, maxItems: nil)
        options.checkpointFrames = checkpointFrames
        options.walFrameLimit = walFrameLimit
        f.store.close()
        f.store = try IndexStore(path: f.dir + "/b/_default.sqlite", options: options)
        return f
    }

    /// Forty items with some text: a few dozen WAL frames per commit.
    static func batch(_ f: StoreFixture, _ n: Int) throws -> [SearchableItem] {
        try (0..<40).map { i in
            try f.item("b\(n)-\(i)", [
                "title": .string("batch \(n) item \(i)"),
                "textContent": .string(String(repeating: "words of text number \(n) \(i) ", count: 20)),
            ])
        }
    }

    /// Donates batch `n` and waits until the checkpoint it called for (if any) has run.
    static func donate(_ f: StoreFixture, batch n: Int) throws {
        _ = try f.store.applySync([.items(try batch(f, n))])
        f.store.checkpointer.waitUntilIdle()
    }

    static func fileSize(_ path: String) -> Int {
        var st = stat()
        return stat(path, &st) == 0 ? Int(st.st_size) : 0
    }

    @Test("the checkpointer thread, not the writer, copies the WAL into the file, and the log starts over")
    func background() throws {
        let f = try Self.fixture(checkpointFrames: 20)
        let file = f.dir + "/b/_default.sqlite"
        var writerAutocheckpoint = -1
        _ = try f.store.writeSync { store in
            writerAutocheckpoint = try store.writer.intScalar("PRAGMA wal_autocheckpoint")
            return ApplyResult()
        }
        #expect(writerAutocheckpoint == 0, "the writer never checkpoints")

        var largestWAL = 0
        for n in 0..<60 {
            try Self.donate(f, batch: n)
            largestWAL = max(largestWAL, Self.fileSize(file + "-wal"))
        }
        let stats = f.store.checkpointer.statistics
        let pageSize = try Database(path: file).intScalar("PRAGMA page_size")
        #expect(stats.passes >= 10, "\(stats)")
        // Without checkpoints the log would hold every frame written; it is reused from its start instead.
        #expect(largestWAL * 4 < stats.framesWritten * pageSize, "largest WAL \(largestWAL) bytes, \(stats)")
        #expect(stats.walFrames < stats.framesWritten / 4, "\(stats)")

        f.store.close()
        #expect(Self.fileSize(file + "-wal") == 0, "closing checkpoints everything and truncates the log")
        try f.reopen()
        #expect(f.store.count == 60 * 40)
        #expect(try f.attributes("b59-39")?["title"] == "batch 59 item 39")
        #expect(try f.store.check(repair: false).ok)
    }

    @Test("a reader holding an old snapshot keeps the WAL past its limit only until it lets go", .timeLimit(.minutes(1)))
    func boundedWAL() throws {
        let f = try Self.fixture(checkpointFrames: 20, walFrameLimit: 100)
        try f.donate(try f.item("first"))
        let reader = try Database(path: f.dir + "/b/_default.sqlite")
        try reader.execute("BEGIN")
        #expect(try reader.intScalar("SELECT count(*) FROM items") == 1)

        var n = 0
        while f.store.checkpointer.statistics.busyRestarts == 0 && n < 50 {
            try Self.donate(f, batch: n)
            n += 1
        }
        let pinned = f.store.checkpointer.statistics
        #expect(pinned.busyRestarts == 1, "the RESTART waited for the reader, then let the writer go on: \(pinned)")
        #expect(pinned.restarts == 0 && pinned.walFrames >= 100, "\(pinned)")

        try reader.execute("COMMIT")
        while f.store.checkpointer.statistics.walFrames >= 100 && n < 100 {
            try Self.donate(f, batch: n)
            n += 1
        }
        let released = f.store.checkpointer.statistics
        #expect(released.restarts >= 1 && released.walFrames < 100, "the next try restarted the log: \(released)")
        #expect(f.store.count == 1 + n * 40)
        #expect(try reader.intScalar("SELECT count(*) FROM items") == 1 + n * 40)
    }
}
