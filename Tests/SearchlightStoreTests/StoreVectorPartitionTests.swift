import Foundation
@testable import SearchlightSemantic
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

    /// A partition in place reaches every live vector once (`partitionReach`: a probe of every list
    /// plus the slots searched beside them), and a partitioned search of every list with every
    /// item rescored is the exact search. (The search alone passes with a vector missing from the
    /// lists unless it lands in the top 10.)
    func expectExact(_ f: StoreFixture, _ comment: Comment? = nil) {
        // Without a partition (a file ignored, the build not done yet) every sign code is searched.
        if f.store.isVectorIndexPartitioned {
            let reach = f.store.vectors.withLoaded { $0?.partitionReach() }
            let live = f.store.vectors.counts?.vectors
            #expect(reach != nil && reach?.count == live, comment)
            #expect(reach?.values.allSatisfy { $0 == 1 } ?? false, comment)
        }
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

    @Test("a delete-all removes the saved partition with the vectors it placed, loaded or not")
    func deleteAllRemovesTheFile() throws {
        let f = try StoreFixture(rankedBuilds: false, vectors: true)
        try reopen(f)
        let file = f.dir + "/b/_default.sqlite" + IndexStore.partitionFileSuffix
        try donate(f, 0..<600)
        _ = try f.hybrid("listen to music")
        try awaitSaves(f, 1)
        #expect(FileManager.default.fileExists(atPath: file))
        _ = try f.store.applySync([.deleteAll])
        #expect(!FileManager.default.fileExists(atPath: file))
        #expect(!FileManager.default.fileExists(atPath: file + PartitionFile.temporarySuffix))
        // Not loaded: a store reopened and emptied before any semantic query.
        try donate(f, 0..<600)
        _ = try f.hybrid("listen to music")
        try awaitSaves(f, 2)
        #expect(FileManager.default.fileExists(atPath: file))
        try reopen(f)
        #expect(!f.store.vectors.isLoaded)
        _ = try f.store.applySync([.deleteAll])
        #expect(!FileManager.default.fileExists(atPath: file))
    }
}

/// A partition build under way when its store closes (`StoreVectors.close`).
@Suite("Vector partition build at close", .onOwnThreads)
struct StoreVectorPartitionCloseTests {
    /// 3 000 random vectors of 16 dimensions, partitioned above 1 000.
    static func index(_ dir: String) throws -> VectorIndex {
        var index = VectorIndex(dimension: 16, directory: dir)
        index.partitionLimit = 1_000
        index.buildsPartition = false
        var seed: UInt64 = 9
        for i in 0..<3_000 {
            let v = (0..<16).map { _ in
                seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return Float(Int(seed >> 40) % 2_001 - 1_000) / 1_000
            }
            try index.set(Int64(i + 1), QuantizedVector(v))
        }
        return index
    }

    /// Calls `vectors.close(waitingUpTo:)` on a thread of its own (it waits for the partition thread), and
    /// returns once `build` has been cancelled by it; `done` is signalled when close returns.
    static func closeAside(_ vectors: StoreVectors, _ builds: BuildBox, done: DispatchSemaphore) throws {
        Thread { _ = vectors.close(waitingUpTo: StoreVectors.closeWait); done.signal() }.start()
        let deadline = Date(timeIntervalSinceNow: 60)
        while !(builds.value?.isCancelled ?? false) {
            try #require(Date() < deadline, "close cancelled the build")
            Thread.sleep(forTimeInterval: 0.005)
        }
    }

    @Test("closing the store stops the build under way at its next check: nothing put in place, nothing saved, no more rounds")
    func closeStopsTheBuild() throws {
        let dir = NSTemporaryDirectory() + "sl-partclose-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let file = dir + "/index.sqlite-partition"
        let index = try Self.index(dir)
        // The build's first round waits until the store has closed; the round after must not begin.
        let vectors = StoreVectors()
        let begun = DispatchSemaphore(value: 0), closed = DispatchSemaphore(value: 0)
        let builds = BuildBox()
        vectors.onBuildBegun = { build in
            builds.set(build)
            build.onRound = { round in
                if round == 0 {
                    begun.signal()
                    closed.wait()
                }
            }
        }
        vectors.install(index, partitionPath: file)
        #expect(begun.wait(timeout: .now() + 60) == .success, "the build began")
        // close waits for the partition thread: the round is let go once close has cancelled it.
        let closeReturned = DispatchSemaphore(value: 0)
        try Self.closeAside(vectors, builds, done: closeReturned)
        closed.signal()
        #expect(closeReturned.wait(timeout: .now() + 60) == .success, "close returned")
        // close returned once the thread ended (the build gave up).
        #expect(!vectors.isBuildingPartition)
        let build = try #require(builds.value)
        #expect(build.isCancelled)
        #expect(build.roundsRun == 1)
        #expect(!build.hasResult)
        #expect(!vectors.isPartitioned)
        #expect(vectors.partitionSaves == 0)
        #expect(!FileManager.default.fileExists(atPath: file))
    }
    @Test("a save under way when the store closes puts no file in place (the registry may have moved or erased the store's files by then), leaves no .tmp, and close waits for it")
    func closeDuringTheSave() throws {
        let dir = NSTemporaryDirectory() + "sl-partclose-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let file = dir + "/index.sqlite-partition"
        let vectors = StoreVectors()
        let builds = BuildBox()
        let written = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        vectors.onBuildBegun = { builds.set($0) }
        // The save waits, its .tmp written, until the store has closed (and the file was unlinked).
        vectors.onSaveWritten = { _ in
            written.signal()
            release.wait()
        }
        vectors.install(try Self.index(dir), partitionPath: file)
        #expect(written.wait(timeout: .now() + 120) == .success, "the save began")
        #expect(FileManager.default.fileExists(atPath: file + ".tmp"))
        let closeReturned = DispatchSemaphore(value: 0)
        try Self.closeAside(vectors, builds, done: closeReturned)
        unlink(file)  // as a swap or an erase does once the store is closed
        release.signal()
        #expect(closeReturned.wait(timeout: .now() + 60) == .success, "close returned")
        // close returned once the thread ended; without the wait, give the thread its time.
        let deadline = Date(timeIntervalSinceNow: 60)
        while vectors.isBuildingPartition && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(!vectors.isBuildingPartition)
        #expect(!FileManager.default.fileExists(atPath: file), "the save put its file back after close")
        #expect(!FileManager.default.fileExists(atPath: file + ".tmp"))
        #expect(vectors.partitionSaves == 0)
    }
}

final class BuildBox: @unchecked Sendable {
    private let lock = NSLock()
    private var build: PartitionBuild?
    var value: PartitionBuild? { lock.withLock { build } }
    func set(_ b: PartitionBuild) { lock.withLock { build = b } }
}
