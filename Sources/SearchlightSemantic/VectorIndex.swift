import CSemanticKernels

/// One hit of a vector search: the item's rowid and its cosine similarity to the query.
public struct VectorMatch: Sendable, Equatable {
    public var rowid: Int64
    public var similarity: Float

    public init(rowid: Int64, similarity: Float) {
        self.rowid = rowid
        self.similarity = similarity
    }
}

/// The vectors of one index in memory, keyed by item rowid (the key of the BLOB rows they are
/// loaded from: `VectorTable`). Flat arrays, one slot per item, so a scan is a walk over
/// contiguous memory:
///
/// - `codes`: slot i's int8 codes at `i·dimension`, `scales[i]` its scale (`QuantizedVector`);
/// - `signs`: slot i's 1-bit sign code (bit j set when component j > 0) at `i·words`, the
///   prefilter of large indexes: Hamming distance by XOR and popcount, 48 bytes per 384-d item.
///
/// Search is exact (every item's int8 dot product with the query) up to `exactLimit` items, and
/// above that prefiltered: the `candidates` items nearest in Hamming distance are rescored
/// exactly. A removed item's slot is refilled by the last one, so slots stay dense.
public struct VectorIndex: Sendable {
    public enum Mode: Sendable, Equatable {
        /// Exact below `exactLimit` items, prefiltered above.
        case automatic
        case exact
        /// Rescore the `candidates` nearest items in Hamming distance.
        case prefiltered(candidates: Int)
    }

    public let dimension: Int
    let words: Int
    private(set) var codes: [Int8] = []
    private(set) var scales: [Float] = []
    private(set) var signs: [UInt64] = []
    public private(set) var rowids: [Int64] = []
    private(set) var refinedFlags: [Bool] = []
    /// The true entries of `refinedFlags`, kept as they change: a hybrid query with the
    /// transformer asks for it (`SemanticRequest.tuning`), and counting 1M flags is most of a ms.
    public private(set) var refinedCount = 0
    private var slots: [Int64: Int] = [:]

    /// Above this many items `automatic` search prefilters.
    public var exactLimit = 20_000
    /// Candidates rescored after the prefilter (automatic mode): at least this many, or
    /// `candidateFraction` of the index when that is more.
    public var minimumCandidates = 2_000
    public var candidateFraction = 0.002

    public init(dimension: Int) {
        self.dimension = dimension
        words = (dimension + 63) / 64
    }

    public var count: Int { rowids.count }
    public func contains(_ rowid: Int64) -> Bool { slots[rowid] != nil }
    /// The slot of an item's vector in `codes` and `scales`.
    func slot(of rowid: Int64) -> Int? { slots[rowid] }

    /// The stored vector of an item.
    public func vector(for rowid: Int64) -> QuantizedVector? {
        guard let s = slots[rowid] else { return nil }
        return QuantizedVector(codes: Array(codes[(s * dimension)..<((s + 1) * dimension)]), scale: scales[s], refined: refinedFlags[s])
    }

    /// Adds or replaces an item's vector. A vector of another dimension is refused.
    public mutating func set(_ rowid: Int64, _ vector: QuantizedVector) throws(SemanticError) {
        guard vector.dimension == dimension else {
            throw SemanticError(.invalidArgument, "a \(vector.dimension)-dimensional vector for rowid \(rowid) in a \(dimension)-dimensional index")
        }
        let slot: Int
        if let s = slots[rowid] {
            slot = s
        } else {
            slot = rowids.count
            slots[rowid] = slot
            rowids.append(rowid)
            scales.append(0)
            refinedFlags.append(false)
            codes.append(contentsOf: repeatElement(0, count: dimension))
            signs.append(contentsOf: repeatElement(0, count: words))
        }
        scales[slot] = vector.scale
        refinedCount += (vector.refined ? 1 : 0) - (refinedFlags[slot] ? 1 : 0)
        refinedFlags[slot] = vector.refined
        for j in 0..<dimension { codes[slot * dimension + j] = vector.codes[j] }
        let code = Self.signCode(vector.codes)
        for w in 0..<words { signs[slot * words + w] = code[w] }
    }

    /// Removes an item's vector; false when it had none.
    @discardableResult
    public mutating func remove(_ rowid: Int64) -> Bool {
        guard let slot = slots.removeValue(forKey: rowid) else { return false }
        if refinedFlags[slot] { refinedCount -= 1 }
        let last = rowids.count - 1
        if slot != last {
            let moved = rowids[last]
            rowids[slot] = moved
            scales[slot] = scales[last]
            refinedFlags[slot] = refinedFlags[last]
            for j in 0..<dimension { codes[slot * dimension + j] = codes[last * dimension + j] }
            for w in 0..<words { signs[slot * words + w] = signs[last * words + w] }
            slots[moved] = slot
        }
        rowids.removeLast()
        scales.removeLast()
        refinedFlags.removeLast()
        codes.removeLast(dimension)
        signs.removeLast(words)
        return true
    }

    /// The `k` items most similar to `query` (any scale; cosine is computed on directions), best
    /// first. `allowed` restricts the hits (filter queries, expiration) before they are counted.
    public func search(_ query: [Float], k: Int, mode: Mode = .automatic, allowed: ((Int64) -> Bool)? = nil) -> [VectorMatch] {
        guard k > 0, count > 0, query.count == dimension else { return [] }
        let q = QuantizedVector(query)
        var norm: Float = 0
        for v in q.values { norm += v * v }
        let queryScale = q.scale / max(norm.squareRoot(), 1e-12)
        var top = TopK(k)
        let candidates: Int? = switch mode {
        case .exact: nil
        case .prefiltered(let c): c
        case .automatic: count <= exactLimit ? nil : max(minimumCandidates, Int(Double(count) * candidateFraction))
        }
        q.codes.withUnsafeBufferPointer { qp in
            codes.withUnsafeBufferPointer { cp in
                func score(_ slot: Int) {
                    let rowid = rowids[slot]
                    if let allowed, !allowed(rowid) { return }
                    let dot = Self.dot(qp.baseAddress!, cp.baseAddress! + slot * dimension, dimension)
                    // The stored vectors are unit vectors quantised: the scale restores their length.
                    top.insert(VectorMatch(rowid: rowid, similarity: Float(dot) * scales[slot] * queryScale))
                }
                if let candidates, candidates < count {
                    for slot in nearestInHamming(Self.signCode(q.codes), count: candidates) { score(slot) }
                } else {
                    for slot in 0..<count { score(slot) }
                }
            }
        }
        return top.sorted()
    }

    /// The slots of the `n` items whose sign codes are nearest to `code` (ties at the cut-off
    /// taken in slot order): distances into a histogram, the cut-off from it, one more pass.
    func nearestInHamming(_ code: [UInt64], count n: Int) -> [Int] {
        let total = count
        var distances = [UInt16](repeating: 0, count: total)
        var histogram = [Int](repeating: 0, count: words * 64 + 1)
        if Self.usesKernels {
            signs.withUnsafeBufferPointer { sp in
                code.withUnsafeBufferPointer { qp in
                    distances.withUnsafeMutableBufferPointer { sl_hamming(sp.baseAddress!, total, words, qp.baseAddress!, $0.baseAddress!) }
                }
            }
            for d in distances { histogram[Int(d)] += 1 }
        } else { signs.withUnsafeBufferPointer { sp in
            code.withUnsafeBufferPointer { qp in
                let s = sp.baseAddress!, q = qp.baseAddress!
                for i in 0..<total {
                    var d = 0
                    let row = s + i * words
                    for w in 0..<words { d += (row[w] ^ q[w]).nonzeroBitCount }
                    distances[i] = UInt16(d)
                    histogram[d] += 1
                }
            }
        } }
        var cut = 0, taken = 0
        while cut < histogram.count && taken + histogram[cut] < n {
            taken += histogram[cut]
            cut += 1
        }
        var atCut = n - taken
        var out: [Int] = []
        out.reserveCapacity(n)
        for i in 0..<total {
            let d = Int(distances[i])
            if d < cut {
                out.append(i)
            } else if d == cut && atCut > 0 {
                out.append(i)
                atCut -= 1
            }
        }
        return out
    }

    /// POPCNT and AVX-512BW for the scans (`CVectorKernels`), where the CPU has them.
    static let usesKernels = sl_vector_kernels_available() != 0

    static func signCode(_ codes: [Int8]) -> [UInt64] {
        var out = [UInt64](repeating: 0, count: (codes.count + 63) / 64)
        for (j, c) in codes.enumerated() where c > 0 { out[j >> 6] |= 1 << UInt64(j & 63) }
        return out
    }

    /// The int8 dot product, 16 lanes at a time (sign-extended to Int32: no overflow for any
    /// dimension below 2^17), then the tail.
    @inline(__always)
    static func dot(_ a: UnsafePointer<Int8>, _ b: UnsafePointer<Int8>, _ n: Int) -> Int32 {
        if usesKernels { return sl_dot_i8(a, b, n) }
        var acc = SIMD16<Int32>()
        var j = 0
        let ra = UnsafeRawPointer(a), rb = UnsafeRawPointer(b)
        while j + 16 <= n {
            let x = SIMD16<Int32>(truncatingIfNeeded: ra.loadUnaligned(fromByteOffset: j, as: SIMD16<Int8>.self))
            let y = SIMD16<Int32>(truncatingIfNeeded: rb.loadUnaligned(fromByteOffset: j, as: SIMD16<Int8>.self))
            acc &+= x &* y
            j += 16
        }
        var sum = acc.wrappedSum()
        while j < n {
            sum &+= Int32(a[j]) &* Int32(b[j])
            j += 1
        }
        return sum
    }
}

/// The best `k` matches seen so far (a sorted array: k is small).
struct TopK {
    let k: Int
    var items: [VectorMatch] = []

    init(_ k: Int) {
        self.k = k
        items.reserveCapacity(k + 1)
    }

    @inline(__always)
    mutating func insert(_ m: VectorMatch) {
        if items.count == k, let last = items.last, !(m.similarity > last.similarity) { return }
        var i = items.count
        while i > 0 && items[i - 1].similarity < m.similarity { i -= 1 }
        items.insert(m, at: i)
        if items.count > k { items.removeLast() }
    }

    func sorted() -> [VectorMatch] { items }
}
