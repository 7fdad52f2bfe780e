import Foundation

/// The indexing loop of a started delegate: wakes on the `ChangeMonitor`'s signals, and each
/// time brings the index up to the database's history, one bounded range per batch.
///
/// The index's client state is the truth about what is indexed (DESIGN §10): the last history
/// token applied, in decimal ASCII. A range `(state, last]` is read on one snapshot and sent as
/// one batch with `expectedClientState = state`, `newClientState = last`: it commits with its
/// token or not at all, so a crash of this process, of the daemon or of the machine at any point
/// leaves either the old state (the range is read and sent again) or the new one (it is not). Two
/// processes on one store race for each range; the daemon's compare-and-swap lets one win, the
/// other gets `mismatchedClientState`, reads the state again and goes on from there.
///
/// The index is rebuilt from the rows (one batch: delete all, every row, the snapshot's last
/// token) when its state says nothing usable: no state (a new or erased index), a state that is
/// not a token, a token beyond the history (the database was replaced or its history dropped), or
/// a `rebuildNeeded` mark (the triggers were just installed or changed).
actor HistoryProcessor {
    private let delegate: SQLiteSpotlightDelegate
    private let index: SearchableIndex
    private let monitor: ChangeMonitor
    private let progress: IndexingProgress
    private let storeIdentifier: String
    /// History rows per batch: a bound on the daemon's memory for one batch and on the time the
    /// read transaction holds its snapshot.
    static let rangeLimit = 2_000
    /// Processed history rows left before they are pruned (pruning is a write to the app's
    /// database, so not after every range).
    static let pruneThreshold: Int64 = 256

    /// The index's client state as last seen or set here; nil = ask the daemon.
    private var clientState: Data??
    private var lastLook: Look?
    private var lastWarning: String?
    /// Failed attempts in a row: a warning is logged from the third (0.7 s of retries), so a
    /// daemon restart or a one-off busy database says nothing.
    private var failures = 0
    /// The next range, read while the previous one is being sent (a backlog is read and sent at
    /// once): the token it starts after, and the read.
    private var prefetch: (after: Int64, read: Task<ChangeSet?, any Error>)?

    init(delegate: SQLiteSpotlightDelegate, index: SearchableIndex, monitor: ChangeMonitor, progress: IndexingProgress,
         storeIdentifier: String) {
        self.delegate = delegate
        self.index = index
        self.monitor = monitor
        self.progress = progress
        self.storeIdentifier = storeIdentifier
    }

    /// Runs until cancelled (returns) or until the model no longer fits the schema (throws).
    func run() async throws {
        var delay = RetryDelay()
        var more = true
        var signals = monitor.signals.makeAsyncIterator()
        while !Task.isCancelled {
            if !more {
                guard await signals.next() != nil, !Task.isCancelled else { return }
            }
            do {
                more = try await step()
                delay.reset()
                if lastWarning != nil { DelegateLog.warning("history indexed again", ["store": storeIdentifier]) }
                lastWarning = nil
                failures = 0
            } catch let error as SearchlightError where error.code == .mismatchedClientState {
                DelegateLog.debug("history range taken by another writer; reading the index state again", ["store": storeIdentifier])
                clientState = nil
                prefetch = nil
                progress.forget()
                more = true
            } catch let error as SpotlightModelError {
                throw error
            } catch {
                if Task.isCancelled || error is CancellationError { return }
                let problem = Self.describe(error)
                progress.noteProblem(problem)
                failures += 1
                if failures >= 3, problem != lastWarning {
                    DelegateLog.warning("history not indexed yet; retrying", ["store": storeIdentifier, "error": problem])
                    lastWarning = problem
                }
                // Whether the batch committed before the failure is unknown: ask the index.
                clientState = nil
                lastLook = nil
                prefetch = nil
                do { try await Task.sleep(for: delay.next(after: error)) } catch { return }
                more = true
            }
        }
    }

    /// One look at the database, then at most one batch. True when there may be more to do now.
    private func step() async throws -> Bool {
        guard let look = try await lookAtDatabase() else { return true }
        let current: Data?
        if let known = clientState {
            current = known
        } else {
            current = try await index.fetchLastClientState()
            clientState = .some(current)
            if let token = BatchSender.token(current), token <= look.maxToken, look.rebuildGeneration == nil {
                progress.covered(through: token, storeIdentifier: storeIdentifier, publish: false)
            }
        }
        guard let token = BatchSender.token(current), token <= look.maxToken, look.rebuildGeneration == nil else {
            try await rebuild(expecting: current)
            return true
        }
        if token == look.maxToken {
            try await prune(through: token, look: look)
            return false
        }
        let clock = ContinuousClock()
        let started = clock.now
        guard let changes = try await readRange(after: token) else { return false }
        let read = clock.now
        if changes.historyRows == Self.rangeLimit { prefetch = (changes.through, readInBackground(after: changes.through)) }
        try await BatchSender.send(changes, to: index, expecting: current)
        clientState = .some(BatchSender.state(changes.through))
        progress.covered(through: changes.through, storeIdentifier: storeIdentifier, publish: true)
        DelegateLog.debug("history range indexed", ["store": storeIdentifier, "from": token, "through": changes.through,
            "rows": changes.historyRows, "items": changes.items.count, "deletes": changes.deletes.count,
            "readMs": Self.milliseconds(started, read), "sendMs": Self.milliseconds(read, clock.now)])
        try await prune(through: changes.through, look: look)
        return true
    }

    /// The range after `token`: the one read ahead if it starts there, else read now.
    private func readRange(after token: Int64) async throws -> ChangeSet? {
        if let ahead = prefetch {
            prefetch = nil
            if ahead.after == token { return try await ahead.read.value }
        }
        return try await readInBackground(after: token).value
    }

    private func readInBackground(after token: Int64) -> Task<ChangeSet?, any Error> {
        let delegate = self.delegate
        return Task(executorPreference: delegate.worker) { try await delegate.worker.perform { db in try delegate.reader.range(after: token, limit: Self.rangeLimit, db) } }
    }

    /// The database's history bounds, after a schema check when the schema changed (and a
    /// reinstall of the triggers when they went missing). nil: look again (something was
    /// installed meanwhile).
    private func lookAtDatabase() async throws -> Look? {
        let previous = lastLook
        let delegate = self.delegate
        let look = try await delegate.worker.perform { db in try Look.read(db, previous: previous) }
        if look == nil || look!.schemaVersion != previous?.schemaVersion {
            // First look, or the app changed its schema: check the model against it again (a
            // dropped modelled column ends indexing with an error naming it), and put back any
            // trigger that went with a dropped and re-created table.
            let installation = try await delegate.worker.perform { db in try HistorySchema.install(delegate.model, db) }
            if installation.changed || look == nil {
                DelegateLog.debug("history triggers installed", ["store": storeIdentifier])
                lastLook = nil
                return nil
            }
        }
        lastLook = look
        return look
    }

    private func rebuild(expecting current: Data?) async throws {
        let delegate = self.delegate
        let changes = try await delegate.worker.perform { db in try delegate.reader.everything(db) }
        try await BatchSender.send(changes, to: index, expecting: current)
        clientState = .some(BatchSender.state(changes.through))
        try await delegate.worker.perform { db in try HistoryMaintenance.rebuilt(changes, db) }
        lastLook = nil
        progress.covered(through: changes.through, storeIdentifier: storeIdentifier, publish: true)
        DelegateLog.debug("index rebuilt from the database", ["store": storeIdentifier, "through": changes.through,
            "items": changes.items.count, "previousState": current.map { String(decoding: $0.prefix(32), as: UTF8.self) } ?? "none"])
    }

    /// Prunes the history the index covers, once enough of it has piled up.
    private func prune(through token: Int64, look: Look) async throws {
        guard let oldest = look.minToken, token - oldest >= Self.pruneThreshold else { return }
        let pruned = try await delegate.worker.perform { db in try HistoryMaintenance.prune(before: token, db) }
        if pruned { lastLook?.minToken = token }
    }

    static func milliseconds(_ from: ContinuousClock.Instant, _ to: ContinuousClock.Instant) -> String {
        let c = (to - from).components
        return String(format: "%.1f", Double(c.seconds) * 1000 + Double(c.attoseconds) / 1e15)
    }

    static func describe(_ error: any Error) -> String {
        String(describing: error)
    }
}

/// What one look at the database found.
struct Look: Sendable {
    /// The connection it was read on (`SQLiteDatabase.serial`).
    var connection: Int
    var dataVersion: Int64
    var schemaVersion: Int64
    /// The last history token (0 when the history is empty).
    var maxToken: Int64
    var minToken: Int64?
    var rebuildGeneration: String?

    /// Reads the bounds; when no other connection committed since `previous`
    /// (`PRAGMA data_version` unchanged on the same connection), `previous` is still true and
    /// only that pragma runs.
    /// nil when the history table is missing.
    static func read(_ db: SQLiteDatabase, previous: Look?) throws -> Look? {
        let dataVersion = try db.scalar("PRAGMA data_version")?.int64Value ?? 0
        if let previous, previous.connection == db.serial, previous.dataVersion == dataVersion { return previous }
        guard try HistorySchema.tableExists("searchlight_history", db) else { return nil }
        return try db.read {
            let schemaVersion = try db.scalar("PRAGMA schema_version")?.int64Value ?? 0
            var maxToken: Int64 = 0, minToken: Int64?
            try db.query("SELECT max(token), min(token) FROM searchlight_history") { _, v in
                maxToken = v[0].int64Value ?? 0
                minToken = v[1].int64Value
            }
            return Look(connection: db.serial, dataVersion: dataVersion, schemaVersion: schemaVersion, maxToken: maxToken, minToken: minToken,
                rebuildGeneration: try HistorySchema.meta("rebuildNeeded", db)?.stringValue)
        }
    }
}

/// The delegate's writes to the app's database after a batch committed.
enum HistoryMaintenance {
    /// Deletes the history before `token` (the row at `token` stays: the next token must stay
    /// above it, and a state beyond the last row means "the history was reset"). Skipped when
    /// the app holds the write lock: pruning can wait, the app must not.
    static func prune(before token: Int64, _ db: SQLiteDatabase) throws -> Bool {
        db.setBusyTimeout(milliseconds: 200)
        defer { db.setBusyTimeout(milliseconds: 5_000) }
        do {
            try db.run("DELETE FROM searchlight_history WHERE token < ?", [.integer(token)])
            return true
        } catch let error as SQLiteError where error.isBusy {
            return false
        }
    }

    /// After a rebuild committed: clears the `rebuildNeeded` mark it answered (not a newer one)
    /// and prunes what it covered.
    static func rebuilt(_ changes: ChangeSet, _ db: SQLiteDatabase) throws {
        try db.write {
            if let generation = changes.rebuildGeneration {
                try db.run("DELETE FROM searchlight_meta WHERE key = 'rebuildNeeded' AND value = ?", [.text(generation)])
            }
            try db.run("DELETE FROM searchlight_history WHERE token < ?", [.integer(changes.through)])
        }
    }
}

/// Waits between attempts: 0.1 s doubling to 5 s while the daemon is away (it is restarting,
/// it should be back soon), to 30 s for other failures.
struct RetryDelay {
    private var attempt = 0

    mutating func reset() { attempt = 0 }

    mutating func next(after error: any Error) -> Duration {
        let unreachable = (error as? SearchlightError).map { [.remoteConnection, .indexUnavailable].contains($0.code) } ?? false
        let cap: Double = unreachable ? 5 : 30
        let seconds = min(cap, 0.1 * Double(1 << min(attempt, 10)))
        attempt += 1
        return .milliseconds(Int(seconds * 1000))
    }
}
