import Foundation
import SearchlightStore
import SearchlightWire

extension ClientSession {
    /// The calls retried once after a recovery: each applies nothing when it fails, so a retry
    /// cannot apply twice. `index.endBatch` is not among them: its batch ended with the failure.
    static let retriedAfterRecovery: Set<String> = [
        Method.indexItems, Method.indexDeleteIdentifiers, Method.indexDeleteDomains, Method.indexDeleteAll,
        Method.indexFetchLastClientState, Method.querySearch, Method.queryUser,
    ]

    /// `dispatch`, except that a call on one bundle's open index that fails with indexUnavailable
    /// runs once more when the index's file was swapped under it, or when the index turned out
    /// damaged, after the recovery (bounded wait) replaced or repaired it: the caller gets an
    /// answer from the fresh file (with `incomplete: true` while it is refilled) instead of the error.
    func dispatchRecovering(_ method: String, _ params: JSONValue) throws(SearchlightError) -> JSONValue {
        var served: (bundle: String, index: String, store: IndexStore)?
        if Self.retriedAfterRecovery.contains(method), role != nil, role != .admin || params["bundle"]?.isNull == false,
           let bundle = try? targetBundle(params), let index = try? Names.index(params["index"]),
           let store = context.registry.servedStore(bundle: bundle, index: index) {
            served = (bundle, index, store)
        }
        do {
            return try gatedDispatch(method, params)
        } catch {
            guard error.code == .indexUnavailable, let served else { throw error }
            if context.registry.servedStore(bundle: served.bundle, index: served.index) !== served.store {
                // The file was swapped under the call (a recovery or migration closed the store it used).
                log.info("call answered after recovery", ["method": method, "bundle": served.bundle, "pid": peer.pid, "cause": "swapped"])
                return try gatedDispatch(method, params)
            }
            guard served.store.detectedDamage != nil,
                  context.recovery.awaitRecovery(of: served.store, bundle: served.bundle, index: served.index) else { throw error }
            log.info("call answered after recovery", ["method": method, "bundle": served.bundle, "pid": peer.pid, "cause": "damaged"])
            return try gatedDispatch(method, params)
        }
    }
}
