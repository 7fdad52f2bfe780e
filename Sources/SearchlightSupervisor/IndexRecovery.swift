import Foundation
import SearchlightStore
import SearchlightWire

/// Corruption recovery (DESIGN §6 Triggers). Damage is found on open (the registry asks this to
/// set the file aside, then serves a fresh one at once), at run time (a call met SQLITE_CORRUPT or
/// SQLITE_NOTADB), by `check`, or by the idle scrub (`IndexStore.markDamaged`). Then:
/// - the tables are whole and only the full-text index is damaged: it is rebuilt in place from
///   the items, nothing is set aside;
/// - else the file (with its -wal/-shm) goes to the quarantine and a fresh index replaces it,
///   refilled by a background reindex-all (reason "corruption") when an extension serves the
///   bundle, else by salvaging the rows that can still be read from the quarantined file.
/// While the index is refilled it is `recovering` in status and queries answer `incomplete: true`;
/// the reindex-all's acknowledgement makes it ready. Each step logs one line with its numbers and
/// sends `index.recovering` / `index.ready` (or `index.recoveryFailed`) to monitors.
final class IndexRecovery: IndexDamageHandler, @unchecked Sendable {
    // @unchecked: `active`, `diagnosing`, `rounds`, `last` and `quarantineTimes` are guarded by `lock`, an NSCondition callers wait on for a recovery to end.
    /// How a damaged index was brought back.
    enum Method: String, Sendable {
        case fullTextRebuild, reindexAll, salvage
    }

    /// A recovery in progress (or its last outcome, kept for status).
    struct Record: Sendable {
        var method: Method
        var reason: String
        var started: Date
        var quarantined: String?
        var requestID: Int64?
        var label: String?
        var finished: Date?
        var outcome: String?
    }

    /// More quarantines than this of one index within `repeatWindow` stop automatic recovery:
    /// fresh files that keep breaking point at the disk, and looping would hide it.
    static let maximumRepeats = 3
    static let repeatWindow: TimeInterval = 3600

    weak var context: ServiceContext?
    let quarantine: Quarantine
    /// Recoveries whose refill is not done, durable (`supervisor.sqlite`): resumed at start.
    let records: RecoveryRecords
    let log: Logger
    /// Test seam (`--test-pause-salvage-after`): a salvage stops for good after this many rows.
    let pauseSalvageAfter: Int?
    private let queue = DispatchQueue(label: "index-recovery")
    /// Salvages run here, so that a long one never holds up the diagnosis of another index.
    let salvageQueue = BackgroundQueue(label: "index-salvage")  // a copy no query waits for: background priority
    let lock = NSCondition()
    var active: [IndexRegistry.Key: Record] = [:]
    /// A recovery's reindex-all that ended before its record was set (the supervisor thread can
    /// send it and take the extension's answer while `refill` is still between the enqueue and
    /// the record): its outcome, taken up by `refill` (one per index at most).
    private var endedEarly: [IndexRegistry.Key: (id: Int64, outcome: RequestScheduler.Outcome)] = [:]
    /// Keys whose damage is being diagnosed (the damaged file still served).
    private var diagnosing: Set<IndexRegistry.Key> = []
    /// Diagnoses finished per key: a waiter that sees it change knows the outcome is in.
    private var rounds: [IndexRegistry.Key: Int] = [:]
    private var last: [IndexRegistry.Key: Record] = [:]
    private var quarantineTimes: [IndexRegistry.Key: [Date]] = [:]

    init(quarantine: Quarantine, records: RecoveryRecords, log: Logger, pauseSalvageAfter: Int? = nil) {
        self.quarantine = quarantine
        self.records = records
        self.log = log
        self.pauseSalvageAfter = pauseSalvageAfter
    }

    static func name(_ index: String) -> String { index.isEmpty ? "_default" : index }

    // MARK: - IndexDamageHandler

    /// Journals the recovery, then moves the file into the quarantine (under a short hashed
    /// name, its bundle and index in the sidecar). A kill after the journal entry finds it at the
    /// next start: the move is finished and the refill done then.
    func setAside(path: String, bundle: String, index: String, reason: String) throws(SearchlightError) -> String {
        let key = IndexRegistry.Key(bundle: bundle, index: index)
        let name = quarantine.newName(bundle: bundle, index: index)
        let method: Method = extensionRefills(key) ? .reindexAll : .salvage
        do {
            try records.save(RecoveryRecord(quarantined: name, bundle: bundle, index: index, method: method.rawValue, reason: reason, started: Date()))
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot record the recovery of \(bundle) in supervisor.sqlite (\(error)); the damaged file stays in place: check the state directory's free space")
        }
        do {
            try quarantine.setAside(path: path, as: name, bundle: bundle, index: index, reason: reason)
        } catch {
            // Nothing moved: nothing to resume. A piece moved: the next start finishes the move.
            if !Quarantine.suffixes.contains(where: { FileManager.default.fileExists(atPath: quarantine.directory + "/" + name + $0) }) {
                records.remove(quarantined: name)
            }
            throw error
        }
        lock.withLock { quarantineTimes[key, default: []].append(Date()) }
        log.notice("damaged index set aside", ["bundle": bundle, "index": Self.name(index), "quarantined": name, "method": method.rawValue])
        return name
    }

    /// Whether an index extension refills this index (else its rows are salvaged).
    func extensionRefills(_ key: IndexRegistry.Key) -> Bool {
        guard let context, context.scheduler != nil, let unit = context.catalog.unit(forBundle: key.bundle) else { return false }
        return unit.indexExtension.indexNames.contains(key.index)
    }

    func damageFound(_ damage: IndexDamage) {
        let key = IndexRegistry.Key(bundle: damage.bundle, index: damage.index)
        if let aside = damage.setAside {
            // Found on open: the fresh file already answers; only the refill is left. Started
            // before the caller that opened it gets its answer, which then says `incomplete`.
            refill(key, reason: "damaged on open: \(damage.reason)", quarantined: aside, store: damage.store, started: Date())
            return
        }
        let first: Bool = lock.withLock {
            guard active[key] == nil else { return false }
            active[key] = Record(method: .fullTextRebuild, reason: damage.reason, started: Date())
            diagnosing.insert(key)
            return true
        }
        guard first else { return }
        log.error("index damage detected", ["bundle": damage.bundle, "index": Self.name(damage.index), "reason": damage.reason])
        queue.async { self.recover(key, store: damage.store, reason: damage.reason) }
    }

    // MARK: - Recovery

    /// Damage met at run time: rebuild the full-text index if that is all, else quarantine and refill.
    private func recover(_ key: IndexRegistry.Key, store: IndexStore, reason: String) {
        defer {
            lock.withLock {
                diagnosing.remove(key)
                rounds[key, default: 0] += 1
                lock.broadcast()
            }
        }
        guard let context else { return }
        let started = Date()
        context.registry.setCondition(IndexCondition(.recovering, reason: "checking: \(reason)", since: started), bundle: key.bundle, index: key.index)
        // quick_check first: when the tables are damaged the file goes at once, without the
        // full-text integrity-check (seconds on a large index) while calls keep failing on it.
        var tableProblems: [String]
        do {
            tableProblems = try store.read { db in try db.rows("PRAGMA quick_check(20)").compactMap { $0.string(0) } }
        } catch {
            tableProblems = [error.message]
        }
        var report: CheckReport?
        if tableProblems == ["ok"] {
            tableProblems = []
            report = try? store.check(repair: true)
        }
        if let report, report.ok {
            lock.withLock { active[key] = nil }
            context.registry.setCondition(nil, bundle: key.bundle, index: key.index)
            if report.repaired.isEmpty {
                log.warning("index damage not confirmed; index kept", ["bundle": key.bundle, "index": Self.name(key.index), "reason": reason,
                    "check": "quick_check and full-text integrity-check passed"])
                return
            }
            let elapsed = Date().timeIntervalSince(started)
            emit("index.recovering", key, ["reason": .string(reason), "method": .string(Method.fullTextRebuild.rawValue)])
            log.notice("full-text index rebuilt", ["bundle": key.bundle, "index": Self.name(key.index), "items": store.count,
                "elapsed_s": String(format: "%.3f", elapsed)])
            finish(key, Record(method: .fullTextRebuild, reason: reason, started: started), outcome: "rebuilt the full-text index from the items",
                items: store.count)
            return
        }
        let found = (tableProblems.isEmpty ? report?.problems : tableProblems.map { "quick_check: \($0)" })?.joined(separator: "; ") ?? reason
        do {
            _ = try quarantineAndRefill(key, reason: found, started: started)
        } catch {
            lock.withLock { active[key] = nil }
            context.registry.setCondition(nil, bundle: key.bundle, index: key.index)
            log.error("index recovery failed", ["bundle": key.bundle, "index": Self.name(key.index), "error": error.message])
            emit("index.recoveryFailed", key, ["message": .string(error.message)])
        }
    }

    /// Sets the index file aside and serves a fresh one, then starts its refill. Returns what was
    /// started. `force` (a trigger by hand) skips the limit on repeated recoveries.
    @discardableResult
    func quarantineAndRefill(_ key: IndexRegistry.Key, reason: String, force: Bool = false, started: Date = Date()) throws(SearchlightError) -> Record {
        guard let context else { throw SearchlightError(.internalError, "the daemon is stopping") }
        let recent: Int = lock.withLock {
            let window = Date().addingTimeInterval(-Self.repeatWindow)
            quarantineTimes[key] = (quarantineTimes[key] ?? []).filter { $0 > window }
            return quarantineTimes[key]?.count ?? 0
        }
        if !force, recent >= Self.maximumRepeats {
            throw SearchlightError(.indexUnavailable, "\(key.bundle) was set aside \(recent) times within an hour; automatic recovery stopped (check the disk, then `searchlight erase \(key.bundle) --reindex`)")
        }
        var aside = ""
        let fresh = try context.registry.replace(bundle: key.bundle, index: key.index) { (path) throws(SearchlightError) in
            aside = try setAside(path: path, bundle: key.bundle, index: key.index, reason: reason)
        }
        lock.withLock { lock.broadcast() }  // callers waiting on the damaged store retry on the fresh one
        return refill(key, reason: reason, quarantined: aside, store: fresh, started: started)
    }

    /// Refills a fresh index: reindex-all by its extension, else salvage from the quarantined file.
    @discardableResult
    private func refill(_ key: IndexRegistry.Key, reason: String, quarantined: String, store: IndexStore, started: Date) -> Record {
        guard let context else { return Record(method: .salvage, reason: reason, started: started) }
        let unit = context.catalog.unit(forBundle: key.bundle)
        if let unit, unit.indexExtension.indexNames.contains(key.index), let scheduler = context.scheduler {
            do {
                let id = try scheduler.enqueue(bundle: key.bundle, index: key.index, kind: .all, identifiers: [], reason: "corruption", background: true).id
                // The journal carries the refill from here (resumed at start like any request).
                records.remove(quarantined: quarantined)
                let record = Record(method: .reindexAll, reason: reason, started: started, quarantined: quarantined, requestID: id, label: unit.label)
                let early = lock.withLock { () -> RequestScheduler.Outcome? in
                    active[key] = record
                    guard let ended = endedEarly.removeValue(forKey: key), ended.id >= id else { return nil }
                    return ended.outcome
                }
                context.registry.setCondition(IndexCondition(.recovering,
                    reason: "corruption (\(reason)); damaged file kept as quarantine/\(quarantined); refilled by \(unit.label)", since: started, requestID: id),
                    bundle: key.bundle, index: key.index)
                log.notice("index recovery started", ["bundle": key.bundle, "index": Self.name(key.index), "method": Method.reindexAll.rawValue,
                    "request": id, "label": unit.label, "quarantined": quarantined])
                emit("index.recovering", key, ["reason": .string(reason), "method": .string(Method.reindexAll.rawValue),
                    "quarantined": .string(quarantined), "requestId": .number(Double(id)), "label": .string(unit.label)])
                if let early { finished(key, record, id: id, early) }
                return record
            } catch {
                log.error("cannot journal the recovery's reindex-all; salvaging instead", ["bundle": key.bundle, "error": "\(error)"])
            }
        }
        let record = Record(method: .salvage, reason: reason, started: started, quarantined: quarantined)
        // Journaled as a salvage (it may have been journaled for an extension that is gone, or
        // whose request could not be journaled): a restart resumes it.
        try? records.save(RecoveryRecord(quarantined: quarantined, bundle: key.bundle, index: key.index, method: Method.salvage.rawValue,
            reason: reason, started: started))
        lock.withLock { active[key] = record }
        context.registry.setCondition(IndexCondition(.recovering,
            reason: "corruption (\(reason)); no index extension serves it: salvaging the readable rows of quarantine/\(quarantined)", since: started),
            bundle: key.bundle, index: key.index)
        log.notice("index recovery started", ["bundle": key.bundle, "index": Self.name(key.index), "method": Method.salvage.rawValue, "quarantined": quarantined])
        emit("index.recovering", key, ["reason": .string(reason), "method": .string(Method.salvage.rawValue), "quarantined": .string(quarantined)])
        salvageQueue.async { self.salvage(key, into: store, record: record) }
        return record
    }

    /// Copies the readable rows of the quarantined file into the fresh index. Its journal record
    /// goes only once they are all in (then the file may rotate away); a failure keeps it, so the
    /// next start tries again, and the index stays `recovering` meanwhile.
    func salvage(_ key: IndexRegistry.Key, into store: IndexStore, record: Record) {
        let name = record.quarantined ?? ""
        let source = quarantine.directory + "/" + name
        do {
            let report = try store.salvage(from: source) { [self] copied in pauseForTests(key, copied: copied) }
            records.remove(quarantined: name)
            quarantine.prune()
            let elapsed = Date().timeIntervalSince(record.started)
            log.notice("index salvaged", ["bundle": key.bundle, "index": Self.name(key.index), "copied": report.copied,
                "unreadable_rows": report.unreadableRows, "elapsed_s": String(format: "%.3f", elapsed), "quarantined": name,
                "problems": report.problems.isEmpty ? "none" : report.problems.joined(separator: "; ")])
            // Another salvage of the same index still waits (two quarantines before a restart): it finishes it.
            guard !records.all().contains(where: { $0.bundle == key.bundle && $0.index == key.index }) else { return }
            var outcome = "salvaged \(report.copied) items from quarantine/\(name)"
            if report.unreadableRows > 0 { outcome += "; \(report.unreadableRows) unreadable rows are lost" }
            if !report.problems.isEmpty, report.copied == 0 { outcome += " (\(report.problems[0]))" }
            outcome += "; the client state was not kept, so the app donates again"
            finish(key, record, outcome: outcome, items: store.count)
        } catch {
            log.error("index salvage failed", ["bundle": key.bundle, "index": Self.name(key.index), "quarantined": name, "error": error.message])
            context?.registry.setCondition(IndexCondition(.recovering,
                reason: "corruption: the salvage from quarantine/\(name) failed (\(error.message)); the file is kept and the salvage runs again at the next start of searchlightd",
                since: record.started), bundle: key.bundle, index: key.index)
            emit("index.recoveryFailed", key, ["message": .string(error.message), "quarantined": .string(name)])
        }
    }

    /// The `--test-pause-salvage-after` seam: past that many rows the salvage logs a line and
    /// stops for good, so that a test can kill the daemon in the middle of it.
    private func pauseForTests(_ key: IndexRegistry.Key, copied: Int) {
        guard let limit = pauseSalvageAfter, copied >= limit else { return }
        log.notice("salvage paused (test seam)", ["bundle": key.bundle, "index": Self.name(key.index), "copied": copied])
        while true { sleep(3600) }
    }

    /// The recovery is over: the index is ready again.
    func finish(_ key: IndexRegistry.Key, _ record: Record, outcome: String, items: Int) {
        var done = record
        done.finished = Date()
        done.outcome = outcome
        lock.withLock {
            active[key] = nil
            last[key] = done
        }
        context?.registry.setCondition(nil, bundle: key.bundle, index: key.index)
        let elapsed = done.finished!.timeIntervalSince(record.started)
        log.notice("index recovered", ["bundle": key.bundle, "index": Self.name(key.index), "method": record.method.rawValue, "items": items,
            "elapsed_s": String(format: "%.3f", elapsed)])
        emit("index.ready", key, ["method": .string(record.method.rawValue), "items": .number(Double(items)),
            "elapsed": .number((elapsed * 1000).rounded() / 1000), "outcome": .string(outcome)])
    }

    // MARK: - Requests

    /// A request left the journal: the recovery's reindex-all (or a later one of that index)
    /// acknowledged makes the index ready; failed for good, the index stays recovering and says why.
    func requestFinished(_ request: ReindexRequest, _ outcome: RequestScheduler.Outcome) {
        guard request.kind == .all else { return }
        let key = IndexRegistry.Key(bundle: request.bundle, index: request.index)
        let record = lock.withLock { () -> Record? in
            guard let record = active[key] else {
                if request.reason == "corruption" { endedEarly[key] = (request.id, outcome) }
                return nil
            }
            return record
        }
        guard let record, let id = record.requestID, request.id >= id else { return }
        finished(key, record, id: id, outcome)
    }

    /// The recovery's reindex-all (or a later one) ended.
    private func finished(_ key: IndexRegistry.Key, _ record: Record, id: Int64, _ outcome: RequestScheduler.Outcome) {
        switch outcome {
        case .acknowledged:
            let items = (try? context?.registry.withStore(bundle: key.bundle, index: key.index, create: false) { $0?.count })?.flatMap { $0 } ?? 0
            finish(key, record, outcome: "refilled by \(record.label ?? "its extension")'s reindex-all", items: items)
        case .failed(let message):
            let label = record.label ?? key.bundle
            context?.registry.setCondition(IndexCondition(.recovering,
                reason: "corruption: the refill failed (\(message)); the index holds only what was donated since; ask again with `searchlight reindex \(label) --all`",
                since: record.started, requestID: id), bundle: key.bundle, index: key.index)
            log.error("index refill failed", ["bundle": key.bundle, "index": Self.name(key.index), "request": id, "error": message])
            emit("index.recoveryFailed", key, ["requestId": .number(Double(id)), "message": .string(message)])
        }
    }

    /// For a call that failed on `damaged`, a store with damage detected: waits (up to `timeout`)
    /// until the recovery replaced it or repaired it, and says whether a retry may succeed, so the
    /// caller is answered by the fresh file instead of with the error. False when the recovery
    /// left it as it was (damage not confirmed is repaired-as-is; a refused recovery is not).
    func awaitRecovery(of damaged: IndexStore, bundle: String, index: String, timeout: TimeInterval = 10) -> Bool {
        guard let registry = context?.registry else { return false }
        let key = IndexRegistry.Key(bundle: bundle, index: index)
        let deadline = Date().addingTimeInterval(timeout)
        let round = lock.withLock { rounds[key, default: 0] }
        while Date() < deadline {
            // The registry is asked without this lock held: it calls `setAside` under its own.
            if registry.servedStore(bundle: bundle, index: index) !== damaged || damaged.detectedDamage == nil { return true }
            let over: Bool = lock.withLock {
                if rounds[key, default: 0] != round, !diagnosing.contains(key), active[key] == nil { return true }
                _ = lock.wait(until: min(deadline, Date().addingTimeInterval(0.1)))
                return false
            }
            if over { return registry.servedStore(bundle: bundle, index: index) !== damaged || damaged.detectedDamage == nil }
        }
        return false
    }

    /// `admin.status`' `lastRecovery` of an index, if it was recovered since the daemon started.
    func lastRecovery(bundle: String, index: String) -> JSONValue? {
        guard let r = lock.withLock({ last[IndexRegistry.Key(bundle: bundle, index: index)] }) else { return nil }
        var o: [String: JSONValue] = ["method": .string(r.method.rawValue), "reason": .string(r.reason), "started": .string(ISO8601.format(r.started))]
        if let f = r.finished { o["finished"] = .string(ISO8601.format(f)) }
        if let q = r.quarantined { o["quarantined"] = .string(q) }
        if let outcome = r.outcome { o["outcome"] = .string(outcome) }
        return .object(o)
    }

    func emit(_ event: String, _ key: IndexRegistry.Key, _ fields: [String: JSONValue]) {
        var f = fields
        f["bundle"] = .string(key.bundle)
        f["index"] = .string(key.index)
        context?.events.emit(event, f)
    }
}
