import Foundation
import Synchronization

/// The order in which refinement takes an index's static vectors (issue 32 item 3;
/// Docs/SemanticSearch.md, "Which items are refined first").
public enum RefinementOrder: Sendable {
    /// Where users look first: the items in `RefinementHints` (engaged with, used, returned by
    /// recent user queries), then the rest from the newest rowid down (the latest donations first).
    case whereUsersLook
    /// Every static vector in rowid order, oldest first: the order before issue 32, kept for the
    /// bench's comparison.
    case rowid
}

/// The items refinement should take before the rest, best first: a bounded set in memory, fed
/// by the store as users meet items (`IndexStore.recordEngagement`, user queries' answers) and
/// seeded, once per opened store, from the items' own engagement and `last_used` columns (so an
/// engaged item keeps its place across a restart; query hits do not, they are cheap to find again).
///
/// Pure: the caller passes the time. Each item keeps its best tier and its latest time; `take`
/// hands out the best `n` (tier first, then the most recent) and forgets them. Past `capacity`
/// the worst are dropped, so the cost per batch stays that of a scan of at most `capacity` keys
/// whatever the index's size.
public struct RefinementHints: Sendable {
    /// Why an item is wanted, better last.
    public enum Tier: Int, Comparable, Sendable {
        /// Returned by a user query (among the first `RefinementHints.hitsPerQuery`).
        case returned = 1
        /// Donated with a `lastUsedDate` (the app says the user used it).
        case used = 2
        /// The user opened it from results (`query.engaged`).
        case engaged = 3
        public static func < (a: Tier, b: Tier) -> Bool { a.rawValue < b.rawValue }
    }

    struct Key: Comparable {
        var tier: Tier
        var time: Double
        static func < (a: Key, b: Key) -> Bool { (a.tier, a.time) < (b.tier, b.time) }
    }

    /// The hits of one user query worth a hint: what fits on a results page.
    public static let hitsPerQuery = 20

    public let capacity: Int
    private(set) var keys: [Int64: Key] = [:]

    public init(capacity: Int = 16_384) { self.capacity = max(1, capacity) }

    public var count: Int { keys.count }

    /// `rowids` are wanted for `tier` at `time`; an item keeps its better tier and later time.
    public mutating func note(_ rowids: some Sequence<Int64>, tier: Tier, at time: Double) {
        for rowid in rowids {
            let new = Key(tier: tier, time: time)
            if let old = keys[rowid] {
                keys[rowid] = Key(tier: max(old.tier, tier), time: max(old.time, time))
            } else {
                keys[rowid] = new
            }
        }
        if keys.count > capacity { dropWorst() }
    }

    /// The best `n` items, best first, taken out of the set.
    public mutating func take(_ n: Int) -> [Int64] {
        guard n > 0, !keys.isEmpty else { return [] }
        // One pass keeping the best n (n is a batch, a few items): no sort of the whole set.
        var best: [(Int64, Key)] = []
        best.reserveCapacity(n + 1)
        for (rowid, key) in keys {
            if best.count == n, let last = best.last, !(last.1 < key || (last.1 == key && rowid > last.0)) { continue }
            let at = best.firstIndex { $0.1 < key || ($0.1 == key && rowid > $0.0) } ?? best.endIndex
            best.insert((rowid, key), at: at)
            if best.count > n { best.removeLast() }
        }
        for (rowid, _) in best { keys[rowid] = nil }
        return best.map(\.0)
    }

    /// Keeps the best seven eighths of `capacity`, so that a stream of notes drops in chunks.
    private mutating func dropWorst() {
        let keep = capacity - capacity / 8
        let sorted = keys.sorted { a, b in a.value != b.value ? b.value < a.value : a.key > b.key }
        keys = Dictionary(uniqueKeysWithValues: sorted.prefix(keep).map { ($0.key, $0.value) })
    }
}

/// `RefinementHints` shared by the store's query paths and its refinement, with whether it was
/// seeded from the file yet.
final class RefinementHintsBox: Sendable {
    private let state = Mutex<(hints: RefinementHints, seeded: Bool)>((RefinementHints(), false))

    func note(_ rowids: some Sequence<Int64>, tier: RefinementHints.Tier, at time: Double) {
        state.withLock { $0.hints.note(rowids, tier: tier, at: time) }
    }

    func take(_ n: Int) -> [Int64] { state.withLock { $0.hints.take(n) } }

    var count: Int { state.withLock { $0.hints.count } }

    /// True the first time: the caller seeds the set from the file.
    func claimSeed() -> Bool {
        state.withLock { s in
            defer { s.seeded = true }
            return !s.seeded
        }
    }
}

/// The walk over an index's rowids that fills refinement's batches after the hints: up from 0
/// (`RefinementOrder.rowid`), or down from the newest; a descending pass that ends goes once
/// more over the rowids above where it began (donated meanwhile), until a pass finds nothing.
struct RefinementCursor {
    let descending: Bool
    /// The next rows are strictly between `lower` and `upper`.
    private(set) var lower: Int64 = 0
    private(set) var upper: Int64 = .max
    /// The first rowid of the descending pass under way.
    private var passTop: Int64?
    private(set) var isDone = false

    init(descending: Bool) { self.descending = descending }

    /// The rowids the last range returned, in its order (empty: the range is exhausted).
    mutating func advance(over rowids: [Int64]) {
        guard descending else {
            if let last = rowids.last { lower = last } else { isDone = true }
            return
        }
        if let first = rowids.first, let last = rowids.last {
            if passTop == nil { passTop = first }
            upper = last
        } else if let top = passTop {
            lower = top
            upper = .max
            passTop = nil
        } else {
            isDone = true
        }
    }
}
