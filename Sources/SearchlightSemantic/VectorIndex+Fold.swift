/// Near-duplicate vectors in a ranking (Docs/SemanticSearch.md, "Folding near-duplicates").
///
/// Debian gives a library, its -dev and its -doc package nearly the same description; the
/// transformer's vectors of such siblings are nearly identical, so they fill a vector top 10
/// together and push out the distinct items a query also means. Search engines collapse such
/// near-duplicates before ranking (MMR diversifies for the same reason). This is the rule that
/// says which hits are near-duplicates; `HybridFusion` decides what happens to them.
extension VectorIndex {
    /// For each of `rowids` (a ranking, best first), whether it is a near-duplicate of a hit
    /// ranked above it: its cosine with a *leader* (a hit of the first `depth` that is not itself
    /// folded) is at least `threshold`. Leaders, not every hit above: a chain of small steps
    /// (A ≈ B ≈ C, A ≉ C) folds B into A and keeps C, as a collapse keeps one per cluster. Only
    /// the first `depth` hits are compared (at most depth² / 2 int8 dot products; those below
    /// are never folded), a hit whose vector is gone is neither folded nor a leader, and the
    /// stored vectors' own lengths are divided out (their codes' norms), so the cosine does not
    /// depend on quantisation scales.
    public func nearDuplicates(_ rowids: [Int64], threshold: Float, depth: Int) -> [Bool] {
        var folded = [Bool](repeating: false, count: rowids.count)
        let n = min(max(depth, 0), rowids.count)
        guard n > 1, count > 0 else { return folded }
        var leaders: [(codes: [Int8], norm: Float)] = []
        leaders.reserveCapacity(n)
        for i in 0..<n {
            guard let codes = codes(of: rowids[i]) else { continue }
            codes.withUnsafeBufferPointer { p in
                let norm = Float(Self.dot(p.baseAddress!, p.baseAddress!, dimension)).squareRoot()
                guard norm > 0 else { return }
                let isDuplicate = leaders.contains { l in
                    l.codes.withUnsafeBufferPointer { Float(Self.dot(p.baseAddress!, $0.baseAddress!, dimension)) >= threshold * norm * l.norm }
                }
                if isDuplicate { folded[i] = true } else { leaders.append((codes, norm)) }
            }
        }
        return folded
    }
}
