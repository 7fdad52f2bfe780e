import Foundation
import SearchlightStore
import SearchlightWire

extension AdminSession {
    /// `admin.simulate {event: "migration", bundle?}`: migrates every index of the bundle (or of
    /// every bundle) as if its extension's IndexVersion had changed: by a reindex-all into a
    /// shadow when an extension serves it, else locally from the stored items. Answers what
    /// started; the work goes on in the background (status shows `migrating`, then `ready`).
    func simulateMigration(bundle: String?) throws(SearchlightError) -> JSONValue {
        guard let migrator = context.migrator else {
            throw SearchlightError(.indexUnavailable, "the daemon is still starting; retry")
        }
        let bundles = bundle.map { [$0] } ?? context.registry.bundles()
        var started: [JSONValue] = []
        for b in bundles {
            for index in context.registry.indexes(of: b) {
                guard let path = migrator.start(bundle: b, index: index, reason: "simulated") else { continue }
                started.append(["bundle": .string(b), "index": .string(index), "path": .string(path.rawValue)])
            }
        }
        if let bundle, started.isEmpty {
            throw SearchlightError(.indexUnavailable, "\(bundle) has no index to migrate; donate items (or reindex it) first")
        }
        return ["event": "migration", "started": .array(started), "formatVersion": .number(Double(Schema.formatVersion))]
    }
}
