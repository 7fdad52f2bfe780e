import Foundation
import Testing
import TestThreads
@testable import SearchlightSemantic

/// The coarse partition of large indexes (`VectorPartition`): every live vector in exactly one
/// place a search reads, whatever changes, and the recall of a partitioned search.
@Suite("Vector partition", .onOwnThreads)
struct VectorPartitionTests {
    func directory() throws -> String {
        let dir = NSTemporaryDirectory() + "sl-vecpart-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    @Test("every live vector is reached exactly once, a removed one never, through appends, out-of-order sets, replacements, removals, revivals, rebuilds and compactions")
    func placement() throws {
        let dir = try directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var source = VectorSource(seed: 31, dimension: 32)
        var index = VectorIndex(dimension: 32, directory: dir)
        index.partitionLimit = 1_000
        var model: [Int64: QuantizedVector] = [:]
        var ever: [Int64] = []
        var seed: UInt64 = 5
        func next(_ n: Int) -> Int {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((seed >> 33) % UInt64(n))
        }
        var checks = 0, rebuiltLists = Set<Int>()
        func check() {
            guard let reach = index.partitionReach() else { return }
            checks += 1
            rebuiltLists.insert(index.partitionLists)
            #expect(reach.count == model.count)
            #expect(reach.values.allSatisfy { $0 == 1 })
            #expect(Set(reach.keys) == Set(model.keys))
        }
        for step in 0..<40_000 {
            let op = next(10)
            if op < 4 || model.count < 2_000 {
                let rowid = Int64(100_000 + step * 2)
                let v = QuantizedVector(source.vector())
                try index.set(rowid, v)
                model[rowid] = v
                ever.append(rowid)
            } else if op < 5 {
                let rowid = Int64(next(90_000))
                let v = QuantizedVector(source.vector())
                try index.set(rowid, v)
                model[rowid] = v
                ever.append(rowid)
            } else if op < 8, let rowid = ever.isEmpty ? nil : ever[next(ever.count)] {
                // Removals, and revivals of removed rowids.
                if model[rowid] != nil {
                    index.remove(rowid)
                    model[rowid] = nil
                } else {
                    let v = QuantizedVector(source.vector())
                    try index.set(rowid, v)
                    model[rowid] = v
                }
            } else if let rowid = ever.isEmpty ? nil : ever[next(ever.count)], model[rowid] != nil {
                let v = QuantizedVector(source.vector(), refined: true)
                try index.set(rowid, v)
                model[rowid] = v
            }
            if step % 2_500 == 0 { check() }
        }
        check()
        #expect(checks > 10)
        #expect(index.isPartitioned)
        // A search of every list with every item rescored is the exact search.
        index.probes = index.partitionLists
        for _ in 0..<5 {
            let q = source.vector()
            #expect(index.search(q, k: 10, mode: .prefiltered(candidates: index.count - 1)).map(\.rowid)
                == index.search(q, k: 10, mode: .exact).map(\.rowid))
        }
        index.compact()
        check()
    }

    @Test("a partitioned search finds nearly what the unpartitioned prefilter finds (recall@10 against exact within 0.10, 12 probes), before and after the index doubles (retraining)")
    func recall() throws {
        let dir = try directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var source = VectorSource(seed: 32, dimension: 64, centres: 64)
        var index = VectorIndex(dimension: 64, directory: dir)
        index.partitionLimit = 2_000
        index.exactLimit = 1_000
        index.minimumCandidates = 1_000
        index.probes = 12
        func measure(_ partitioned: Bool) -> Double {
            index.usesPartition = partitioned
            var found = 0, total = 0
            var qs = VectorSource(seed: 99, dimension: 64, centres: 64)
            for _ in 0..<50 {
                let q = qs.vector()
                let truth = Set(index.search(q, k: 10, mode: .exact).map(\.rowid))
                found += index.search(q, k: 10).filter { truth.contains($0.rowid) }.count
                total += 10
            }
            return Double(found) / Double(total)
        }
        for i in 0..<6_000 { try index.set(Int64(i), QuantizedVector(source.vector())) }
        #expect(index.isPartitioned)
        let lists = index.partitionLists
        #expect(measure(true) >= measure(false) - 0.10)
        for i in 6_000..<16_000 { try index.set(Int64(i), QuantizedVector(source.vector())) }
        #expect(index.partitionLists > lists)
        #expect(measure(true) >= measure(false) - 0.10)
    }

    @Test("a build off the lock: searches meanwhile answer as without a partition, and the vectors set, removed or revived while it ran are found after it is put in place; a compaction meanwhile drops it")
    func buildOffTheLock() throws {
        let dir = try directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var source = VectorSource(seed: 33, dimension: 32)
        var index = VectorIndex(dimension: 32, directory: dir)
        index.partitionLimit = 1_000
        index.exactLimit = 500
        index.minimumCandidates = 300
        index.buildsPartition = false
        var model: [Int64: QuantizedVector] = [:]
        for i in 0..<4_000 {
            let v = QuantizedVector(source.vector())
            try index.set(Int64(i * 2), v)
            model[Int64(i * 2)] = v
        }
        #expect(!index.isPartitioned)
        let begunBuild = index.beginPartitionBuild()
        let build = try #require(begunBuild)
        #expect(build.isDetached)
        #expect(index.isBuildingPartition)
        let another = index.beginPartitionBuild()
        #expect(another == nil)  // one build at a time

        // The build runs on another thread while this one searches and changes the index.
        let ran = DispatchSemaphore(value: 0)
        let thread = Thread { build.run(); ran.signal() }
        thread.start()
        var queries = VectorSource(seed: 34, dimension: 32)
        for _ in 0..<10 {
            let q = queries.vector()
            var unpartitioned = index
            unpartitioned.usesPartition = false
            #expect(index.search(q, k: 10).map(\.rowid) == unpartitioned.search(q, k: 10).map(\.rowid))
            #expect(index.search(q, k: 10, mode: .prefiltered(candidates: index.count - 1)).map(\.rowid)
                == index.search(q, k: 10, mode: .exact).map(\.rowid))
        }
        var changed: [Int64] = []
        for i in stride(from: 0, to: 8_000, by: 37) {  // replaced
            let v = QuantizedVector(source.vector(), refined: true)
            try index.set(Int64(i), v)
            model[Int64(i)] = v
            changed.append(Int64(i))
        }
        for i in stride(from: 2, to: 8_000, by: 41) where model[Int64(i)] != nil {  // removed
            index.remove(Int64(i))
            model[Int64(i)] = nil
        }
        for i in stride(from: 2, to: 8_000, by: 82) {  // revived
            let v = QuantizedVector(source.vector())
            try index.set(Int64(i), v)
            model[Int64(i)] = v
            changed.append(Int64(i))
        }
        for i in 0..<300 {  // appended
            let v = QuantizedVector(source.vector())
            try index.set(Int64(10_000 + i), v)
            model[Int64(10_000 + i)] = v
            changed.append(Int64(10_000 + i))
        }
        ran.wait()
        #expect(!index.isPartitioned)
        let finished = index.finishPartitionBuild(build)
        #expect(finished)
        #expect(index.isPartitioned)
        #expect(!index.isBuildingPartition)
        let reach = try #require(index.partitionReach())
        #expect(reach.count == model.count)
        #expect(reach.values.allSatisfy { $0 == 1 })
        #expect(Set(reach.keys) == Set(model.keys))
        // Each vector set while the build ran is found by a search of one list.
        index.probes = 1
        for rowid in changed where model[rowid] != nil {
            let v = model[rowid]!
            #expect(index.search(v.values, k: 1).first?.rowid == rowid)
        }

        // A compaction while a build runs renumbers the slots: the build is dropped, the next one is due.
        for i in stride(from: 0, to: 8_000, by: 2) where model[Int64(i)] != nil && i % 3 == 0 {
            index.remove(Int64(i))
            model[Int64(i)] = nil
        }
        for i in 0..<1_200 {
            let v = QuantizedVector(source.vector())
            try index.set(Int64(20_000 + i), v)
            model[Int64(20_000 + i)] = v
        }
        let begunSecond = index.beginPartitionBuild()
        let second = try #require(begunSecond)
        index.compact()
        second.run()
        let dropped = !index.finishPartitionBuild(second)
        #expect(dropped)
        let begunThird = index.beginPartitionBuild()
        let third = try #require(begunThird)
        third.run()
        let placed = index.finishPartitionBuild(third)
        #expect(placed)
        let after = try #require(index.partitionReach())
        #expect(after.count == model.count && after.values.allSatisfy { $0 == 1 })
    }
}
