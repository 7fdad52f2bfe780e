import Foundation
import SearchlightSemantic
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// The vector index's partition saved beside the store (`<index>.sqlite-partition`) and in place
/// from the first query after a restart; a file that does not fit the store is not trusted.
@Suite("Vector partition saved beside the store", .onOwnThreads)
struct StoreVectorPartitionTests {
    static let words = ["music", "chess", "mail", "compiler", "image", "editor", "network", "game", "font", "database", "kernel", "shell"]

    /// The store reopened partitioning above 200 vectors (600 here: 16 lists).
    func reopen(_ f: StoreFixture) throws {
        f.store.close()
        var o = StoreFixture.options(f.clock, maxItems: nil, rankedBuilds: false, vectors: true)
        o.vectorPartitionLimit = 200
        f.store = try IndexStore(path: f.dir + "/b/_default.sqlite", options: o)
    }

    func donate(_ f: StoreFixture, _ range: Range<Int>, variant: String = "") throws {
        let w = Self.words
        let items = try range.map { i in
            try f.item("p\(i)", ["title": .string("\(w[i % w.count]) \(w[(i / 12) % w.count]) tool \(i)\(variant)"),
                                 "textContent": .string("a \(w[(i / 7) % w.count]) program for \(w[(i / 3) % w.count]) \(variant)")])
        }
        _ = try f.store.applySync([.items(items)])
    }

    /// Waits (on this test's own thread) until the store has saved `n` partitions.
    func awaitSaves(_ f: StoreFixture, _ n: Int) throws {
        let deadline = Date(timeIntervalSinceNow: 120)
        while f.store.vectorPartitionSaves < n {
            try #require(Date() < deadline, "no partition saved")
            Thread.sleep(forTimeInterval: 0.01)
        }
    }

    /// A partitioned search of every list with every item rescored is the exact search.
    func expectExact(_ f: StoreFixture, _ comment: Comment? = nil) {
        for text in ["listen to music", "play chess", "compile kernel"] {
            let q = staticEncoder.embed(text)
            let probed = f.store.vectors.search(q, k: 10, mode: .prefiltered(candidates: 599))?.matches.map(\.rowid)
            let exact = f.store.vectors.search(q, k: 10, mode: .exact)?.matches.map(\.rowid)
            #expect(probed != nil && probed == exact, comment)
        }
    }

    @Test("a restart finds the partition in place at its first query; vectors changed since it was saved (the crash window) are searched beside it; a corrupt or truncated file is ignored, rebuilt and saved again")
    func restart() throws {
        let f = try StoreFixture(rankedBuilds: false, vectors: true)
        try reopen(f)
        let file = f.dir + "/b/_default.sqlite" + IndexStore.partitionFileSuffix
        try donate(f, 0..<600)
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorPartitionRestore == .ignored("no saved partition"))
        try awaitSaves(f, 1)
        #expect(FileManager.default.fileExists(atPath: file))

        try reopen(f)
        #expect(f.store.vectorPartitionRestore == nil)
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorPartitionRestore == .restored(placed: 600, unplaced: 0))
        #expect(f.store.isVectorIndexPartitioned)
        #expect(!f.store.isBuildingVectorPartition)
        expectExact(f)

        // 20 items change after the file was written, and the store restarts before any rebuild
        // (20 is below what makes one due): a crash between the store's commit and the file's.
        try donate(f, 100..<120, variant: " changed meaning entirely with other words")
        try reopen(f)
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorPartitionRestore == .restored(placed: 580, unplaced: 20))
        #expect(f.store.isVectorIndexPartitioned)
        expectExact(f, "changed since saved")

        // A corrupt file, then a truncated one: ignored, the partition built again and saved.
        var bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        bytes[bytes.count / 2] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: file))
        try reopen(f)
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorPartitionRestore == .ignored("the saved partition is corrupt (checksum)"))
        expectExact(f, "corrupt")
        try awaitSaves(f, 1)
        expectExact(f, "corrupt, rebuilt")
        try reopen(f)
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorPartitionRestore == .restored(placed: 600, unplaced: 0))

        let saved = try Data(contentsOf: URL(fileURLWithPath: file))
        try saved.prefix(saved.count - 100).write(to: URL(fileURLWithPath: file))
        try reopen(f)
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorPartitionRestore == .ignored("the saved partition is cut short or too long"))
        expectExact(f, "truncated")
        try awaitSaves(f, 1)
        try reopen(f)
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorPartitionRestore == .restored(placed: 600, unplaced: 0))
    }
}
