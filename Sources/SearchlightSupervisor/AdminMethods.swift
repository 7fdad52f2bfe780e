#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightStore
import SearchlightWire

/// The `admin.*` methods (role admin only; checked by the session).
struct AdminMethods {
    let session: ClientSession
    var context: ServiceContext { session.context }

    func dispatch(_ method: String, _ params: JSONValue) throws(SearchlightError) -> JSONValue {
        switch method {
        case Method.adminStatus: return try status(params)
        case Method.adminErase: return try erase(params)
        case Method.adminCheck: return try check(params)
        case Method.adminSetIndexing: return try setIndexing(params)
        case Method.adminReindex, Method.adminSimulate, Method.adminUnits, Method.adminRequests, Method.adminMonitor:
            throw SearchlightError(.methodNotFound,
                "\(method) needs index-extension support, which this build of searchlightd does not have yet")
        default:
            throw SearchlightError(.methodNotFound, "unknown admin method \"\(method.prefix(64))\"; see Docs/Protocol.md")
        }
    }

    private func bundleFilter(_ params: JSONValue) throws(SearchlightError) -> String? {
        guard let v = params["bundle"], !v.isNull else { return nil }
        return try Names.bundle(v)
    }

    private func status(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        let only = try bundleFilter(params)
        let records = Dictionary(uniqueKeysWithValues: context.state.allBundles().map { ($0.bundle, $0) })
        var names = Set(context.registry.bundles()).union(records.keys)
        if let only { names = names.filter { $0 == only } }
        var bundles: [JSONValue] = []
        for name in names.sorted() {
            var indexes: [JSONValue] = []
            for index in context.registry.indexes(of: name) {
                var entry: [String: JSONValue] = ["name": .string(index)]
                do {
                    guard let store = try context.registry.store(bundle: name, index: index, create: false) else { continue }
                    let s = try store.summary()
                    entry["state"] = store.detectedDamage == nil ? "ready" : "damaged"
                    entry["items"] = .number(Double(s.itemCount))
                    entry["bytes"] = .number(Double(s.fileBytes))
                    entry["formatVersion"] = .number(Double(s.formatVersion))
                    entry["hasClientState"] = .bool(s.hasClientState)
                    let w = store.writeStatistics
                    entry["commits"] = .number(Double(w.commits))
                    entry["committedCalls"] = .number(Double(w.calls))
                } catch {
                    entry["state"] = "unavailable"
                    entry["error"] = .string(error.message)
                }
                indexes.append(.object(entry))
            }
            var b: [String: JSONValue] = [
                "bundle": .string(name), "indexingEnabled": .bool(records[name]?.indexingEnabled ?? true), "indexes": .array(indexes),
            ]
            if let owner = records[name]?.ownerUID { b["ownerUID"] = .number(Double(owner)) }
            bundles.append(.object(b))
        }
        let c = context.config
        return [
            "version": .string(Version.string),
            "pid": .number(Double(getpid())),
            "mode": c.system ? "system" : "user",
            "uptimeSeconds": .number(Date().timeIntervalSince(context.startedAt).rounded()),
            "socket": .string(c.socketPath),
            "stateDirectory": .string(c.stateDirectory),
            "connections": .number(Double(context.connections)),
            "requests": .number(Double(context.requests)),
            "bundles": .array(bundles),
        ]
    }

    private func erase(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        guard let bundle = try bundleFilter(params) else { throw .invalidParams("\"bundle\" is required") }
        let n = context.registry.erase(bundle: bundle)
        context.log.notice("bundle erased", ["bundle": bundle, "indexes": n, "by_uid": session.peer.uid])
        return ["erased": .number(Double(n))]
    }

    private func check(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        let only = try bundleFilter(params)
        let repair = params["repair"]?.boolValue ?? false
        var results: [JSONValue] = []
        var allOK = true
        for bundle in context.registry.bundles() where only == nil || only == bundle {
            for index in context.registry.indexes(of: bundle) {
                var entry: [String: JSONValue] = ["bundle": .string(bundle), "index": .string(index)]
                do {
                    guard let store = try context.registry.store(bundle: bundle, index: index, create: false) else { continue }
                    let report = try store.check(repair: repair)
                    entry["ok"] = .bool(report.ok)
                    entry["problems"] = .array(report.problems.map(JSONValue.string))
                    entry["repaired"] = .array(report.repaired.map(JSONValue.string))
                    allOK = allOK && report.ok
                } catch {
                    entry["ok"] = false
                    entry["problems"] = [.string(error.message)]
                    allOK = false
                }
                results.append(.object(entry))
            }
        }
        return ["ok": .bool(allOK), "indexes": .array(results)]
    }

    private func setIndexing(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        guard let bundle = try bundleFilter(params) else { throw .invalidParams("\"bundle\" is required") }
        guard let enabled = params["enabled"]?.boolValue else { throw .invalidParams("\"enabled\" must be true or false") }
        do {
            try context.state.setIndexing(bundle, enabled: enabled)
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot record the indexing setting: \(error)")
        }
        context.log.notice("indexing changed", ["bundle": bundle, "enabled": enabled])
        return ["bundle": .string(bundle), "enabled": .bool(enabled)]
    }
}
