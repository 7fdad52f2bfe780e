import Foundation
@testable import SearchlightSemantic
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// The loaded vector index saved beside the store at a clean close (`<index>.sqlite-vectors`) and
/// read back by the next load instead of the table; never used once the store's vectors changed,
/// nor from another store, format or a file that is not what a save writes.
@Suite("Vector index saved beside the store", .onOwnThreads)
struct StoreVectorIndexFileTests {
    static let words = StoreVectorPartitionTests.words
    static let queries = ["listen to music", "play chess", "compile kernel", "edit an image", "network game"]

    func path(_ f: StoreFixture) -> String { f.dir + "/b/_default.sqlite" }
    func file(_ f: StoreFixture) -> String { path(f) + IndexStore.vectorIndexFileSuffix }

    /// The store reopened (partitioning above 200 vectors); with `saving`, closed as the daemon
    /// closes it at its stop, else as a crash leaves it (nothing saved).
    func reopen(_ f: StoreFixture, saving: Bool) throws {
        if saving { f.store.shutDown(savingVectors: true) } else { f.store.close() }
        var o = StoreFixture.options(f.clock, maxItems: nil, rankedBuilds: false, vectors: true)
        o.vectorPartitionLimit = 200
        f.store = try IndexStore(path: path(f), options: o)
    }

    func donate(_ f: StoreFixture, _ range: Range<Int>, variant: String = "") throws {
        let w = Self.words
        let items = try range.map { i in
            try f.item("v\(i)", ["title": .string("\(w[i % w.count]) \(w[(i / 12) % w.count]) tool \(i)\(variant)"),
                                 "textContent": .string("a \(w[(i / 7) % w.count]) program for \(w[(i / 3) % w.count]) \(variant)")])
        }
        _ = try f.store.applySync([.items(items)])
    }

    /// A store of `items` donated items whose index was loaded, then saved by a clean close and
    /// reopened (not loaded yet): the saved file is beside it.
    func savedIndex(items: Int) throws -> StoreFixture {
        let f = try StoreFixture(rankedBuilds: false, vectors: true)
        try reopen(f, saving: false)
        try donate(f, 0..<items)
        _ = try f.hybrid("listen to music")
        try reopen(f, saving: true)
        return f
    }

    /// What a search sees: the exact and the prefiltered top 10 of each query (rowids and
    /// similarities), the counts, and the hybrid user query's items.
    struct Seen: Equatable {
        var exact: [[VectorMatch]] = []
        var prefiltered: [[VectorMatch]] = []
        var counts: [Int] = []
        var hybrid: [[String]] = []
    }

    /// What searches answer. `exactOnly`: the exact scan alone, for states whose partitions
    /// differ (a prefiltered search's candidates, ties broken by the lists' order, may too).
    func seen(_ f: StoreFixture, exactOnly: Bool = false) throws -> Seen {
        var s = Seen()
        for text in Self.queries {
            let q = staticEncoder.embed(text)
            s.exact.append(f.store.vectors.search(q, k: 10, mode: .exact)?.matches ?? [])
            guard !exactOnly else { continue }
            s.prefiltered.append(f.store.vectors.search(q, k: 10, mode: .prefiltered(candidates: 50))?.matches ?? [])
            s.hybrid.append(try f.hybrid(text).items.map { $0.jsonString })
        }
        let counts = f.store.vectors.counts
        s.counts = [counts?.vectors ?? -1, counts?.refined ?? -1]
        return s
    }

    /// Waits until the loaded index is partitioned and no build (nor its save) runs.
    func waitForPartition(_ f: StoreFixture) throws {
        let deadline = Date(timeIntervalSinceNow: 120)
        while !f.store.isVectorIndexPartitioned || f.store.isBuildingVectorPartition {
            try #require(Date() < deadline, "no partition built")
            Thread.sleep(forTimeInterval: 0.01)
        }
    }

    /// The vectors the table holds, loaded afresh (the truth a saved index must equal).
    func fromTable(_ f: StoreFixture) throws -> [Int64: QuantizedVector] {
        let (index, _) = try f.store.read { db in try VectorTable().load(dimension: staticEncoder.dimension, directory: nil, partitioned: false, from: db) }
        return Dictionary(uniqueKeysWithValues: index.rowids.map { ($0, index.vector(for: $0)!) })
    }

    func loaded(_ f: StoreFixture) -> [Int64: QuantizedVector] {
        f.store.vectors.withLoaded { index in
            Dictionary(uniqueKeysWithValues: (index?.rowids ?? []).map { ($0, index!.vector(for: $0)!) })
        }
    }

    @Test("the counts of vectors not loaded (admin.status polled): one scan of the table per vector epoch; a donation, a refinement and a delete each count again")
    func countsKeptPerEpoch() throws {
        let f = try StoreFixture(rankedBuilds: false, vectors: true)
        try donate(f, 0..<30)
        #expect(!f.store.vectors.isLoaded)
        let scans = f.store.vectorCountScans.value
        #expect(try f.store.vectorCounts() == (30, 0))
        #expect(try f.store.vectorCounts() == (30, 0))
        #expect(f.store.vectorCountScans.value == scans + 1, "the same epoch: the counts kept")
        try donate(f, 30..<35)
        #expect(try f.store.vectorCounts() == (35, 0))
        _ = try f.store.refineVectors(batch: 4, order: .rowid, embed: { $0.map { staticEncoder.embed($0 + " refined") } }, yieldNow: { false })
        #expect(try f.store.vectorCounts() == (35, 35))
        _ = try f.store.applySync([.deleteIdentifiers(["v20", "v21"])])
        #expect(try f.store.vectorCounts() == (33, 33))
        #expect(f.store.vectorCountScans.value == scans + 4)
        #expect(!f.store.vectors.isLoaded, "counting loads nothing")
    }

    @Test("a clean close saves the loaded index; the next load reads it, not the table, with the same vectors and results, and removes it")
    func restartLoadsTheSavedIndex() throws {
        let f = try StoreFixture(rankedBuilds: false, vectors: true)
        try reopen(f, saving: false)
        try donate(f, 0..<600)
        // Dead slots and a slot out of rowid order: deleted items, one donated again.
        _ = try f.store.applySync([.deleteIdentifiers(["v5", "v17", "v300"])])
        try donate(f, 5..<6, variant: " back again")
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorIndexLoad == .table("no saved vector index"))
        // The partition built and saved first (an event, waited for): the same lists on both
        // sides of the restart, so that prefiltered and hybrid results compare too.
        try waitForPartition(f)
        let before = try seen(f)

        try reopen(f, saving: true)
        #expect(FileManager.default.fileExists(atPath: file(f)))
        #expect(!f.store.vectors.isLoaded)
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorIndexLoad == .savedFile)
        #expect(!FileManager.default.fileExists(atPath: file(f)), "removed once used")
        // The saved partition is restored over it as over a load from the table.
        #expect(f.store.vectorPartitionRestore?.isRestored ?? false)
        try waitForPartition(f)
        #expect(try seen(f) == before)
        #expect(try loaded(f) == fromTable(f))

        // The loaded index follows writes as before (its records' file is the adopted one).
        try donate(f, 600..<640)
        try donate(f, 10..<20, variant: " changed meaning entirely with other words")
        #expect(try loaded(f) == fromTable(f))
        // Saved again, and loaded again; without a saved partition this time, so the partition
        // is built from the adopted files (read through descriptors of their own, at their offset).
        // The exact scan only: the partition is built anew after this load.
        let after = try seen(f, exactOnly: true)
        try reopen(f, saving: true)
        for suffix in IndexStore.partitionFileSuffixes { unlink(path(f) + suffix) }
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorIndexLoad == .savedFile)
        #expect(try seen(f, exactOnly: true) == after)
        #expect(try loaded(f) == fromTable(f))
        let deadline = Date(timeIntervalSinceNow: 120)
        while !f.store.isVectorIndexPartitioned || f.store.isBuildingVectorPartition {
            try #require(Date() < deadline, "no partition built")
            Thread.sleep(forTimeInterval: 0.01)
        }
        StoreVectorPartitionTests().expectExact(f, "built from the saved index's files")
    }

    @Test("a save that would end past its deadline (the daemon's stop running late) leaves no file")
    func saveDeadline() throws {
        let f = try StoreFixture(rankedBuilds: false, vectors: true)
        try reopen(f, saving: false)
        try donate(f, 0..<100)
        _ = try f.hybrid("listen to music")
        f.store.shutDown(savingVectors: true, saveDeadline: Date(timeIntervalSinceNow: -1))
        #expect(!FileManager.default.fileExists(atPath: file(f)))
        #expect(!FileManager.default.fileExists(atPath: file(f) + VectorIndexFile.temporarySuffix))
        #expect(f.store.vectorIndexSaves == 0)
    }

    @Test("a write after the save, then a crash: the file's epoch is old, the table is read")
    func writeAfterSaveThenCrash() throws {
        let f = try savedIndex(items: 300)
        #expect(FileManager.default.fileExists(atPath: file(f)))
        // Written with the index not loaded (the file stays), then no clean close.
        try donate(f, 300..<320)
        _ = try f.store.applySync([.deleteIdentifiers(["v3"])])
        try reopen(f, saving: false)
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorIndexLoad == .table("the vectors changed since the index was saved"))
        #expect(!FileManager.default.fileExists(atPath: file(f)))
        #expect(try loaded(f) == fromTable(f))
        #expect(f.store.vectors.counts?.vectors == 319)

        // A refinement (an UPDATE of a vector) changes the epoch too.
        try reopen(f, saving: true)
        let refined = try f.store.refineVectors(batch: 4, order: .rowid, embed: { $0.map { staticEncoder.embed($0 + " refined") } },
                                                yieldNow: { false })
        #expect(refined > 0)
        try reopen(f, saving: false)
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorIndexLoad == .table("the vectors changed since the index was saved"))
        #expect(try loaded(f) == fromTable(f))

        // Loaded from the file, then a write and a crash: the file was removed when used.
        try reopen(f, saving: true)
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorIndexLoad == .savedFile)
        try donate(f, 320..<330)
        try reopen(f, saving: false)
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorIndexLoad == .table("no saved vector index"))
        #expect(try loaded(f) == fromTable(f))
    }

    @Test("a file saved by another store, or at an older epoch, is not used")
    func anotherStoreOrAnOlderEpoch() throws {
        let a = try StoreFixture(rankedBuilds: false, vectors: true), b = try StoreFixture(rankedBuilds: false, vectors: true)
        for f in [a, b] {
            try reopen(f, saving: false)
            try donate(f, 0..<300)
            _ = try f.hybrid("listen to music")
        }
        // The same items donated the same way: only the identity tells the files apart.
        try reopen(a, saving: true)
        try reopen(b, saving: false)
        try FileManager.default.copyItem(atPath: file(a), toPath: file(b))
        _ = try b.hybrid("listen to music")
        #expect(b.store.vectorIndexLoad == .table("the saved vector index is of another store file"))
        #expect(!FileManager.default.fileExists(atPath: file(b)))

        // An older save of the same store, put back after a newer one.
        let old = a.dir + "/old-vectors"
        try FileManager.default.copyItem(atPath: file(a), toPath: old)
        _ = try a.hybrid("listen to music")
        #expect(a.store.vectorIndexLoad == .savedFile)
        try donate(a, 300..<301)
        try reopen(a, saving: true)
        try FileManager.default.removeItem(atPath: file(a))
        try FileManager.default.copyItem(atPath: old, toPath: file(a))
        _ = try a.hybrid("listen to music")
        #expect(a.store.vectorIndexLoad == .table("the vectors changed since the index was saved"))
        #expect(try loaded(a) == fromTable(a))
    }

    @Test("a truncated, corrupt, FIFO, symlinked or hard-linked file is not used; a hard link planted at the .tmp is not written through")
    func untrustedFiles() throws {
        let f = try savedIndex(items: 300)
        let good = try Data(contentsOf: URL(fileURLWithPath: file(f)))
        let fm = FileManager.default

        func expectTable(_ reason: String, _ plant: () throws -> Void) throws {
            try reopen(f, saving: false)
            try? fm.removeItem(atPath: file(f))
            try plant()
            _ = try f.hybrid("listen to music")
            #expect(f.store.vectorIndexLoad == .table(reason), "\(reason)")
            #expect(try loaded(f) == fromTable(f), "\(reason)")
        }
        try expectTable("the saved vector index is cut short or too long") {
            try good.prefix(good.count - 1).write(to: URL(fileURLWithPath: file(f)))
        }
        try expectTable("the saved vector index is corrupt (checksum)") {
            var bad = good
            bad[VectorIndexFile.headerBytes + 8] ^= 0x01  // a rowid
            try bad.write(to: URL(fileURLWithPath: file(f)))
        }
        // Offsets beyond Int.max (a damaged high byte): refused, not a trap that crashes the
        // daemon at every start; and the file is gone after it.
        for offset in [72, 80, 88] {
            try expectTable("the saved vector index is cut short or too long") {
                var bad = good
                bad[offset + 7] = 0xFF
                try bad.write(to: URL(fileURLWithPath: file(f)))
            }
            #expect(!fm.fileExists(atPath: file(f)), "a refused file is removed")
        }
        try expectTable("the saved vector index is not a regular file") {
            #expect(mkfifo(file(f), 0o600) == 0)
        }
        #expect(!fm.fileExists(atPath: file(f)), "the FIFO is removed, not opened")
        let elsewhere = f.dir + "/elsewhere"
        try good.write(to: URL(fileURLWithPath: elsewhere))
        try expectTable("the saved vector index is not a regular file") {
            try fm.createSymbolicLink(atPath: file(f), withDestinationPath: elsewhere)
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: elsewhere)) == good, "the link's target is left alone")
        try expectTable("the saved vector index is not this process's own file") {
            try fm.linkItem(atPath: elsewhere, toPath: file(f))
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: elsewhere)) == good)

        // A hard link at the .tmp: the save makes a new file, the linked one is unchanged.
        let victim = f.dir + "/victim"
        try Data("victim".utf8).write(to: URL(fileURLWithPath: victim))
        try fm.linkItem(atPath: victim, toPath: file(f) + VectorIndexFile.temporarySuffix)
        try reopen(f, saving: true)
        #expect(try Data(contentsOf: URL(fileURLWithPath: victim)) == Data("victim".utf8))
        #expect(!fm.fileExists(atPath: file(f) + VectorIndexFile.temporarySuffix))
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorIndexLoad == .savedFile)
    }

    @Test("a delete-all removes the saved index, with the store's other vector side files")
    func deleteAllRemovesIt() throws {
        let f = try savedIndex(items: 300)
        #expect(FileManager.default.fileExists(atPath: file(f)))
        // The status's bytes count it with the store's other files.
        let saved = (try FileManager.default.attributesOfItem(atPath: file(f))[.size] as? Int) ?? 0
        // (The main file alone beside it: nothing writes, and the WAL can only shrink.)
        let bytes = Int64((try FileManager.default.attributesOfItem(atPath: path(f))[.size] as? Int) ?? 0)
        let summary = try f.store.summary()
        #expect(saved > 0 && summary.fileBytes >= bytes + Int64(saved), "\(summary.fileBytes) \(bytes) \(saved)")
        #expect(try IndexStore.peekSummary(at: path(f)).fileBytes >= bytes + Int64(saved))
        _ = try f.store.applySync([.deleteAll])
        for suffix in IndexStore.vectorSideFileSuffixes {
            #expect(!FileManager.default.fileExists(atPath: path(f) + suffix), "\(suffix)")
        }
        #expect(IndexStore.vectorSideFileSuffixes.contains(IndexStore.vectorIndexFileSuffix))
    }

    @Test("a store file migrated in place (format 5 to 6) or whose vector table was dropped and made again never reuses the saved index")
    func migrationInPlace() throws {
        let f = try savedIndex(items: 300)
        #expect(FileManager.default.fileExists(atPath: file(f)))
        f.store.close()
        // The file as a format-5 build would have left it, its vector table made again empty
        // (`Schema.rewrite`): nothing of it went through the writer, so the epoch did not move.
        let db = try Database(path: path(f))
        try db.execute(Schema.rewrite(toFormat: 5))
        db.close()
        try reopen(f, saving: false)
        #expect(f.store.formatVersion == Schema.formatVersion, "upgraded in place when opened")
        _ = try f.hybrid("listen to music")
        #expect(f.store.vectorIndexLoad == .table("the vectors changed since the index was saved"))
        #expect(!FileManager.default.fileExists(atPath: file(f)))
    }

    @Test("a file of another store format, dimension or epoch is refused by the file's own checks")
    func stampChecks() throws {
        let dir = NSTemporaryDirectory() + "slvecfile-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var index = VectorIndex(dimension: 384, directory: dir)
        for i in 0..<50 { try index.set(Int64(i + 1), QuantizedVector(staticEncoder.embed("item \(i)"))) }
        let stamp = VectorStamp(identity: Array(repeating: 7, count: 16), epoch: 42, storeFormat: Schema.formatVersion, topRowid: 50)
        let path = dir + "/x.sqlite-vectors"
        func attempt(_ s: VectorStamp, dimension: Int = 384, maxLive: Int = 1_000) -> String? {
            #expect(VectorIndexFile.save(index, stamp: stamp, to: path) != nil)
            switch VectorIndexFile.load(path, dimension: dimension, directory: dir, stamp: s, maxLive: maxLive) {
            case .success(let loaded):
                #expect(loaded.count == 50 && loaded.vector(for: 7) == index.vector(for: 7))
                // A partition build reads the adopted records through a frozen view: at their offset.
                let frozen = loaded.storage.records.frozen(), bytes = loaded.storage.recordBytes
                var record = [UInt8](repeating: 0, count: bytes), expected = record
                for slot in [0, 7, 49] {
                    record.withUnsafeMutableBytes { frozen.read(into: $0.baseAddress!, count: bytes, at: slot * bytes) }
                    expected.withUnsafeMutableBytes { loaded.storage.records.read(into: $0.baseAddress!, count: bytes, at: slot * bytes) }
                    #expect(record == expected && loaded.storage.record(slot).codes == index.storage.record(slot).codes, "slot \(slot)")
                }
                return nil
            case .failure(let e): return e.reason
            }
        }
        // A migration that upgrades a file in place keeps its identity; the format tells.
        var migrated = stamp
        migrated.storeFormat -= 1
        #expect(attempt(migrated) == "the saved vector index is of another store format")
        var newer = stamp
        newer.epoch += 1
        #expect(attempt(newer) == "the vectors changed since the index was saved")
        var emptied = stamp
        emptied.topRowid = 0
        #expect(attempt(emptied) == "the vectors changed since the index was saved")
        #expect(attempt(stamp, dimension: 256) == "the saved vector index is of another dimension")
        #expect(attempt(stamp, maxLive: 49) == "the saved vector index's counts are out of bounds")
        #expect(attempt(stamp) == nil)
        #expect(!FileManager.default.fileExists(atPath: path))
    }
}
