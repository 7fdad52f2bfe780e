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
}
