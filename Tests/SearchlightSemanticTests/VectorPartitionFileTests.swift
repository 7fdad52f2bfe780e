import Foundation
import Testing
import TestThreads
@testable import SearchlightSemantic

/// The partition saved beside a store (`PartitionFile`) and restored on the next load, and a
/// build that stops when asked (`PartitionBuild.cancel`).
@Suite("Vector partition file", .onOwnThreads)
struct VectorPartitionFileTests {
    let dir: String
    let file: String

    init() throws {
        dir = NSTemporaryDirectory() + "sl-vecpartfile-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        file = dir + "/index.sqlite-partition"
    }

    /// 4 000 vectors (rowids 0, 2, 4, …) in an index partitioned above 1 000, as a load makes it
    /// (no partition built while it fills).
    func loaded(_ vectors: [Int64: QuantizedVector]) throws -> VectorIndex {
        var index = VectorIndex(dimension: 32, directory: dir)
        index.partitionLimit = 1_000
        index.exactLimit = 500
        index.minimumCandidates = 300
        index.buildsPartition = false
        for rowid in vectors.keys.sorted() { try index.set(rowid, vectors[rowid]!) }
        return index
    }

    func vectors(seed: UInt64) -> [Int64: QuantizedVector] {
        var source = VectorSource(seed: seed, dimension: 32)
        var out: [Int64: QuantizedVector] = [:]
        for i in 0..<4_000 { out[Int64(i * 2)] = QuantizedVector(source.vector()) }
        return out
    }

    /// Builds the partition of `vectors` and saves it (the daemon's thread, after a build).
    func saved(_ vectors: [Int64: QuantizedVector]) throws -> VectorIndex {
        var index = try loaded(vectors)
        let begun = index.beginPartitionBuild()
        let build = try #require(begun)
        build.run()
        let finished1 = index.finishPartitionBuild(build)
        #expect(finished1)
        #expect(build.save(to: file))
        return index
    }

    /// Every live vector reached once; a search of every list with every item rescored is exact.
    func expectWhole(_ index: VectorIndex, _ model: [Int64: QuantizedVector], _ comment: Comment? = nil) throws {
        let reach = try #require(index.partitionReach(), comment)
        #expect(reach.count == model.count, comment)
        #expect(reach.values.allSatisfy { $0 == 1 }, comment)
        #expect(Set(reach.keys) == Set(model.keys), comment)
        var probed = index
        probed.probes = index.partitionLists
        var queries = VectorSource(seed: 77, dimension: 32)
        for _ in 0..<5 {
            let q = queries.vector()
            #expect(probed.search(q, k: 10, mode: .prefiltered(candidates: index.count - 1)).map(\.rowid)
                == index.search(q, k: 10, mode: .exact).map(\.rowid), comment)
        }
    }

    @Test("a saved partition is in place from the load: the same lists, the same answers, nothing to build")
    func restoredAfterRestart() throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let model = vectors(seed: 41)
        let before = try saved(model)
        var after = try loaded(model)
        #expect(!after.isPartitioned)
        let restored = after.restorePartition(from: file)
        #expect(restored == .restored(placed: 4_000, unplaced: 0))
        #expect(after.isPartitioned)
        #expect(after.partitionLists == before.partitionLists)
        #expect(!after.isPartitionDue)
        try expectWhole(after, model)
        var queries = VectorSource(seed: 78, dimension: 32)
        for _ in 0..<20 {
            let q = queries.vector()
            #expect(after.search(q, k: 10).map(\.rowid) == before.search(q, k: 10).map(\.rowid))
        }
    }

    @Test("vectors changed, added or removed after the file was written (a crash between the store's commit and the file's rewrite) are not trusted to it: searched beside the lists, answers exact")
    func changedSinceSaved() throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var model = vectors(seed: 42)
        _ = try saved(model)
        var source = VectorSource(seed: 43, dimension: 32)
        for i in stride(from: 0, to: 8_000, by: 80) { model[Int64(i)] = QuantizedVector(source.vector(), refined: true) }  // 100 replaced
        for i in stride(from: 2, to: 8_000, by: 200) { model[Int64(i)] = nil }  // 40 removed
        for i in 0..<50 { model[Int64(9_001 + i * 2)] = QuantizedVector(source.vector()) }  // 50 added
        var after = try loaded(model)
        let restored = after.restorePartition(from: file)
        #expect(restored == .restored(placed: model.count - 150, unplaced: 150))
        try expectWhole(after, model)
        // Each changed vector is found by a search of one list.
        after.probes = 1
        for i in stride(from: 0, to: 8_000, by: 80) {
            #expect(after.search(model[Int64(i)]!.values, k: 1).first?.rowid == Int64(i))
        }
    }

    @Test("a file cut short, corrupt, of another index, of another dimension, too stale, or a link is ignored: no partition until one is built, answers exact")
    func untrustedFiles() throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let model = vectors(seed: 44)
        _ = try saved(model)
        let good = try Data(contentsOf: URL(fileURLWithPath: file))
        func expectIgnored(_ bytes: Data?, _ reason: String, link: String? = nil) throws {
            try? FileManager.default.removeItem(atPath: file)
            if let bytes { try bytes.write(to: URL(fileURLWithPath: file)) }
            if let link { try FileManager.default.createSymbolicLink(atPath: file, withDestinationPath: link) }
            var index = try loaded(model)
            let restore = index.restorePartition(from: file)
            guard case .ignored(let why) = restore else {
                Issue.record("\(reason): \(restore)")
                return
            }
            #expect(why.contains(reason), "\(why)")
            #expect(!index.isPartitioned)
            #expect(index.isPartitionDue)  // built as before
            var queries = VectorSource(seed: 79, dimension: 32)
            for _ in 0..<3 {
                let q = queries.vector()
                #expect(index.search(q, k: 10, mode: .prefiltered(candidates: index.count - 1)).map(\.rowid)
                    == index.search(q, k: 10, mode: .exact).map(\.rowid))
            }
            // The next build is whole, and its file restores.
            let begun1 = index.beginPartitionBuild()
            let build = try #require(begun1)
            build.run()
            let finished2 = index.finishPartitionBuild(build)
            #expect(finished2)
            try expectWhole(index, model, "\(reason)")
        }
        try expectIgnored(nil, "no saved partition")
        try expectIgnored(good.prefix(good.count - 3), "cut short")
        try expectIgnored(good.prefix(20), "cut short")
        var flipped = good
        flipped[good.count / 2] ^= 0x10
        try expectIgnored(flipped, "corrupt")
        var header = good
        header[33] ^= 0x01  // the entry count: the size no longer matches
        try expectIgnored(header, "cut short or too long")
        var huge = good
        huge.replaceSubrange(32..<40, with: [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F])
        try expectIgnored(huge, "out of bounds")
        try expectIgnored(Data(repeating: 0x41, count: good.count), "not one this version writes")
        try good.write(to: URL(fileURLWithPath: dir + "/elsewhere"))
        try expectIgnored(nil, "cannot be opened", link: dir + "/elsewhere")
        // Another index's file (another generation of this one: every vector since replaced).
        let otherModel = vectors(seed: 45)
        _ = try saved(otherModel)
        let other = try Data(contentsOf: URL(fileURLWithPath: file))
        try expectIgnored(other, "changed since the partition was saved")
        // A well-formed file that places nothing.
        let empty = PartitionFile.Contents(dimension: 32, words: 1, trainedLive: 4_000, centroids: [Int8](repeating: 1, count: 16 * 32),
                                           scales: [Float](repeating: 0.01, count: 16), rowids: [], lists: [], hashes: [])
        #expect(PartitionFile.write(empty, to: file))
        try expectIgnored(try Data(contentsOf: URL(fileURLWithPath: file)), "changed since the partition was saved")
        // Another dimension.
        var wide = VectorIndex(dimension: 64, directory: dir)
        wide.partitionLimit = 1_000
        wide.buildsPartition = false
        var source = VectorSource(seed: 46, dimension: 64)
        for i in 0..<2_000 { try wide.set(Int64(i), QuantizedVector(source.vector())) }
        let begun2 = wide.beginPartitionBuild()
        let build = try #require(begun2)
        build.run()
        let finished3 = wide.finishPartitionBuild(build)
        #expect(finished3)
        #expect(build.save(to: file))
        try expectIgnored(try Data(contentsOf: URL(fileURLWithPath: file)), "another dimension")
    }

    @Test("a build asked to stop stops between k-means rounds and leaves nothing to put in place; one stopped before it ran does no round")
    func cancelledBuild() throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var index = try loaded(vectors(seed: 47))
        let begun3 = index.beginPartitionBuild()
        let first = try #require(begun3)
        first.onRound = { round in if round == 2 { first.cancel() } }
        first.run()
        #expect(first.roundsRun == 3)
        #expect(first.isCancelled && !first.hasResult)
        let finished4 = index.finishPartitionBuild(first)
        #expect(!finished4)
        #expect(!index.isPartitioned)
        #expect(!first.save(to: file))
        #expect(!FileManager.default.fileExists(atPath: file))
        index.cancelPartitionBuild(first)
        let begun4 = index.beginPartitionBuild()
        let second = try #require(begun4)
        second.cancel()
        second.run()
        #expect(second.roundsRun == 0 && !second.hasResult)
        index.cancelPartitionBuild(second)
        // The next build, not stopped, is put in place.
        let begun5 = index.beginPartitionBuild()
        let third = try #require(begun5)
        third.run()
        #expect(third.roundsRun == 8)
        let finished5 = index.finishPartitionBuild(third)
        #expect(finished5)
        #expect(index.isPartitioned)
    }
    @Test("a FIFO planted at the file's path is refused without blocking the reading thread; a hard link planted at the .tmp path is not written through")
    func plantedFiles() throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // The read runs on a thread of its own, waited for with a bound: the test fails, never hangs.
        #expect(mkfifo(file, 0o600) == 0)
        let answered = DispatchSemaphore(value: 0)
        let outcome = ResultBox()
        let path = file
        Thread {
            outcome.set(PartitionFile.read(path, dimension: 32, words: 1, maxEntries: 10_000))
            answered.signal()
        }.start()
        let inTime = answered.wait(timeout: .now() + 30) == .success
        #expect(inTime, "reading a FIFO blocked")
        if !inTime {
            // Frees the blocked reader: a writer opening the FIFO lets its open return.
            let w = open(file, O_WRONLY | O_NONBLOCK)
            if w >= 0 { close(w) }
            _ = answered.wait(timeout: .now() + 30)
        }
        if case .failure(let error)? = outcome.value {
            #expect(error.reason == "the saved partition is not a regular file")
        } else {
            Issue.record("a FIFO was read as a partition")
        }
        unlink(file)

        // A hard link at the .tmp path to another file: the save makes a new file instead.
        let victim = dir + "/victim"
        try Data("keep".utf8).write(to: URL(fileURLWithPath: victim))
        #expect(link(victim, file + PartitionFile.temporarySuffix) == 0)
        let contents = PartitionFile.Contents(dimension: 32, words: 1, trainedLive: 4_000, centroids: [Int8](repeating: 1, count: 16 * 32),
                                              scales: [Float](repeating: 0.01, count: 16), rowids: [1, 2], lists: [0, 1], hashes: [7, 8])
        #expect(PartitionFile.write(contents, to: file))
        #expect(try Data(contentsOf: URL(fileURLWithPath: victim)) == Data("keep".utf8))
        #expect(!FileManager.default.fileExists(atPath: file + PartitionFile.temporarySuffix))
        let back = PartitionFile.read(file, dimension: 32, words: 1, maxEntries: 10_000)
        #expect((try? back.get())?.rowids == [1, 2])
        // A save whose publish declines leaves neither file nor .tmp.
        unlink(file)
        #expect(!PartitionFile.write(contents, to: file, publish: { _ in false }))
        #expect(!FileManager.default.fileExists(atPath: file))
        #expect(!FileManager.default.fileExists(atPath: file + PartitionFile.temporarySuffix))
    }

    @Test("after the rename the directory holding the file is synced: its own, the root's, the working one's")
    func directorySynced() {
        // Which directory: pure, so the host's root and working directory are never synced here.
        #expect(SideFile.directory(of: file) == dir)
        #expect(SideFile.directory(of: "/index.sqlite-partition") == "/")
        #expect(SideFile.directory(of: "index.sqlite-partition") == ".")
        // The sync itself, in the test's own directory; one that does not exist is not synced.
        #expect(SideFile.syncDirectory(of: file) == dir)
        #expect(SideFile.syncDirectory(of: dir + "/missing/index.sqlite-partition") == nil)
    }
}

private final class ResultBox: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Result<PartitionFile.Contents, PartitionFileError>?
    var value: Result<PartitionFile.Contents, PartitionFileError>? { lock.withLock { result } }
    func set(_ r: Result<PartitionFile.Contents, PartitionFileError>) { lock.withLock { result = r } }
}
