import Foundation
import Synchronization
import SearchlightSemantic
import SearchlightStore
import SearchlightUnits
import SearchlightWire

/// Idle maintenance (DESIGN §6 *Idle*): at most every `--maintenance-interval`, once the machine
/// has been idle for `--idle-after`, for every index: purge expired items, ask extensions with
/// `RefreshExpiringItems` to reindex items expiring within a day, scrub a bounded slice, optimize
/// the full-text index, refine the semantic vectors with the transformer, checkpoint the WAL.
///
/// The scheduler's thread asks `poll` at each pass; the load is sampled only while maintenance is
/// due and waiting for idleness or running (once per interval), never while nothing is due. A
/// run is background work: it gives way, between steps, as soon as the throttle leaves normal.
final class Maintenance: Sendable {
    /// Items whose checksum is verified per index and run, and slots of the scrub's rotation
    /// (FTS5 integrity-check, then one table each) gone through per run: with the 11 tables of
    /// format 5, each index is checked whole every 6 runs (a day and a half at the default interval).
    static let scrubRows = 5000
    static let scrubTables = 2
    /// Identifiers requested per index and run for items expiring within a day.
    static let refreshLimit = 10_000
    static let refreshWindow: TimeInterval = 86400
    /// Times refinement goes on with an index reopened after it was closed under it, per run.
    static let refineReopens = 4

    enum Poll {
        /// Nothing to do until this time.
        case sleep(until: Date)
        /// Due and waiting for idleness: keep sampling the load.
        case watching
        /// A run is in progress.
        case running
        /// Start a run now.
        case start
    }

    /// Unowned: the context holds the maintenance, and outlives it.
    unowned let context: ServiceContext
    private let record: MaintenanceRecord

    /// At the daemon's stop (`ServiceContext.closeSupervisorDatabase`).
    func closeRecord() { record.close() }
    /// When runs are due, whether the idle trigger's run is in progress, and runs by hand.
    private struct State {
        var schedule: MaintenanceSchedule
        var running = false
        /// Runs by hand (`admin.simulate idle`) in progress: the idle trigger waits for them.
        var byHand = 0
    }
    private let state: Mutex<State>
    /// One run at a time: the idle trigger and `admin.simulate idle` take turns.
    private let runLock = Mutex(())
    /// Runs by hand, one after the other, on a thread of their own at background priority (as the
    /// idle trigger's): never on the client's connection thread, which answers its later calls.
    private let byHandQueue = BackgroundQueue(label: "maintenance")
    /// Set at the daemon's stop: every run, by hand or idle, gives way at its next step.
    private let stopping = Atomic<Bool>(false)

    /// How far a run has got, for a client waiting on it (`admin.simulate idle`): an index begun
    /// (`completed`/`total` nil), or a refinement batch committed on it.
    struct Progress: Sendable {
        var bundle: String
        var index: String
        /// The index's place in the run, from 1, and the run's index count.
        var position: Int
        var count: Int
        /// Vectors refined on this index so far in this run, out of those unrefined at its start.
        var completed: Int?
        var total: Int?
    }
    typealias ProgressSink = @Sendable (Progress) -> Void

    init(context: ServiceContext, now: Date = Date()) throws {
        self.context = context
        record = try MaintenanceRecord(path: context.config.stateDirectory + "/supervisor.sqlite")
        state = Mutex(State(schedule: MaintenanceSchedule(interval: context.config.maintenanceInterval,
            idleAfter: context.config.idleAfter, lastRun: record.lastRun(orRecord: now))))
    }

    var log: Logger { context.log }

    /// Whether the load must be sampled for maintenance now (due and not yet run, or running).
    func wantsSampling(at now: Date) -> Bool {
        state.withLock { $0.running || $0.schedule.isDue(at: now) }
    }

    /// The scheduler's question at each pass, with the throttle as it now is, and why the power
    /// defers background work (`PowerGate`; nil: it does not). While it defers, idleness is
    /// watched afresh: the load is not sampled meanwhile, so the quiet time before proves nothing.
    func poll(at now: Date, throttle: Throttle, deferral: String? = nil) -> Poll {
        state.withLock { s in
            if s.running { return .running }
            if s.byHand > 0 { return .watching }
            if deferral != nil, s.schedule.isDue(at: now) {
                s.schedule.yielded()
                return .watching
            }
            guard s.schedule.shouldStart(at: now, throttle: throttle) else {
                return s.schedule.isDue(at: now) ? .watching : .sleep(until: s.schedule.nextDue)
            }
            s.running = true
            return .start
        }
    }

    /// The idle trigger: runs on a thread of its own (the store calls block), giving way when
    /// `yieldNow` says so; `done` runs after.
    func startIdleRun(yieldNow: @escaping @Sendable () -> Bool, done: @escaping @Sendable () -> Void) {
        let thread = Thread { [self] in
            BackgroundPriority.lowerCurrentThread(name: "maintenance")  // queries win the CPU over it
            let summary = run(bundle: nil, trigger: "idle", yieldNow: yieldNow)
            state.withLock { s in
                s.running = false
                if summary.yielded { s.schedule.yielded() } else { s.schedule.ran(at: Date()) }
            }
            done()
        }
        thread.name = "maintenance"
        thread.start()
    }

    /// A run by hand (`admin.simulate idle`): now, whatever the load, on the by-hand queue's
    /// background thread (after a run in progress, if any). Over every bundle, it counts as the
    /// periodic run (the next is due an interval later). `done` gets its summary. Answers whether
    /// it waits for another run first.
    @discardableResult
    func startByHand(bundle: String?, progress: ProgressSink? = nil, done: @escaping @Sendable (MaintenanceSummary) -> Void) -> Bool {
        let queued = state.withLock { s in
            defer { s.byHand += 1 }
            return s.running || s.byHand > 0
        }
        byHandQueue.async { [self] in
            let summary = run(bundle: bundle, trigger: "simulate", progress: progress)
            state.withLock { s in
                s.byHand -= 1
                if bundle == nil, !summary.yielded { s.schedule.ran(at: Date()) }
            }
            done(summary)
        }
        return queued
    }

    /// `admin.status`'s `maintenance` object.
    var statusJSON: JSONValue {
        let (s, isRunning) = state.withLock { ($0.schedule, $0.running || $0.byHand > 0) }
        var o: [String: JSONValue] = [
            "running": .bool(isRunning), "lastRun": .string(ISO8601.format(s.lastRun)),
            "nextDue": .string(ISO8601.format(s.nextDue)), "nextEligible": .string(ISO8601.format(s.nextEligible)),
            "intervalSeconds": .number(s.interval), "idleAfterSeconds": .number(s.idleAfter),
        ]
        if let summary = record.lastSummary { o["lastSummary"] = summary }
        return .object(o)
    }

    /// One run over every index (or one bundle's). Records the run when it covered everything
    /// and went to its end. Waits for a run already in progress.
    func run(bundle only: String?, trigger: String, yieldNow: @Sendable () -> Bool = { false },
             progress: ProgressSink? = nil) -> MaintenanceSummary {
        runLock.withLock { _ in
            runAlone(bundle: only, trigger: trigger, yieldNow: { self.stopping.load(ordering: .relaxed) || yieldNow() }, progress: progress)
        }
    }

    /// At the daemon's stop, first: every run (idle or by hand) gives way at its next step, and
    /// says it gave way to the stop.
    func beginStop() { stopping.store(true, ordering: .relaxed) }

    /// Before the indexes close: waits until no run is in progress (a transformer batch under
    /// way ends first), up to `deadline`. A run by hand would otherwise go on over closing
    /// indexes. Answers whether every run ended in time.
    func waitForRuns(until deadline: Date) -> Bool {
        beginStop()
        while state.withLock({ $0.running || $0.byHand > 0 }) {
            if Date() >= deadline { return false }
            usleep(10_000)  // the stop's one wait; a batch lasts far longer than this poll
        }
        return true
    }

    private func runAlone(bundle only: String?, trigger: String, yieldNow: @Sendable () -> Bool, progress: ProgressSink?) -> MaintenanceSummary {
        var summary = MaintenanceSummary(trigger: trigger, started: Date())
        log.info("maintenance started", ["trigger": trigger, "bundle": only ?? "*"])
        context.events.emit("maintenance.started", ["trigger": .string(trigger), "bundle": only.map(JSONValue.string) ?? .null])
        let targets = context.registry.bundles().filter { only == nil || only == $0 }
            .flatMap { bundle in context.registry.indexes(of: bundle).map { (bundle, $0) } }
        for (position, (bundle, index)) in targets.enumerated() {
            if yieldNow() {
                summary.yielded = true
                break
            }
            let place = Progress(bundle: bundle, index: index, position: position + 1, count: targets.count)
            progress?(place)
            maintain(bundle: bundle, index: index, into: &summary, yieldNow: yieldNow, progress: progress.map { sink in
                { completed, total in
                    var p = place
                    (p.completed, p.total) = (completed, total)
                    sink(p)
                }
            })
        }
        summary.elapsed = Date().timeIntervalSince(summary.started)
        let json = summary.json
        if only == nil, !summary.yielded {
            do {
                try record.recordRun(at: Date(), summary: json)
            } catch {
                log.error("cannot record the maintenance run", ["error": "\(error)"])
            }
        }
        let end = !summary.yielded ? "maintenance finished"
            : stopping.load(ordering: .relaxed) ? "maintenance gave way to the stop" : "maintenance yielded to load"
        log.notice(end, [
            "trigger": trigger, "indexes": summary.indexes, "purged": summary.purged, "refresh_requested": summary.refreshRequested,
            "rows_scrubbed": summary.rowsScrubbed, "scrub_ms": String(format: "%.1f", summary.scrubMilliseconds),
            "checksum_failures": summary.checksumFailures, "fts_rebuilt": summary.ftsRebuilt, "damaged": summary.damaged,
            "refined": summary.refined,
            "elapsed_ms": Int(summary.elapsed * 1000),
        ])
        context.events.emit("maintenance.finished", summary.fields)
        return summary
    }

    /// Every step on one index; a failing step is reported and the next index is done.
    private func maintain(bundle: String, index: String, into summary: inout MaintenanceSummary, yieldNow: @Sendable () -> Bool,
                          progress: ((_ refined: Int, _ total: Int) -> Void)?) {
        let name = index.isEmpty ? "_default" : index
        // Another trigger is rebuilding it: its file is not the one to scrub.
        if context.registry.condition(bundle: bundle, index: index) != nil { return }
        // Leased for every step: the open-index bound does not close it under the scrub.
        let lease = IndexLeases(context.registry)
        defer { lease.release() }
        do {
            guard let store = try context.registry.store(bundle: bundle, index: index, create: false, lease: lease) else { return }
            if store.detectedDamage != nil { return }  // recovery's business
            summary.indexes += 1
            let purged = try store.purgeExpired()
            summary.purged += purged
            if purged > 0 { log.info("expired items purged", ["bundle": bundle, "index": name, "items": purged]) }
            summary.refreshRequested += try requestRefresh(store, bundle: bundle, index: index)
            if yieldNow() { summary.yielded = true; return }
            guard try scrub(store, bundle: bundle, index: index, into: &summary) else { return }
            if yieldNow() { summary.yielded = true; return }
            try store.optimizeFullText()
            summary.optimized += 1
            // Refinement commits per batch; when the store is closed under it (the open-index
            // bound, a replace), it goes on with the store reopened, a few times at most, and
            // stops for good at the daemon's stop.
            var current = store
            // For a waiting client: vectors refined here out of those unrefined now.
            let unrefined = progress == nil ? 0 : (try? store.vectorCounts()).map { $0.vectors - $0.refined } ?? 0
            var refinedHere = 0
            for attempt in 0..<Self.refineReopens {
                let before = refinedHere
                let n = try refine(current, bundle: bundle, index: name, yieldNow: yieldNow) { total in
                    progress?(before + total, max(unrefined, before + total))
                }
                refinedHere += n
                summary.refined += n
                guard current.isClosed, !context.registry.isClosedForStop, !yieldNow(), attempt + 1 < Self.refineReopens,
                      let reopened = try context.registry.store(bundle: bundle, index: index, create: false, lease: lease)
                else { break }
                log.notice("index closed under refinement; resuming on the reopened store", ["bundle": bundle, "index": name,
                    "refined": summary.refined])
                current = reopened
            }
            if current.isClosed { return }
            if yieldNow() { summary.yielded = true; return }
            if try current.checkpoint() { summary.checkpointed += 1 }
        } catch {
            summary.problems.append("\(bundle)/\(name): \(error.message)")
            log.warning("maintenance step failed", ["bundle": bundle, "index": name, "error": error.message])
        }
    }

    /// Semantic refinement (Docs/SemanticSearch.md, "Refinement"): the transformer replaces the
    /// index's static vectors, batch by batch, until all are refined or the load says to give way
    /// (checked before each batch); the next idle run resumes. Loads the transformer when its
    /// files are there (it is unloaded after `--model-idle` once refinement and queries leave it
    /// alone).
    ///
    /// Its log line says how it ended: `yielded=true` with `last_batch_sample`, the throttle's
    /// sample count (`ThrottleController.sampleCount`) when the last batch began. It is read
    /// before the throttle's state, so a batch begun after the sample that saw pressure (the
    /// `sample` of `load throttle changed`) would show a count at least that sample's: a count
    /// below it proves that the batch in flight when pressure was sampled was the last.
    private func refine(_ store: IndexStore, bundle: String, index: String, yieldNow: @Sendable () -> Bool,
                        committed: (Int) -> Void) throws(SearchlightError) -> Int {
        guard store.hasVectors else { return 0 }
        // Nothing left to refine: the transformer is not loaded for it (nor kept loaded: with a
        // short --maintenance-interval every run touched it, and --model-idle never unloaded it).
        let counts = try store.vectorCounts()
        if counts.refined >= counts.vectors { return 0 }
        // The low-priority share is refining it: left to it (and the other way round).
        let indexName = index == "_default" ? "" : index
        if let share = context.refinementShare {
            guard share.claim(bundle: bundle, index: indexName) else {
                log.info("vectors left to the refinement share", ["bundle": bundle, "index": index])
                return 0
            }
        }
        defer { context.refinementShare?.release(bundle: bundle, index: indexName) }
        guard let encoder = context.semantic.transformerForRefinement() else { return 0 }
        let throttle = context.scheduler?.throttle
        let started = Date()
        var lastBatchSample = -1, yielded = false, failed = false
        let n = try store.refineVectors(embed: { texts in
            context.semantic.touch()
            // On the idle run's background thread, one thread: a split would run on pool threads at the normal priority.
            let threads = BackgroundPriority.isCurrentThreadBackground ? 1 : SemanticEngine.refinementThreads
            do throws(SemanticError) {
                return try encoder.embedding(texts, threads: threads, meter: context.semantic.refinementWork)
            } catch {
                // The model file changed after loading: nothing is refined with it.
                context.semantic.transformerFailed(encoder, error)
                failed = true
                return []
            }
        }, yieldNow: {
            if failed { return true }
            let sample = throttle?.sampleCount ?? -1
            if yieldNow() {
                yielded = true
                return true
            }
            lastBatchSample = sample
            return false
        }, committed: { total in
            log.debug("refinement batch committed", ["bundle": bundle, "index": index, "refined": total])
            context.events.emit("maintenance.progress", ["bundle": .string(bundle), "index": .string(index), "refined": .number(Double(total))])
            committed(total)
        })
        if n > 0 || yielded {
            let elapsed = Date().timeIntervalSince(started)
            log.info("vectors refined", ["bundle": bundle, "index": index, "items": n, "elapsed_s": String(format: "%.1f", elapsed),
                "items_per_s": String(format: "%.1f", Double(n) / max(elapsed, 0.001)), "yielded": yielded,
                "last_batch_sample": lastBatchSample, "stopped_at_sample": throttle?.sampleCount ?? -1])
        }
        return n
    }

    /// The unit serving this index, if it is enabled and the bundle's indexing is on.
    private func servingUnit(bundle: String, index: String) -> ExtensionUnit? {
        guard let unit = context.catalog.unit(forBundle: bundle), !unit.disabled,
              unit.indexExtension.indexNames.contains(index),
              context.state.bundle(bundle)?.indexingEnabled != false else { return nil }
        return unit
    }

    private func requestRefresh(_ store: IndexStore, bundle: String, index: String) throws(SearchlightError) -> Int {
        guard let unit = servingUnit(bundle: bundle, index: index), unit.indexExtension.refreshExpiringItems,
              let scheduler = context.scheduler else { return 0 }
        let now = Date()
        let ids = try store.identifiersExpiring(from: now, to: now.addingTimeInterval(Self.refreshWindow), limit: Self.refreshLimit)
        if ids.isEmpty { return 0 }
        do {
            _ = try scheduler.enqueue(bundle: bundle, index: index, kind: .identifiers, identifiers: ids, reason: "idle", background: true)
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot journal the refresh of expiring items: \(error)")
        }
        return ids.count
    }

    /// The bounded scrub and its consequences; false when the file is damaged (nothing more to do on it).
    private func scrub(_ store: IndexStore, bundle: String, index: String, into summary: inout MaintenanceSummary) throws(SearchlightError) -> Bool {
        let name = index.isEmpty ? "_default" : index
        let started = Date()
        let report = try store.scrub(from: record.cursor(bundle: bundle, index: index), rows: Self.scrubRows, tables: Self.scrubTables)
        summary.scrubMilliseconds += Date().timeIntervalSince(started) * 1000
        summary.rowsScrubbed += report.rowsScrubbed
        summary.tablesChecked += report.tablesChecked.count
        if report.fullTextChecked { summary.fullTextChecked += 1 }
        do {
            try record.setCursor(report.cursor, bundle: bundle, index: index)
        } catch {
            log.warning("cannot record the scrub cursor", ["bundle": bundle, "index": name, "error": "\(error)"])
        }
        if !report.fileProblems.isEmpty {
            // markDamaged (done by the store) hands the file to recovery.
            summary.damaged += 1
            summary.problems.append("\(bundle)/\(name): \(report.fileProblems.joined(separator: "; "))")
            log.error("scrub found a damaged index file", ["bundle": bundle, "index": name, "problem": report.fileProblems.first ?? ""])
            return false
        }
        if !report.checksumFailures.isEmpty {
            summary.checksumFailures += report.checksumFailures.count
            _ = try store.applySync([.deleteIdentifiers(report.checksumFailures)])
            log.warning("scrub deleted items whose checksum failed", ["bundle": bundle, "index": name,
                "items": report.checksumFailures.count, "first": report.checksumFailures[0]])
            if servingUnit(bundle: bundle, index: index) != nil, let scheduler = context.scheduler {
                do {
                    _ = try scheduler.enqueue(bundle: bundle, index: index, kind: .identifiers, identifiers: report.checksumFailures,
                        reason: "corruption", background: true)
                    summary.corruptionRequested += report.checksumFailures.count
                } catch {
                    summary.problems.append("\(bundle)/\(name): cannot journal the reindex of damaged items: \(error)")
                }
            }
        }
        // After the deletions: deleting a damaged row can itself leave the full-text index off.
        var ftsProblem = report.fullTextProblem
        if !report.checksumFailures.isEmpty, ftsProblem == nil { ftsProblem = try store.fullTextCheck() }
        if let problem = ftsProblem {
            if let remaining = try store.rebuildFullText() {
                summary.problems.append("\(bundle)/\(name): full-text index still damaged after a rebuild: \(remaining)")
                log.error("full-text index rebuild did not help", ["bundle": bundle, "index": name, "problem": remaining])
            } else {
                summary.ftsRebuilt += 1
                log.warning("full-text index rebuilt from the items", ["bundle": bundle, "index": name, "problem": problem])
            }
        }
        return true
    }
}
