#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightStore
import SearchlightWire

/// The session of an administrator (`initialize {role: "admin"}`: root, the daemon's user, or a
/// member of `--admin-group`): the `admin.*` methods, and the index and query methods on any
/// bundle it names (a query without a bundle searches them all).
final class AdminSession: BundleSession {
    let client: ClientSession
    let calls: BundleCalls
    var context: ServiceContext { client.context }
    var peer: PeerCredentials { client.peer }

    init(client: ClientSession) {
        self.client = client
        calls = BundleCalls(client: client, caller: .admin)
    }

    static let handlers: HandlerTable<AdminSession> = {
        var table = HandlerTable<AdminSession>()
        table.addIndexMethods()
        table.addQueryMethods()
        table.addItemDataMethods()
        table.addDesktopSettingsMethods()
        table.addActivityResolve()
        table.on(AdminStatus.self) { s, r throws(SearchlightError) in JSONResponse(result: try s.status(r)) }
        table.on(AdminErase.self) { s, r throws(SearchlightError) in JSONResponse(result: try s.erase(r)) }
        table.on(AdminCheck.self) { s, r throws(SearchlightError) in JSONResponse(result: try s.check(r)) }
        table.on(AdminSetIndexing.self) { s, r throws(SearchlightError) in JSONResponse(result: try s.setIndexing(r)) }
        table.on(AdminSetOwner.self) { s, r throws(SearchlightError) in JSONResponse(result: try s.setOwner(r)) }
        table.on(AdminUnits.self) { s, _ in JSONResponse(result: s.units()) }
        table.on(AdminRequests.self) { s, _ in JSONResponse(result: s.requests()) }
        table.on(AdminMonitor.self) { s, _ in
            s.context.events.subscribe(s.client.connection)
            return JSONResponse(result: ["monitoring": true])
        }
        table.onDeferred(AdminSimulate.self) { s, r in JSONResponse(result: try await s.simulate(r)) }
        table.onDeferred(AdminReindex.self) { s, r in JSONResponse(result: try await s.reindex(r)) }
        table.onDeferred(AdminRestartExtension.self) { s, r in JSONResponse(result: try await s.restartExtension(r)) }
        return table
    }()

    /// `admin.status`'s `memory`: resident (anonymous, file), glibc's heap, SQLite's share; bytes.
    static func memoryJSON(_ m: ProcessMemory) -> JSONValue {
        [
            "residentBytes": .number(Double(m.residentBytes)), "anonymousBytes": .number(Double(m.anonymousBytes)),
            "fileBytes": .number(Double(m.fileBytes)),
            "malloc": [
                "arenaBytes": .number(Double(m.mallocArenaBytes)), "mmapBytes": .number(Double(m.mallocMmapBytes)),
                "inUseBytes": .number(Double(m.mallocInUseBytes)), "freeBytes": .number(Double(m.mallocFreeBytes)),
                "quietTrims": .number(Double(m.quietTrims)),
            ],
            "sqlite": [
                "usedBytes": .number(Double(m.sqliteBytes)), "highwaterBytes": .number(Double(m.sqliteHighwaterBytes)),
                "pageCacheBytes": .number(Double(m.sqlitePageCacheBytes)),
            ],
        ]
    }

    private func status(_ r: AdminStatus) throws(SearchlightError) -> JSONValue {
        let only = r.bundle
        let records = Dictionary(uniqueKeysWithValues: context.state.allBundles().map { ($0.bundle, $0) })
        var names = Set(context.registry.bundles()).union(records.keys).union(context.registry.conditionedBundles())
        if let only { names = names.filter { $0 == only } }
        var bundles: [JSONValue] = []
        for name in names.sorted() {
            var indexes: [JSONValue] = []
            for index in Set(context.registry.indexes(of: name) + context.registry.conditionedIndexes(of: name)).sorted() {
                var entry: [String: JSONValue] = ["name": .string(index)]
                let condition = context.registry.condition(bundle: name, index: index)
                if let c = condition {
                    entry["state"] = .string(c.phase.rawValue)
                    entry["reason"] = .string(c.reason)
                    entry["since"] = .string(ISO8601.format(c.since))
                    if let id = c.requestID {
                        entry["requestID"] = .number(Double(id))
                        if let p = context.scheduler?.progress(of: id) {
                            var progress: [String: JSONValue] = ["completed": .number(Double(p.completed))]
                            if let total = p.total { progress["total"] = .number(Double(total)) }
                            entry["progress"] = .object(progress)
                        }
                    }
                }
                // Being filled, and nothing donated yet: no file so far.
                if condition != nil, !FileManager.default.fileExists(atPath: context.registry.path(bundle: name, index: index)) {
                    entry["items"] = 0
                    indexes.append(.object(entry))
                    continue
                }
                do {
                    // Without opening it: ten thousand bundles must not open ten thousand stores.
                    let (s, store) = try context.registry.summary(bundle: name, index: index)
                    if condition == nil { entry["state"] = store?.detectedDamage == nil ? "ready" : "damaged" }
                    entry["open"] = .bool(store != nil)
                    if let r = context.recovery.lastRecovery(bundle: name, index: index) { entry["lastRecovery"] = r }
                    entry["items"] = .number(Double(s.itemCount))
                    entry["bytes"] = .number(Double(s.fileBytes))
                    entry["formatVersion"] = .number(Double(s.formatVersion))
                    entry["vectors"] = .number(Double(s.vectors))
                    entry["refined"] = .number(Double(s.refined))
                    if let failure = context.migrator?.failure(bundle: name, index: index) { entry["migrationError"] = .string(failure) }
                    entry["hasClientState"] = .bool(s.hasClientState)
                    if let r = s.rankedIndex {
                        var ranked: [String: JSONValue] = ["segments": .number(Double(r.segments)), "items": .number(Double(r.items)),
                            "pending": .number(Double(r.pending)), "builds": .number(Double(r.builds)), "settled": .bool(r.settled)]
                        if let e = r.lastError { ranked["lastError"] = .string(e) }
                        entry["rankedIndex"] = .object(ranked)
                    }
                    if let m = store?.memoryFigures {
                        var memory: [String: JSONValue] = [
                            "readers": .number(Double(m.readers)), "busyReaders": .number(Double(m.busyReaders)),
                            "readerPageCacheBytes": .number(Double(m.readerPageCacheBytes)),
                            "postingCacheBytes": .number(Double(m.postingCacheBytes)),
                            "unionScratchBytes": .number(Double(m.unionScratchBytes)),
                            "vectorHeapBytes": .number(Double(m.vectorHeapBytes)), "partitionBuilding": .bool(m.partitionBuilding),
                        ]
                        switch m.vectorLoad {
                        case .savedFile: memory["vectorsLoadedFrom"] = "savedFile"
                        case .table: memory["vectorsLoadedFrom"] = "table"
                        case nil: break
                        }
                        entry["memory"] = .object(memory)
                    }
                    let w = store?.writeStatistics ?? (commits: 0, calls: 0)
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
            "openIndexes": .number(Double(context.registry.openCount)),
            "maxOpenIndexes": .number(Double(context.registry.maxOpen)),
            // Indexes held open for a whole query across apps: the places taken, the snapshots
            // open (now and the most at once since the start), and the budget over all queries.
            "federatedHolds": [
                "taken": .number(Double(context.registry.snapshotHoldsTaken)), "open": .number(Double(IndexSnapshot.openCount)),
                "peak": .number(Double(IndexSnapshot.peakOpenCount)), "limit": .number(Double(context.registry.maxSnapshotHolds)),
            ],
            "requests": .number(Double(context.requests)),
            "bundles": .array(bundles),
            "extensions": .array((context.scheduler?.allHosts ?? []).map(\.statusJSON)),
            "throttle": context.scheduler?.throttle.statusJSON ?? .null,
            "power": context.scheduler?.power.statusJSON ?? .null,
            "maintenance": context.maintenance?.statusJSON ?? .null,
            "refinementShare": context.refinementShare?.statusJSON ?? .null,
            "reindexRequests": requestCounts(),
            "quarantine": context.recovery.quarantineStatus(),
            "semantic": context.semantic.status,
            "staleItems": context.staleItems.statusJSON,
            "memory": Self.memoryJSON(ProcessMemory.current()),
        ]
    }

    private func requestCounts() -> JSONValue {
        let all = context.journal.all()
        func count(_ s: ReindexRequest.State) -> JSONValue { .number(Double(all.filter { $0.state == s }.count)) }
        return ["pending": count(.pending), "running": count(.running), "failed": count(.failed),
                "poisoned": .number(Double(context.journal.poisoned().count))]
    }

    /// `admin.units`: reloads the unit files and lists them with their extension's state.
    private func units() -> JSONValue {
        guard let scheduler = context.scheduler else { return ["units": [], "problems": []] }
        let report = scheduler.reloadUnits()
        let hosts = Dictionary(uniqueKeysWithValues: scheduler.allHosts.map { ($0.label, $0) })
        let units: [JSONValue] = context.catalog.units.map { unit in
            if let host = hosts[unit.label] { return host.statusJSON }
            return ["label": .string(unit.label), "bundleIdentifier": .string(unit.bundleIdentifier), "path": .string(unit.path),
                    "executable": .string(unit.executable), "disabled": .bool(unit.disabled), "state": "disabled",
                    "launches": 0, "crashes": 0, "indexNames": .array(unit.indexExtension.indexNames.map(JSONValue.string)),
                    "indexVersion": .number(Double(unit.indexExtension.indexVersion))]
        }
        let problems: [JSONValue] = report.problems.map { p in
            var o: [String: JSONValue] = ["file": .string(p.file), "message": .string(p.message + "; " + p.fix)]
            if let key = p.key { o["key"] = .string(key) }
            return .object(o)
        }
        return ["directories": .array(context.catalog.directories.map(JSONValue.string)), "units": .array(units), "problems": .array(problems)]
    }

    /// `admin.requests`: the journal, with live progress, and the poisoned identifiers.
    private func requests() -> JSONValue {
        let hosts = Dictionary((context.scheduler?.allHosts ?? []).map { ($0.unit.bundleIdentifier, $0) }, uniquingKeysWith: { a, _ in a })
        let labels = hosts.mapValues(\.label)
        let now = Date()
        let list: [JSONValue] = context.journal.all().map { r in
            var o: [String: JSONValue] = [
                "id": .number(Double(r.id)), "bundle": .string(r.bundle), "index": .string(r.index), "kind": .string(r.kind.rawValue),
                "identifierCount": .number(Double(r.identifiers.count)), "reason": .string(r.reason), "background": .bool(r.background),
                "state": .string(r.state.rawValue), "attempts": .number(Double(r.attempts)), "created": .string(ISO8601.format(r.created)),
            ]
            if let label = labels[r.bundle] { o["label"] = .string(label) }
            if r.state == .pending, r.notBefore > now {
                o["notBefore"] = .string(ISO8601.format(r.notBefore))
                // Which clock it waits for: the extension's launch backoff (after a crash or hang;
                // `units` shows the same time) or its own retry backoff (after a negative answer).
                let launch = hosts[r.bundle]?.nextLaunch
                o["retryAfter"] = launch.map { abs($0.timeIntervalSince(r.notBefore)) < 1 } == true ? "launchBackoff" : "retryBackoff"
            }
            if let e = r.lastError { o["lastError"] = .string(e) }
            if let p = context.scheduler?.progress(of: r.id) {
                var pj: [String: JSONValue] = ["completed": .number(Double(p.completed))]
                if let t = p.total { pj["total"] = .number(Double(t)) }
                o["progress"] = .object(pj)
            }
            return .object(o)
        }
        let poisoned: [JSONValue] = context.journal.poisoned().map {
            ["bundle": .string($0.bundle), "index": .string($0.index), "identifier": .string($0.identifier),
             "error": .string($0.error), "at": .string(ISO8601.format($0.at))]
        }
        return ["requests": .array(list), "poisoned": .array(poisoned)]
    }

    private func erase(_ r: AdminErase) throws(SearchlightError) -> JSONValue {
        let bundle = r.bundle, reindex = r.reindex
        // Refuse before erasing: "erase and rebuild" must not become "erase" for want of an extension.
        let unit = context.catalog.unit(forBundle: bundle)
        if reindex, unit == nil {
            throw SearchlightError(.unknownExtension, "no index extension serves \(bundle), so nothing could rebuild it; nothing was erased")
        }
        let n = context.registry.erase(bundle: bundle)
        context.state.erased(bundle)
        context.recovery.forget(bundle: bundle)
        context.log.notice("bundle erased", ["bundle": bundle, "indexes": n, "by_uid": peer.uid])
        var answer: [String: JSONValue] = ["erased": .number(Double(n))]
        if reindex, let unit, let scheduler = context.scheduler {
            var ids: [JSONValue] = []
            for index in unit.indexExtension.indexNames {
                do {
                    ids.append(.number(Double(try scheduler.enqueue(bundle: bundle, index: index, kind: .all, identifiers: [],
                        reason: "manual", background: false).id)))
                } catch {
                    throw SearchlightError(.indexUnavailable, "erased, but the reindex request could not be journaled: \(error); run `searchlight reindex \(unit.label) --all`")
                }
            }
            answer["requestIds"] = .array(ids)
            answer["label"] = .string(unit.label)
        }
        return .object(answer)
    }

    private func check(_ r: AdminCheck) throws(SearchlightError) -> JSONValue {
        let only = r.bundle, repair = r.repair
        var results: [JSONValue] = []
        var allOK = true
        for bundle in context.registry.bundles() where only == nil || only == bundle {
            for index in context.registry.indexes(of: bundle) {
                var entry: [String: JSONValue] = ["bundle": .string(bundle), "index": .string(index)]
                do {
                    // One index at a time, each leased only while it is checked: the open-index
                    // bound closes the ones checked before, so a check never opens them all at once.
                    guard let report = try context.registry.withStore(bundle: bundle, index: index, create: false, { (store) throws(SearchlightError) in
                        try store?.check(repair: repair)
                    }) else { continue }
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

    /// `admin.setOwner {bundle, uid}`: records the bundle's owner (a bundle written before owners
    /// were recorded on every write has none, and only administrators may use it until then).
    /// While an enabled unit serves the bundle, its user stays the owner that counts.
    private func setOwner(_ r: AdminSetOwner) throws(SearchlightError) -> JSONValue {
        let bundle = r.bundle, uid = r.uid
        do {
            try context.state.setOwner(bundle, uid: uid)
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot record the owner of \(bundle): \(error); retry")
        }
        context.log.notice("bundle owner set", ["bundle": bundle, "owner_uid": uid, "by_uid": peer.uid])
        var answer: [String: JSONValue] = ["bundle": .string(bundle), "ownerUID": .number(Double(uid))]
        if let unit = context.catalog.unit(forBundle: bundle) {
            answer["servedBy"] = .string(unit.label)
            answer["unitOwnerUID"] = .number(Double(context.unitOwner(unit)))
        }
        return .object(answer)
    }

    private func setIndexing(_ r: AdminSetIndexing) throws(SearchlightError) -> JSONValue {
        let bundle = r.bundle, enabled = r.enabled
        do {
            try context.state.setIndexing(bundle, enabled: enabled)
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot record the indexing setting: \(error)")
        }
        context.log.notice("indexing changed", ["bundle": bundle, "enabled": enabled])
        if enabled { context.scheduler?.wake() }  // requests held back while it was off may go now
        return ["bundle": .string(bundle), "enabled": .bool(enabled)]
    }
}
