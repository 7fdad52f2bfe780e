import Foundation
import SearchlightWire

extension AdminSession {
    /// `admin.simulate {event: "idle", bundle?, wait?}`: runs idle maintenance now (every index, or
    /// the bundle's), whatever the load, at background priority like the idle trigger's run.
    /// With `wait` (the default) it answers the run's summary when the run ends and sends
    /// `$/progress` meanwhile: `{message}` as each index begins, `{completed, total, bundle,
    /// index}` per refinement batch committed. Without, it answers `{accepted, queued}` at once.
    /// The run goes on when the client goes (Ctrl-C on a waiting CLI): `admin.monitor`'s
    /// `maintenance.finished` and `status` tell when it ends.
    func simulateIdle(bundle: String?, wait: Bool) async throws -> JSONValue {
        guard let maintenance = context.maintenance else {
            throw SearchlightError(.indexUnavailable, "idle maintenance is not set up in this daemon")
        }
        if let bundle {
            // The registry's lock and a directory listing: not on the cooperative pool.
            let registry = context.registry
            guard try await !Self.onThread(named: "simulate", { registry.indexes(of: bundle).isEmpty }) else {
                throw SearchlightError(.invalidParams, "bundle \(bundle) has no index to maintain; check the name with `searchlight status`")
            }
        }
        context.log.notice("maintenance requested by hand", ["bundle": bundle ?? "*", "by_uid": peer.uid, "wait": wait])
        guard wait else {
            let queued = maintenance.startByHand(bundle: bundle) { _ in }
            var answer: [String: JSONValue] = ["event": "idle", "accepted": true, "queued": .bool(queued)]
            if let bundle { answer["bundle"] = .string(bundle) }
            return .object(answer)
        }
        let connection = client.connection
        return await withCheckedContinuation { continuation in
            maintenance.startByHand(bundle: bundle, progress: { p in
                // A client that went away misses the rest; the run goes on.
                try? connection.notify(Method.progress, Self.progressParams(p))
            }, done: { summary in continuation.resume(returning: summary.json) })
        }
    }

    /// The `$/progress` params of a maintenance step, as `searchlight simulate idle` shows them.
    static func progressParams(_ p: Maintenance.Progress) -> JSONValue {
        let name = "\(p.bundle)/\(p.index.isEmpty ? "_default" : p.index)"
        var o: [String: JSONValue] = ["bundle": .string(p.bundle), "index": .string(p.index),
            "position": .number(Double(p.position)), "count": .number(Double(p.count))]
        if let completed = p.completed {
            o["completed"] = .number(Double(completed))
            if let total = p.total { o["total"] = .number(Double(total)) }
            o["step"] = "refine"
        } else {
            o["message"] = .string("maintaining \(name) (\(p.position) of \(p.count))")
        }
        return .object(o)
    }
}
