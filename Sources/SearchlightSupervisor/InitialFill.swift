import Foundation
import SearchlightUnits
import SearchlightWire

/// A new bundle's first fill by its extension (DESIGN §6 Triggers: "a new bundle with an extension
/// gets an initial reindex-all"). Until that reindex-all is acknowledged the index holds only
/// what was donated so far, so it is `filling`: `status` says so with the request's progress, and
/// queries answer `incomplete: true`, as they do while a recovery refills an index.
final class InitialFill: Sendable {
    private let registry: IndexRegistry
    private let journal: RequestJournal
    private let catalog: UnitCatalog
    private let log: Logger

    init(registry: IndexRegistry, journal: RequestJournal, catalog: UnitCatalog, log: Logger) {
        self.registry = registry
        self.journal = journal
        self.catalog = catalog
        self.log = log
    }

    /// The initial reindex-all `requestID` was journaled for the index.
    ///
    /// The scheduler's thread may send it and hear its outcome before this runs (its outcome then
    /// found no filling index): once the condition is set, the journal says whether it already
    /// ended (acknowledged: gone; failed for good: kept as failed), and that outcome is taken up.
    func queued(bundle: String, index: String, requestID: Int64, label: String, at date: Date = Date()) {
        registry.setCondition(IndexCondition(.filling, reason: "initial fill by \(label)", since: date, requestID: requestID),
            bundle: bundle, index: index)
        guard let request = journal.request(requestID) else {
            // Acknowledged (an acknowledgement removes the request before its observers hear of it).
            filled(bundle: bundle, index: index, requestID: requestID)
            return
        }
        if request.state == .failed { requestFinished(request, .failed(request.lastError ?? "?")) }
    }

    /// Any reindex-all of a filling index that is acknowledged fills it (the initial one, or one
    /// asked for by hand after the initial one failed). A failed initial fill leaves the index
    /// filling, with the reason.
    func requestFinished(_ request: ReindexRequest, _ outcome: RequestScheduler.Outcome) {
        guard request.kind == .all, let condition = registry.condition(bundle: request.bundle, index: request.index),
              condition.phase == .filling else { return }
        switch outcome {
        case .acknowledged:
            filled(bundle: request.bundle, index: request.index, requestID: request.id)
        case .failed(let message) where request.id == condition.requestID:
            let label = catalog.unit(forBundle: request.bundle)?.label ?? request.bundle
            var failed = condition
            failed.reason = "the initial fill failed (\(message)); ask again with `searchlight reindex \(label) --all`"
            registry.setCondition(failed, bundle: request.bundle, index: request.index)
        case .failed:
            break
        }
    }

    /// At start: indexes whose initial fill is still journaled (pending, running or failed) are
    /// filling again (`queued` takes up a failure).
    func resume() {
        for request in journal.all() where request.kind == .all && request.reason == "initial" {
            let label = catalog.unit(forBundle: request.bundle)?.label ?? request.bundle
            queued(bundle: request.bundle, index: request.index, requestID: request.id, label: label, at: request.created)
        }
    }

    /// A reindex-all of the index was acknowledged: it is no longer filling.
    private func filled(bundle: String, index: String, requestID: Int64) {
        guard registry.condition(bundle: bundle, index: index)?.phase == .filling else { return }
        registry.setCondition(nil, bundle: bundle, index: index)
        log.info("index filled", ["bundle": bundle, "index": Names.display(index: index), "request": requestID])
    }
}
