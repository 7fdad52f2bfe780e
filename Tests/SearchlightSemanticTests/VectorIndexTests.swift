import Foundation
import SearchlightStore
import Testing
import TestThreads
@testable import SearchlightSemantic

/// Deterministic pseudo-random unit vectors (SplitMix64), clustered like real embeddings: each is
/// a random mix of a few shared directions plus noise.
struct VectorSource {
    var state: UInt64
    let centres: [[Float]]

    init(seed: UInt64, dimension: Int, centres count: Int = 32) {
        state = seed
        var c: [[Float]] = []
        var tmp = Self.raw(seed &+ 99)
        for _ in 0..<count { c.append((0..<dimension).map { _ in tmp.gaussian() }) }
        centres = c
    }

    static func raw(_ seed: UInt64) -> VectorSource { VectorSource(state: seed) }
    private init(state: UInt64) { self.state = state; centres = [] }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func uniform() -> Float { Float(next() >> 40) / Float(1 << 24) }
    mutating func gaussian() -> Float {
        let u = max(uniform(), 1e-7), v = uniform()
        return (-2 * logf(u)).squareRoot() * cosf(2 * .pi * v)
    }

    mutating func vector() -> [Float] {
        let a = centres[Int(next() % UInt64(centres.count))], b = centres[Int(next() % UInt64(centres.count))]
        let wa = uniform(), wb = uniform() * 0.5
        var v = a.indices.map { a[$0] * wa + b[$0] * wb + gaussian() * 0.6 }
        let n = v.reduce(0) { $0 + $1 * $1 }.squareRoot()
        for i in v.indices { v[i] /= n }
        return v
    }
}

@Suite("Vector index", .onOwnThreads)
struct VectorIndexTests {
    @Test("int8 quantisation keeps cosine within 0.001 and round-trips through its BLOB")
    func quantisation() throws {
        var source = VectorSource(seed: 1, dimension: 384)
        for _ in 0..<50 {
            let v = source.vector()
            let q = QuantizedVector(v, refined: true)
            #expect(cosine(v, q.values) > 0.999)
            #expect(try QuantizedVector(blob: q.blob) == q)
            #expect(q.blob.count == 8 + 384)
        }
    }

    @Test("a BLOB of another format, length or scale is refused")
    func badBlobs() {
        let good = QuantizedVector([0.5, -0.5, 0.25]).blob
        for bad in [[], [2] + good.dropFirst(), Array(good.dropLast()), good + [0], Array(good[0..<4]) + [0, 0, 0xC0, 0x7F] + good[8...]] {
            #expect(throws: SemanticError.self) { try QuantizedVector(blob: Array(bad)) }
        }
    }

    @Test("exact search returns the true nearest items, best first, and honours the filter")
    func exact() throws {
        var source = VectorSource(seed: 2, dimension: 64)
        var index = VectorIndex(dimension: 64)
        var all: [(Int64, [Float])] = []
        for i in 0..<500 {
            let v = source.vector()
            all.append((Int64(i * 3), v))
            try index.set(Int64(i * 3), QuantizedVector(v))
        }
        let q = source.vector()
        let truth = all.map { ($0.0, cosine(q, $0.1)) }.sorted { $0.1 > $1.1 }
        let hits = index.search(q, k: 10, mode: .exact)
        // int8 may swap near ties with float32, nothing more.
        #expect(Set(hits.map(\.rowid)).intersection(truth.prefix(10).map(\.0)).count >= 9)
        for (h, t) in zip(hits, truth) { #expect(abs(h.similarity - t.1) < 0.01) }
        #expect(zip(hits, hits.dropFirst()).allSatisfy { $0.similarity >= $1.similarity })
        let even = index.search(q, k: 10, mode: .exact) { $0 % 2 == 0 }
        #expect(even.allSatisfy { $0.rowid % 2 == 0 })
        #expect(even.map(\.rowid) == index.search(q, k: 500, mode: .exact).filter { $0.rowid % 2 == 0 }.prefix(10).map(\.rowid))
    }

    @Test("replace and remove keep slots dense and never return a removed item")
    func updates() throws {
        var source = VectorSource(seed: 3, dimension: 32)
        var index = VectorIndex(dimension: 32)
        for i in 0..<100 { try index.set(Int64(i), QuantizedVector(source.vector())) }
        let target = source.vector()
        try index.set(42, QuantizedVector(target))
        #expect(index.count == 100)
        #expect(index.search(target, k: 1, mode: .exact).first?.rowid == 42)
        let removed = index.remove(42), again = index.remove(42)
        #expect(removed && !again)
        #expect(index.count == 99)
        #expect(index.search(target, k: 100, mode: .exact).allSatisfy { $0.rowid != 42 })
        for i in 0..<100 where i != 42 { #expect(index.contains(Int64(i))) }
        #expect(throws: SemanticError.self) { try index.set(7, QuantizedVector([1, 2, 3])) }
    }

    @Test("the sign prefilter with rescoring of 5% finds >= 95% of the exact top 10 (5k clustered vectors)")
    func prefilterRecall() throws {
        var source = VectorSource(seed: 4, dimension: 384)
        var index = VectorIndex(dimension: 384)
        for i in 0..<5_000 { try index.set(Int64(i), QuantizedVector(source.vector())) }
        var found = 0, total = 0
        for _ in 0..<20 {
            let q = source.vector()
            let exact = Set(index.search(q, k: 10, mode: .exact).map(\.rowid))
            let fast = index.search(q, k: 10, mode: .prefiltered(candidates: 250)).map(\.rowid)
            found += fast.filter(exact.contains).count
            total += 10
        }
        #expect(Double(found) / Double(total) >= 0.95)
    }
}

@Suite("Vector table (SQLite BLOB per item rowid)", .onOwnThreads)
struct VectorTableTests {
    func database() throws -> (Database, String) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sl-vectors-\(UUID().uuidString).sqlite").path
        return (try Database(path: path), path)
    }

    @Test("vectors written in a transaction load back into an index; a rolled-back one does not")
    func roundTrip() throws {
        let (db, path) = try database()
        defer { db.close(); try? FileManager.default.removeItem(atPath: path) }
        let table = try VectorTable()
        try table.create(in: db)
        var source = VectorSource(seed: 5, dimension: 16)
        let kept = (0..<20).map { _ in QuantizedVector(source.vector()) }
        try db.transaction {
            for (i, v) in kept.enumerated() { try table.put(Int64(i + 1), v, in: db) }
        }
        _ = try? db.transaction { () throws -> Void in
            try table.put(99, QuantizedVector(source.vector()), in: db)
            struct Abort: Error {}
            throw Abort()
        }
        try table.delete(5, in: db)
        let (index, unreadable) = try table.load(dimension: 16, from: db)
        #expect(unreadable.isEmpty)
        #expect(index.count == 19)
        #expect(!index.contains(99) && !index.contains(5))
        #expect(index.vector(for: 3) == kept[2])
    }

    @Test("an undecodable or wrong-dimension row is reported for re-embedding, not loaded")
    func unreadable() throws {
        let (db, path) = try database()
        defer { db.close(); try? FileManager.default.removeItem(atPath: path) }
        let table = try VectorTable()
        try table.create(in: db)
        try table.put(1, QuantizedVector([0.1, 0.2, 0.3, 0.4]), in: db)
        try table.put(2, QuantizedVector([0.1, 0.2]), in: db)
        _ = try db.run("INSERT INTO item_vectors (rowid, vector) VALUES (3, x'0102')")
        let (index, unreadable) = try table.load(dimension: 4, from: db)
        #expect(index.count == 1)
        #expect(Set(unreadable) == [2, 3])
    }

    @Test("reconcile makes the in-memory index follow the table (deleted items never come back)")
    func reconcile() throws {
        let (db, path) = try database()
        defer { db.close(); try? FileManager.default.removeItem(atPath: path) }
        let table = try VectorTable(name: "v")
        try table.create(in: db)
        var index = VectorIndex(dimension: 4)
        let a = QuantizedVector([1, 0, 0, 0]), b = QuantizedVector([0, 1, 0, 0]), c = QuantizedVector([0, 0, 1, 0], refined: true)
        try index.set(1, a)
        try index.set(2, b)
        try table.put(2, c, in: db)
        try table.put(3, a, in: db)
        let changes = try table.reconcile(&index, from: db)
        #expect(changes == 3)
        #expect(!index.contains(1))
        #expect(index.vector(for: 2) == c)
        #expect(index.refinedCount == 1)
        #expect(index.vector(for: 3) == a)
    }

    @Test("the refined count follows every set, replacement and removal (it is kept, not counted per query)")
    func refinedCountFollows() throws {
        var index = VectorIndex(dimension: 4)
        let plain = QuantizedVector([1, 0, 0, 0]), refined = QuantizedVector([0, 1, 0, 0], refined: true)
        func check(_ n: Int) { #expect(index.refinedCount == n && index.refinedCount == index.rowids.filter { index.vector(for: $0)!.refined }.count) }
        try index.set(1, refined)
        try index.set(2, plain)
        try index.set(3, refined)
        check(2)
        try index.set(2, refined)  // refined in place
        check(3)
        try index.set(1, plain)  // replaced by a static vector (a donation after refinement)
        check(2)
        index.remove(1)  // a plain one removed: the last slot (refined) moves into its place
        check(2)
        index.remove(3)
        check(1)
        index.remove(9)
        check(1)
    }

    @Test("a table name that is not a plain identifier is refused")
    func names() {
        #expect(throws: SemanticError.self) { try VectorTable(name: "v; DROP TABLE items") }
        #expect(throws: SemanticError.self) { try VectorTable(name: "1v") }
    }
}
