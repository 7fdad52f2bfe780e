import Foundation
import SearchlightStore
import SearchlightWire

/// Donations while an index is rebuilt into a shadow (DESIGN §6 Triggers): written to the open
/// file, then to the shadow, so the shadow misses nothing that the old file had when it
/// replaces it.
extension ClientSession {
    /// `dispatch` inside the registry's gate: an index file is never swapped under the call (a
    /// swap waits for it, and holds it back until the new file is open). Each attempt of
    /// `dispatchRecovering` is gated on its own, so its wait for a recovery holds no swap back.
    /// The stores the call leased are given back when it ends (the open-index bound may close them).
    func gatedDispatch(_ method: String, _ params: JSONValue) throws(SearchlightError) -> JSONValue {
        defer { callLeases.release() }
        return try context.registry.gate.serving { () throws(SearchlightError) -> JSONValue in try dispatch(method, params) }
    }

    /// Applies a call's mutations to the index and, while it is migrating, to its shadow. The
    /// extension's `deleteAll` (the usual start of a reindex-all) goes to the shadow only: the
    /// old file keeps answering queries completely until the swap. An app's `deleteAll` goes to both.
    func applyToIndex(_ params: JSONValue, _ mutations: [Mutation], expecting expectation: ClientStateExpectation = .any,
                      newClientState: [UInt8]? = nil) throws(SearchlightError) -> ApplyResult {
        let target = try store(params, write: true)
        guard let store = target.store else { throw SearchlightError(.indexUnavailable, "index could not be opened") }
        guard let shadow = context.registry.shadow(bundle: target.bundle, index: target.index) else {
            return try store.applySync(mutations, expecting: expectation, newClientState: newClientState)
        }
        var forOld = mutations
        if case .extensionHost? = role {
            forOld.removeAll { if case .deleteAll = $0 { true } else { false } }
        }
        let result = try store.applySync(forOld, expecting: expectation, newClientState: newClientState)
        do {
            _ = try shadow.applySync(mutations, newClientState: newClientState)
        } catch {
            // The caller's change is committed to the index in service; the shadow is refilled
            // before it may replace it.
            log.error("donation not written to the migration shadow", ["bundle": target.bundle, "error": error.message])
            context.registry.noteShadowFault(bundle: target.bundle, index: target.index, error.message)
        }
        return result
    }
}
