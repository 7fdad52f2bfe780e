import Foundation
import Synchronization
import SearchlightStore
import SearchlightUnits
import SearchlightWire

/// Migration (DESIGN §6 Triggers): an index file of an older store format, or a unit whose
/// `IndexVersion` changed, is rebuilt into a shadow file while queries keep answering, complete,
/// from the old one; donations go to both; the shadow then replaces the old file atomically.
///
/// Two paths fill the shadow. With an extension serving the index: a background reindex-all
/// (reason "migration"), and the swap happens on its acknowledgement; a negative outcome for good
/// leaves the old file in place and status says why. Without one: the stored items are copied
/// from the old file and the full-text index is built in the new format (`local`).
///
/// A rebuild record in supervisor.sqlite outlives the daemon: after a restart (or SIGKILL) the
/// shadow is reopened and the still-journaled request resumes; if the request was acknowledged
/// just before the daemon stopped, the swap happens at start.
///
/// All starts, swaps and copies run on one serial queue, outside client calls: registering a
/// shadow and swapping wait for the calls in progress (`IndexRegistry.gate`).
final class Migrator: Sendable {
    enum Path: String, Sendable {
        case `extension`, local
    }

    struct Active {
        var path: Path
        var shadow: IndexStore
        var requestID: Int64?
        var reason: String
        var targetVersion: Int?
        var started: Date
    }

    let context: ServiceContext
    let records: RebuildRecords
    private let queue = DispatchQueue(label: "searchlightd.migration")
    /// The migrations in progress, and why the last one of an index failed.
    private let lock = Mutex<(active: [IndexRegistry.Key: Active], failures: [IndexRegistry.Key: String])>(([:], [:]))

    init(context: ServiceContext) throws {
        self.context = context
        records = try RebuildRecords(path: context.config.stateDirectory + "/supervisor.sqlite")
    }

    var registry: IndexRegistry { context.registry }
    var log: Logger { context.log }

    static func indexName(_ index: String) -> String { index.isEmpty ? "_default" : index }

    // MARK: - Starting

    /// At daemon start, before the scheduler sends anything: resumes the recorded rebuilds.
    func resume(scheduler: RequestScheduler) {
        scheduler.observeOutcomes { [weak self] request, outcome in self?.outcome(request.id, outcome) }
        for record in records.all() { resume(record) }
    }

    private func resume(_ record: RebuildRecord) {
        let key = IndexRegistry.Key(bundle: record.bundle, index: record.index)
        let name = Self.indexName(record.index)
        let shadowFile = registry.shadowPath(bundle: record.bundle, index: record.index)
        guard record.path == Path.extension.rawValue, let id = record.requestID,
              FileManager.default.fileExists(atPath: shadowFile),
              FileManager.default.fileExists(atPath: registry.path(bundle: record.bundle, index: record.index)) else {
            // A local copy is simply done again (the format scan starts it); a record without
            // its files has nothing left to resume.
            IndexRegistry.removeDatabaseFiles(shadowFile)
            records.remove(bundle: record.bundle, index: record.index)
            log.info("migration record dropped; it starts again if still needed", ["bundle": record.bundle, "index": name, "path": record.path])
            return
        }
        let request = context.journal.request(id)
        if request?.state == .failed {
            IndexRegistry.removeDatabaseFiles(shadowFile)
            records.remove(bundle: record.bundle, index: record.index)
            lock.withLock { s in s.failures[key] = "migration request \(id) failed: \(request?.lastError ?? "")" }
            return
        }
        do {
            try registry.withStore(bundle: record.bundle, index: record.index, create: false) { _ in }
            let shadow = try registry.beginShadow(bundle: record.bundle, index: record.index, resume: true)
            lock.withLock { s in
                s.active[key] = Active(path: .extension, shadow: shadow, requestID: id, reason: record.reason,
                    targetVersion: record.targetVersion, started: record.started)
            }
            registry.setCondition(IndexCondition(.migrating, reason: record.reason, since: record.started, requestID: id),
                bundle: record.bundle, index: record.index)
            log.notice("migration resumed", ["bundle": record.bundle, "index": name, "path": record.path, "request": id,
                "acknowledged": request == nil, "shadow_items": shadow.count])
            if request == nil {
                // Acknowledged just before the daemon stopped: the shadow is complete.
                queue.async { self.complete(key) }
            }
        } catch {
            log.error("cannot resume migration; starting it again", ["bundle": record.bundle, "index": name, "error": "\(error)"])
            registry.dropShadow(bundle: record.bundle, index: record.index)
            records.remove(bundle: record.bundle, index: record.index)
        }
    }

    /// After the units are loaded: every index file of an older store format that needs a rebuild
    /// (`Schema.needsRebuild`; the others are relabelled when opened) is migrated, by
    /// its extension when one serves it, else locally. Reads each file's header, without opening
    /// it (indexes open on first use; a damaged one is then recovered as usual).
    func scanFormats() {
        for bundle in registry.bundles() {
            for index in registry.indexes(of: bundle) {
                let file = registry.path(bundle: bundle, index: index)
                var version = IndexStore.recordedFormatVersion(at: file)
                if version == nil, IndexStore.fileDamage(at: file, deep: false) == nil {
                    version = (try? registry.withStore(bundle: bundle, index: index, create: false) { $0?.formatVersion }) ?? nil
                }
                guard let version, version >= Schema.oldestReadableFormat, Schema.needsRebuild(from: version) else { continue }
                start(bundle: bundle, index: index, reason: "store format \(version) -> \(Schema.formatVersion)")
            }
        }
    }

    /// A unit whose IndexVersion differs from the one its index was filled with: migrate it.
    func unitsReloaded(_ units: [ExtensionUnit]) {
        for unit in units {
            for index in unit.indexExtension.indexNames {
                let bundle = unit.bundleIdentifier, version = unit.indexExtension.indexVersion
                guard let recorded = context.journal.recordedVersion(bundle: bundle, index: index), recorded != version else { continue }
                start(bundle: bundle, index: index, reason: "IndexVersion \(recorded) -> \(version)")
            }
        }
    }

    /// Starts a migration of one index (soon, on the migration queue); returns the path it
    /// takes, or nil when the index has no file (an extension then simply fills a new one).
    @discardableResult
    func start(bundle: String, index: String, reason: String) -> Path? {
        let key = IndexRegistry.Key(bundle: bundle, index: index)
        let unit = context.catalog.unit(forBundle: bundle).flatMap { $0.indexExtension.indexNames.contains(index) ? $0 : nil }
        guard FileManager.default.fileExists(atPath: registry.path(bundle: bundle, index: index)) else {
            if let unit {
                // Nothing to keep answering from: the new version fills a new file directly.
                do {
                    try context.journal.recordVersion(bundle: bundle, index: index, version: unit.indexExtension.indexVersion)
                    _ = try context.scheduler?.enqueue(bundle: bundle, index: index, kind: .all, identifiers: [], reason: "migration", background: true)
                } catch {
                    log.error("cannot journal the migration reindex", ["bundle": bundle, "error": "\(error)"])
                }
            }
            return nil
        }
        let path: Path = unit == nil ? .local : .extension
        queue.async {
            if self.lock.withLock({ s in s.active[key] != nil }) { return }
            switch path {
            case .local: self.migrateLocally(key, reason: reason)
            case .extension: self.migrateByExtension(key, reason: reason, targetVersion: unit?.indexExtension.indexVersion)
            }
        }
        return path
    }

    private func began(_ key: IndexRegistry.Key, _ a: Active) {
        lock.withLock { s in s.failures[key] = nil }
        registry.setCondition(IndexCondition(.migrating, reason: a.reason, since: a.started, requestID: a.requestID),
            bundle: key.bundle, index: key.index)
        var e: [String: JSONValue] = ["bundle": .string(key.bundle), "index": .string(key.index), "reason": .string(a.reason),
            "path": .string(a.path.rawValue), "formatVersion": .number(Double(Schema.formatVersion))]
        if let id = a.requestID { e["requestId"] = .number(Double(id)) }
        context.events.emit("index.migrating", e)
        log.notice("migration started", ["bundle": key.bundle, "index": Self.indexName(key.index), "path": a.path.rawValue,
            "reason": a.reason, "request": a.requestID.map { String($0) } ?? "-"])
    }

    private func migrateByExtension(_ key: IndexRegistry.Key, reason: String, targetVersion: Int?) {
        do {
            guard let scheduler = context.scheduler else { return }
            try registry.withStore(bundle: key.bundle, index: key.index, create: false) { _ in }
            let shadow = try registry.beginShadow(bundle: key.bundle, index: key.index, resume: false)
            let started = Date()
            // Held until `active` knows the request: its outcome may come at once.
            let a: Active = try lock.withLock { s in
                let queued = try scheduler.enqueue(bundle: key.bundle, index: key.index, kind: .all, identifiers: [],
                    reason: "migration", background: true)
                let a = Active(path: .extension, shadow: shadow, requestID: queued.id, reason: reason, targetVersion: targetVersion, started: started)
                s.active[key] = a
                return a
            }
            try records.save(RebuildRecord(path: Path.extension.rawValue, bundle: key.bundle, index: key.index, requestID: a.requestID,
                reason: reason, targetVersion: targetVersion, started: started))
            began(key, a)
        } catch {
            abandon(key, "cannot start the migration: \(error)")
        }
    }

    private func migrateLocally(_ key: IndexRegistry.Key, reason: String) {
        do {
            // Leased until the copy is done: the store it copies from stays open meanwhile.
            let lease = IndexLeases(registry)
            defer { lease.release() }
            guard let old = try registry.store(bundle: key.bundle, index: key.index, create: false, lease: lease) else { return }
            let shadow = try registry.beginShadow(bundle: key.bundle, index: key.index, resume: false)
            let a = Active(path: .local, shadow: shadow, requestID: nil, reason: reason, targetVersion: nil, started: Date())
            lock.withLock { s in s.active[key] = a }
            try records.save(RebuildRecord(path: Path.local.rawValue, bundle: key.bundle, index: key.index, requestID: nil,
                reason: reason, targetVersion: nil, started: a.started))
            began(key, a)
            let copied = try shadow.importSource()
            log.info("migration copied the stored items", ["bundle": key.bundle, "index": Self.indexName(key.index), "items": copied,
                "old_items": old.count, "elapsed_s": String(format: "%.3f", Date().timeIntervalSince(a.started))])
            complete(key)
        } catch {
            abandon(key, "local migration failed: \(error)")
        }
    }

    // MARK: - Ending

    /// A request's outcome (from the scheduler): the migration it fills swaps or ends.
    private func outcome(_ id: Int64, _ outcome: RequestScheduler.Outcome) {
        let key: IndexRegistry.Key? = lock.withLock { s in s.active.first { $0.value.requestID == id }?.key }
        guard let key else { return }
        switch outcome {
        case .acknowledged: queue.async { self.complete(key) }
        case .failed(let message): queue.async { self.abandon(key, "migration request \(id) failed: \(message)") }
        }
    }

    /// The shadow is complete: it replaces the old file.
    private func complete(_ key: IndexRegistry.Key) {
        guard let a = lock.withLock({ s in s.active[key] }) else { return }
        guard registry.shadow(bundle: key.bundle, index: key.index) === a.shadow else {
            abandon(key, "the shadow was removed (the bundle was erased)")
            return
        }
        if let fault = registry.shadowFault(bundle: key.bundle, index: key.index) {
            // A donation missed the shadow: fill it again rather than lose that donation.
            log.warning("migration shadow missed a donation; rebuilding it again", ["bundle": key.bundle, "error": fault])
            registry.dropShadow(bundle: key.bundle, index: key.index)
            lock.withLock { s in _ = s.active.removeValue(forKey: key) }
            if a.path == .local { migrateLocally(key, reason: a.reason) } else { migrateByExtension(key, reason: a.reason, targetVersion: a.targetVersion) }
            return
        }
        do {
            if a.path == .extension {
                do {
                    try a.shadow.carryOverEngagement()
                } catch {
                    // Ranking history only (the old file may have been set aside by a recovery).
                    log.warning("engagement not carried over to the migrated index", ["bundle": key.bundle, "error": error.message])
                }
            }
            let (store, pause) = try registry.swapInShadow(bundle: key.bundle, index: key.index, shadow: a.shadow)
            if let v = a.targetVersion { try? context.journal.recordVersion(bundle: key.bundle, index: key.index, version: v) }
            records.remove(bundle: key.bundle, index: key.index)
            lock.withLock { s in _ = s.active.removeValue(forKey: key) }
            registry.setCondition(nil, bundle: key.bundle, index: key.index)
            let elapsed = Date().timeIntervalSince(a.started)
            log.notice("migration finished", ["bundle": key.bundle, "index": Self.indexName(key.index), "path": a.path.rawValue,
                "items": store.count, "format": store.formatVersion, "elapsed_s": String(format: "%.3f", elapsed),
                "swap_pause_ms": Int(pause * 1000)])
            context.events.emit("index.ready", ["bundle": .string(key.bundle), "index": .string(key.index), "after": "migration",
                "path": .string(a.path.rawValue), "items": .number(Double(store.count)), "formatVersion": .number(Double(store.formatVersion)),
                "elapsed": .number((elapsed * 1000).rounded() / 1000)])
        } catch {
            abandon(key, "cannot replace the index file: \(error.message)")
        }
    }

    /// The migration ends without a swap: the old file stays in service, status says why.
    private func abandon(_ key: IndexRegistry.Key, _ message: String) {
        registry.dropShadow(bundle: key.bundle, index: key.index)
        records.remove(bundle: key.bundle, index: key.index)
        lock.withLock { s in
            s.active[key] = nil
            s.failures[key] = message
        }
        registry.setCondition(nil, bundle: key.bundle, index: key.index)
        log.error("migration failed; the old index stays in service", ["bundle": key.bundle, "index": Self.indexName(key.index), "error": message])
        context.events.emit("index.migrationFailed", ["bundle": .string(key.bundle), "index": .string(key.index), "message": .string(message)])
    }

    /// Why the last migration of an index failed, until one succeeds.
    func failure(bundle: String, index: String) -> String? {
        lock.withLock { s in s.failures[IndexRegistry.Key(bundle: bundle, index: index)] }
    }

    /// The path of the migration in progress, if any.
    func activePath(bundle: String, index: String) -> Path? {
        lock.withLock { s in s.active[IndexRegistry.Key(bundle: bundle, index: index)]?.path }
    }

    /// Waits until the queued migration work has run (tests and shutdown).
    func drain() { queue.sync {} }
}
