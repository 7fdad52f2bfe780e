import SearchlightKit

/// Keeps a few donation calls in flight while the caller parses on: the daemon commits one
/// chunk while the next is parsed and the one after waits in its queue (it commits queued calls
/// together), so neither side waits for the other.
struct DonationPipeline {
    let index: SearchableIndex
    /// Calls in flight at most; more would only hold parsed items in memory.
    let depth: Int
    private var inFlight: [(call: Task<Void, any Error>, count: Int)] = []
    /// Items whose donation was acknowledged.
    private(set) var donated = 0

    init(index: SearchableIndex, depth: Int = 3) {
        self.index = index
        self.depth = depth
    }

    /// Sends `items`, first waiting for the oldest call when `depth` are in flight. Returns
    /// whether that freed a slot (so the caller can report progress).
    @discardableResult
    mutating func donate(_ items: [SearchableItem]) async throws -> Bool {
        var waited = false
        if inFlight.count >= depth {
            try await completeOldest()
            waited = true
        }
        let index = self.index
        inFlight.append((Task { try await index.indexSearchableItems(items) }, items.count))
        return waited
    }

    /// Waits for every call in flight.
    mutating func finish() async throws {
        while !inFlight.isEmpty { try await completeOldest() }
    }

    /// After a failure: the calls still in flight are of no use any more.
    mutating func cancel() {
        for (call, _) in inFlight { call.cancel() }
        inFlight.removeAll()
    }

    private mutating func completeOldest() async throws {
        let (call, count) = inFlight.removeFirst()
        do {
            try await call.value
        } catch {
            cancel()
            throw error
        }
        donated += count
    }
}
