import Foundation
import SearchlightWire

extension AdminSession {
    /// `admin.simulate {event: "idle", bundle?}`: runs idle maintenance now, for real, without
    /// waiting for idleness (a manual request is never throttled), and answers its summary. A run
    /// over every bundle counts as the periodic one: the next is due an interval later.
    func simulateIdle(bundle: String?) throws(SearchlightError) -> JSONValue {
        guard let maintenance = context.maintenance else {
            throw SearchlightError(.indexUnavailable, "idle maintenance is not set up in this daemon")
        }
        if let bundle, context.registry.indexes(of: bundle).isEmpty {
            throw SearchlightError(.invalidParams, "bundle \(bundle) has no index to maintain; check the name with `searchlight status`")
        }
        context.log.notice("maintenance requested by hand", ["bundle": bundle ?? "*", "by_uid": peer.uid])
        return maintenance.runByHand(bundle: bundle).json
    }
}
