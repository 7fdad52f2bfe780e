/// One ranked item: its rowid and its final score (negative; lower is better).
public struct ScoredCandidate: Sendable, Equatable {
    public var rowID: Int64
    public var score: Double

    public init(rowID: Int64, score: Double) {
        self.rowID = rowID
        self.score = score
    }

    /// The ranking's order: score ascending, then rowid ascending (the tie-breaker of both paths).
    @inline(__always)
    static func precedes(_ a: (score: Double, rowid: Int64), _ b: (score: Double, rowid: Int64)) -> Bool {
        a.score < b.score || (a.score == b.score && a.rowid < b.rowid)
    }
}

/// The best `capacity` candidates seen so far, the worst of them on top.
struct TopKHeap {
    let capacity: Int
    private(set) var entries: [(score: Double, rowid: Int64)] = []

    init(capacity: Int) {
        self.capacity = capacity
        entries.reserveCapacity(min(capacity, 4096))
    }

    var isFull: Bool { entries.count >= capacity }

    /// The score a newcomer must beat once the heap is full (+infinity before).
    var threshold: Double { isFull ? entries[0].score : .infinity }

    /// Whether a candidate would enter.
    @inline(__always)
    func accepts(score: Double, rowid: Int64) -> Bool {
        guard capacity > 0 else { return false }
        return !isFull || ScoredCandidate.precedes((score, rowid), entries[0])
    }

    mutating func insert(score: Double, rowid: Int64) {
        guard accepts(score: score, rowid: rowid) else { return }
        if isFull {
            entries[0] = (score, rowid)
            siftDown(0)
        } else {
            entries.append((score, rowid))
            siftUp(entries.count - 1)
        }
    }

    /// Best first.
    func sorted() -> [ScoredCandidate] {
        entries.sorted { ScoredCandidate.precedes($0, $1) }.map { ScoredCandidate(rowID: $0.rowid, score: $0.score) }
    }

    /// `a` ranks after `b` (the heap keeps the latest-ranked on top).
    @inline(__always)
    private func after(_ a: Int, _ b: Int) -> Bool { ScoredCandidate.precedes(entries[b], entries[a]) }

    private mutating func siftUp(_ start: Int) {
        var i = start
        while i > 0 {
            let parent = (i - 1) / 2
            guard after(i, parent) else { return }
            entries.swapAt(i, parent)
            i = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var i = start
        while true {
            let l = 2 * i + 1, r = l + 1
            var top = i
            if l < entries.count, after(l, top) { top = l }
            if r < entries.count, after(r, top) { top = r }
            guard top != i else { return }
            entries.swapAt(i, top)
            i = top
        }
    }
}
