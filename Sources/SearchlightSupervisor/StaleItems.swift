import Foundation
import Synchronization
import SearchlightWire

/// Items the desktop left out of its results because their `file:` contentURL no longer exists
/// (`desktop.staleItems`, issue 34): which were reported lately, so that a desktop searching the
/// same words again does not ask the extension again and again, and what became of them, for
/// `admin.status` (`staleItems`).
///
/// Bounded: at most `capacity` identifiers are remembered; the oldest are forgotten first, and
/// one reported again after `repeatAfter` counts (and is asked for) again.
final class StaleItems: Sendable {
    struct Counts: Sendable, Equatable {
        /// Identifiers reported (each once per `repeatAfter`).
        var reported = 0
        /// Of those, asked of the bundle's extension with reindex-identifiers.
        var reindexRequested = 0
        /// Of those, deleted: the bundle has no extension and the reporting user owns it.
        var deleted = 0
        /// Of those, left as they are: no extension, and the reporter does not own the bundle.
        var kept = 0
    }

    static let capacity = 4096
    let repeatAfter: TimeInterval
    private struct State {
        var seen: [String: Date] = [:]
        var order: [String] = []
        var counts = Counts()
    }
    private let state = Mutex(State())

    init(repeatAfter: TimeInterval = 600) {
        self.repeatAfter = repeatAfter
    }

    /// The identifiers not reported in the last `repeatAfter`, now recorded as reported.
    func fresh(bundle: String, index: String, identifiers: [String], now: Date = Date()) -> [String] {
        state.withLock { s in
            var out: [String] = []
            for id in identifiers {
                let key = bundle + "\u{0}" + index + "\u{0}" + id
                if let at = s.seen[key], now.timeIntervalSince(at) < repeatAfter { continue }
                if s.seen.updateValue(now, forKey: key) == nil { s.order.append(key) }
                out.append(id)
            }
            if s.order.count > Self.capacity {
                let drop = s.order.count - Self.capacity
                for key in s.order.prefix(drop) { s.seen[key] = nil }
                s.order.removeFirst(drop)
            }
            s.counts.reported += out.count
            return out
        }
    }

    func record(_ change: (inout Counts) -> Void) {
        state.withLock { change(&$0.counts) }
    }

    var counts: Counts { state.withLock { $0.counts } }

    var statusJSON: JSONValue {
        let c = counts
        return ["reported": .number(Double(c.reported)), "reindexRequested": .number(Double(c.reindexRequested)),
                "deleted": .number(Double(c.deleted)), "kept": .number(Double(c.kept))]
    }
}
