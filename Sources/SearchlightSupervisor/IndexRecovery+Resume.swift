import Foundation
import SearchlightStore
import SearchlightWire

/// Recoveries resumed at start: a daemon stopped or killed during one finds its journal entries
/// (`RecoveryRecords`, and the journaled reindex-all of an extension's refill) and carries on, so
/// the index is `recovering` until its refill is really done.
extension IndexRecovery {
    /// Before any index is opened: finishes moving the sets a killed daemon had begun to set aside
    /// (the main file is moved last, so one still at its path is the damaged one: the fresh file
    /// is created only after the move). A record whose file is nowhere is dropped.
    func finishSetAsides(registry: IndexRegistry) {
        for r in records.all() where !quarantine.contains(r.quarantined) {
            let path = registry.path(bundle: r.bundle, index: r.index)
            guard FileManager.default.fileExists(atPath: path) else {
                records.remove(quarantined: r.quarantined)
                log.warning("recovery record dropped: its file is gone", ["bundle": r.bundle, "index": Self.name(r.index), "quarantined": r.quarantined])
                continue
            }
            do {
                try quarantine.finishSetAside(path: path, as: r.quarantined)
                log.notice("damaged index set aside", ["bundle": r.bundle, "index": Self.name(r.index), "quarantined": r.quarantined,
                    "method": r.method, "resumed": true])
            } catch {
                log.error("cannot finish setting a damaged index aside", ["bundle": r.bundle, "index": Self.name(r.index), "error": error.message])
            }
        }
    }

    /// At start, once the units are loaded: recoveries whose refill is journaled are recovering
    /// again; an interrupted salvage starts over from its quarantined file (rows already copied
    /// are skipped); a refill by an extension whose request was not yet journaled is journaled now.
    func resume() {
        guard let context else { return }
        for r in records.all() where quarantine.contains(r.quarantined) {
            let key = IndexRegistry.Key(bundle: r.bundle, index: r.index)
            if r.method == Method.reindexAll.rawValue, extensionRefills(key), let scheduler = context.scheduler {
                let journaled = context.journal.all().contains {
                    $0.bundle == r.bundle && $0.index == r.index && $0.kind == .all && $0.reason == "corruption"
                }
                do {
                    if !journaled {
                        _ = try scheduler.enqueue(bundle: r.bundle, index: r.index, kind: .all, identifiers: [], reason: "corruption", background: true)
                    }
                    records.remove(quarantined: r.quarantined)
                    continue  // the journal loop below makes it recovering
                } catch {
                    log.error("cannot journal the recovery's reindex-all; salvaging instead", ["bundle": r.bundle, "error": "\(error)"])
                }
            }
            resumeSalvage(r, key: key)
        }
        for request in context.journal.all() where request.kind == .all && request.reason == "corruption" {
            let key = IndexRegistry.Key(bundle: request.bundle, index: request.index)
            let label = context.catalog.unit(forBundle: request.bundle)?.label
            lock.withLock {
                active[key] = Record(method: .reindexAll, reason: "resumed after a restart", started: request.created, requestID: request.id, label: label)
            }
            let reason = request.state == .failed
                ? "corruption: the refill failed (\(request.lastError ?? "?")); ask again with `searchlight reindex \(label ?? request.bundle) --all`"
                : "corruption: refill resumed after a restart"
            context.registry.setCondition(IndexCondition(.recovering, reason: reason, since: request.created, requestID: request.id),
                bundle: request.bundle, index: request.index)
            log.notice("index recovery resumed", ["bundle": request.bundle, "index": Self.name(request.index), "request": request.id])
        }
        quarantine.prune()
    }

    private func resumeSalvage(_ r: RecoveryRecord, key: IndexRegistry.Key) {
        guard let context else { return }
        let record = Record(method: .salvage, reason: r.reason, started: r.started, quarantined: r.quarantined)
        lock.withLock { active[key] = record }
        context.registry.setCondition(IndexCondition(.recovering,
            reason: "corruption (\(r.reason)); salvaging the readable rows of quarantine/\(r.quarantined), resumed after a restart", since: r.started),
            bundle: key.bundle, index: key.index)
        log.notice("index recovery resumed", ["bundle": key.bundle, "index": Self.name(key.index), "method": Method.salvage.rawValue,
            "quarantined": r.quarantined])
        emit("index.recovering", key, ["reason": .string(r.reason), "method": .string(Method.salvage.rawValue),
            "quarantined": .string(r.quarantined), "resumed": true])
        salvageQueue.async { [self] in
            do throws(SearchlightError) {
                // Leased for the salvage (the index is also `recovering`, which the open-index bound never closes).
                try context.registry.withStore(bundle: key.bundle, index: key.index, create: true) { (store) throws(SearchlightError) in
                    guard let store else { return }
                    salvage(key, into: store, record: record)
                }
            } catch {
                log.error("index salvage failed", ["bundle": key.bundle, "index": Self.name(key.index), "quarantined": r.quarantined,
                    "error": error.message])
            }
        }
    }

    /// The bundle was erased: nothing of its quarantined files is to be restored any more.
    func forget(bundle: String) {
        records.remove(bundle: bundle)
        lock.withLock { active = active.filter { $0.key.bundle != bundle } }
        quarantine.prune()
    }

    /// `admin.status`' `quarantine`: every quarantined file with its bundle and index (from its
    /// sidecar), and whether it is kept until its rows are restored.
    func quarantineStatus() -> JSONValue {
        let pinned = records.pinned
        return .array(quarantine.entries().map { e in
            var o: [String: JSONValue] = ["file": .string(e.name), "pinned": .bool(pinned.contains(e.name))]
            if let b = e.bundle { o["bundle"] = .string(b) }
            if let i = e.index { o["index"] = .string(i) }
            if let r = e.reason { o["reason"] = .string(r) }
            if let d = e.quarantined { o["quarantined"] = .string(ISO8601.format(d)) }
            return .object(o)
        })
    }
}
