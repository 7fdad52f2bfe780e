import Foundation
import Glibc
import Testing
import TestThreads
@testable import SearchlightSemantic

/// The vector index off the heap (`VectorIndex` over `VectorSlots` and `ByteRegion`): its files,
/// its slot bookkeeping under every kind of change, and what it does when the files fail.
@Suite("Vector index files", .onOwnThreads)
struct VectorFileTests {
    func directory() throws -> String {
        let dir = NSTemporaryDirectory() + "sl-vecfile-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    /// The nearest `k` of `model` by the same int8 arithmetic as the index (the reference).
    func reference(_ model: [Int64: QuantizedVector], _ q: [Float], k: Int) -> [Int64] {
        let qq = QuantizedVector(q)
        var scored: [(rowid: Int64, score: Float)] = []
        for (rowid, v) in model {
            var dot: Int32 = 0
            for j in 0..<v.codes.count { dot += Int32(qq.codes[j]) * Int32(v.codes[j]) }
            scored.append((rowid, Float(dot) * v.scale))
        }
        scored.sort { a, b in a.score != b.score ? a.score > b.score : a.rowid < b.rowid }
        return scored.prefix(k).map(\.rowid)
    }

    @Test("the files have no name: the directory stays empty while the index holds vectors, and after")
    func unnamed() throws {
        let dir = try directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var source = VectorSource(seed: 20, dimension: 64)
        var index = VectorIndex(dimension: 64, directory: dir)
        for i in 0..<3_000 { try index.set(Int64(i), QuantizedVector(source.vector())) }
        #expect(index.isFileBacked)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).isEmpty)
        #expect(index.search(source.vector(), k: 5).count == 5)
    }

    @Test("in-order and out-of-order sets, replacements, removals and revivals match a plain dictionary, across compactions")
    func followsModel() throws {
        let dir = try directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var source = VectorSource(seed: 21, dimension: 32)
        var index = VectorIndex(dimension: 32, directory: dir)
        var model: [Int64: QuantizedVector] = [:]
        var ever: [Int64] = []
        var seed: UInt64 = 77
        func next(_ n: Int) -> Int {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((seed >> 33) % UInt64(n))
        }
        // Enough changes to pass both compaction marks (4 096 out-of-order slots, 4 096 dead ones).
        for step in 0..<30_000 {
            let op = next(10)
            if op < 4 {  // a new item above every rowid (a donation)
                let rowid = Int64(100_000 + step * 2)
                let v = QuantizedVector(source.vector(), refined: next(3) == 0)
                try index.set(rowid, v)
                model[rowid] = v
                ever.append(rowid)
            } else if op < 6 {  // an old rowid, out of order (the background fill)
                let rowid = Int64(next(90_000))
                let v = QuantizedVector(source.vector(), refined: next(3) == 0)
                try index.set(rowid, v)
                model[rowid] = v
                ever.append(rowid)
            } else if op < 9, let rowid = ever.isEmpty ? nil : ever[next(ever.count)], model[rowid] != nil {  // removal
                let removed = index.remove(rowid)
                #expect(removed)
                model[rowid] = nil
            } else if let rowid = ever.isEmpty ? nil : ever[next(ever.count)], model[rowid] != nil {  // replacement (refinement)
                let v = QuantizedVector(source.vector(), refined: true)
                try index.set(rowid, v)
                model[rowid] = v
            }
        }
        #expect(index.count == model.count)
        #expect(index.refinedCount == model.values.filter(\.refined).count)
        #expect(Set(index.rowids) == Set(model.keys))
        for (rowid, v) in model.prefix(500) { #expect(index.vector(for: rowid) == v) }
        for rowid in (0..<200).map({ Int64($0 * 7) }) where model[rowid] == nil {
            let removed = index.remove(rowid)
            #expect(!index.contains(rowid) && index.vector(for: rowid) == nil && !removed)
        }
        for _ in 0..<5 {
            let q = source.vector()
            #expect(index.search(q, k: 10, mode: .exact).map(\.rowid) == reference(model, q, k: 10))
            #expect(index.search(q, k: 50, mode: .prefiltered(candidates: 500)).allSatisfy { model[$0.rowid] != nil })
        }
        index.compact()
        #expect(index.count == model.count && Set(index.rowids) == Set(model.keys))
        let q = source.vector()
        #expect(index.search(q, k: 10, mode: .exact).map(\.rowid) == reference(model, q, k: 10))
    }

    @Test("a copy is a value: changing it leaves the original as it was")
    func copies() throws {
        var a = VectorIndex(dimension: 4)
        try a.set(1, QuantizedVector([1, 0, 0, 0]))
        try a.set(2, QuantizedVector([0, 1, 0, 0]))
        var b = a
        try b.set(1, QuantizedVector([0, 0, 1, 0], refined: true))
        b.remove(2)
        try b.set(3, QuantizedVector([0, 0, 0, 1]))
        #expect(a.vector(for: 1) == QuantizedVector([1, 0, 0, 0]) && a.contains(2) && !a.contains(3) && a.count == 2)
        #expect(b.vector(for: 1)?.refined == true && !b.contains(2) && b.contains(3) && b.count == 2 && a.refinedCount == 0)
    }

    @Test("without a usable directory the vectors stay in memory and answer the same")
    func memoryFallback() throws {
        var source = VectorSource(seed: 22, dimension: 64)
        var onDisk = VectorIndex(dimension: 64)
        var inMemory = VectorIndex(dimension: 64, directory: "/nonexistent/searchlight-\(UUID().uuidString)")
        for i in 0..<2_000 {
            let v = QuantizedVector(source.vector())
            try onDisk.set(Int64(i), v)
            try inMemory.set(Int64(i), v)
        }
        #expect(onDisk.isFileBacked && !inMemory.isFileBacked)
        for _ in 0..<5 {
            let q = source.vector()
            #expect(onDisk.search(q, k: 10) == inMemory.search(q, k: 10))
            #expect(onDisk.search(q, k: 10, mode: .prefiltered(candidates: 100)) == inMemory.search(q, k: 10, mode: .prefiltered(candidates: 100)))
        }
    }

    @Test("a file cut short under the index reads as zeros: no crash, no made-up vector")
    func truncatedFile() throws {
        let dir = try directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let region = ByteRegion(directory: dir)
        let bytes = [UInt8](repeating: 0xAB, count: 3 * ByteRegion.flushBytes)
        bytes.withUnsafeBytes { region.append($0) }
        region.flush()
        #expect(region.isFileBacked && region.count == bytes.count)
        #expect(ftruncate(region.fileDescriptorForTesting, off_t(ByteRegion.flushBytes)) == 0)
        var out = [UInt8](repeating: 1, count: 16)
        out.withUnsafeMutableBytes { region.read(into: $0.baseAddress!, count: 16, at: ByteRegion.flushBytes - 8) }
        #expect(out == [UInt8](repeating: 0xAB, count: 8) + [UInt8](repeating: 0, count: 8))
    }

    @Test("the region's descriptor and the frozen copy a partition build reads are both close-on-exec")
    func descriptorsCloseOnExec() throws {
        let dir = try directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let region = ByteRegion(directory: dir)
        let bytes = [UInt8](repeating: 0x5A, count: 1024)
        bytes.withUnsafeBytes { region.append($0) }
        let frozen = region.frozen()
        #expect(region.isFileBacked)
        #expect(fcntl(region.fileDescriptorForTesting, F_GETFD) & FD_CLOEXEC != 0)
        #expect(frozen.fileDescriptorForTesting >= 0)
        #expect(fcntl(frozen.fileDescriptorForTesting, F_GETFD) & FD_CLOEXEC != 0, "a child started during a build inherits the vectors' file")
    }

    @Test("the heap holds about 9 bytes an item and two append buffers: 100k 384-d vectors take under 2 MiB of it (the files hold the rest)")
    func heapPerItem() throws {
        let dir = try directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var index = VectorIndex(dimension: 384, directory: dir)
        let v = QuantizedVector((0..<384).map { Float($0 % 7) - 3 })
        for i in 0..<100_000 { try index.set(Int64(i), v) }
        #expect(index.isFileBacked)
        #expect(index.heapBytes < 2 << 20, "heap bytes \(index.heapBytes)")
    }
}
