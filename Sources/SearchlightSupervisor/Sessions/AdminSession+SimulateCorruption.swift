import Foundation
import SearchlightWire

extension AdminSession {
    /// `admin.simulate {event: "corruption", bundle?}`: treats every index of the bundle (of every
    /// bundle without one) as damaged and takes the real recovery path: the file goes to the
    /// quarantine, a fresh index answers at once, and a background reindex-all (reason
    /// "corruption") refills it, or without an extension the quarantined file's rows are salvaged.
    /// Answers what was started for each index.
    func simulateCorruption(bundle: String?) throws(SearchlightError) -> JSONValue {
        let bundles = bundle.map { [$0] } ?? context.registry.bundles()
        if let bundle, context.registry.indexes(of: bundle).isEmpty {
            throw SearchlightError(.indexUnavailable, "\(bundle) has no index file to recover; see `searchlight status` for the bundles there are")
        }
        var started: [JSONValue] = []
        for b in bundles {
            for index in context.registry.indexes(of: b) {
                let key = IndexRegistry.Key(bundle: b, index: index)
                let record = try context.recovery.quarantineAndRefill(key, reason: "simulated corruption (by uid \(peer.uid))", force: true)
                var entry: [String: JSONValue] = ["bundle": .string(b), "index": .string(index), "method": .string(record.method.rawValue)]
                if let q = record.quarantined { entry["quarantined"] = .string(q) }
                if let id = record.requestID { entry["requestId"] = .number(Double(id)) }
                if let label = record.label { entry["label"] = .string(label) }
                started.append(.object(entry))
            }
        }
        return ["event": "corruption", "indexes": .array(started)]
    }
}
