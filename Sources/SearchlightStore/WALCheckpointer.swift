import CSQLite
import Foundation

/// Copies an index's write-ahead log into its database file on a thread of its own, so that no
/// commit pays for a checkpoint.
///
/// The writer connection runs with `wal_autocheckpoint=0` and reports the length of the WAL after
/// every commit (`sqlite3_wal_hook`). Once `checkpointFrames` frames have been written since the
/// last checkpoint began, this thread runs a PASSIVE checkpoint from its own connection: it copies
/// every frame no reader still needs, waits for nobody, and the writer goes on committing.
///
/// SQLite starts the WAL over from its beginning only when the writer begins a transaction while
/// every frame is already in the database file. A writer that never pauses between groups, or a
/// reader holding an old snapshot, keeps the log growing; once it reaches `walFrameLimit` frames
/// the writer pauses before its next group while this thread runs a RESTART checkpoint, which
/// waits up to `restartTimeout` for readers. If that times out, the next try waits until the log
/// has grown by another quarter of the limit, so a reader that pins the log does not stall every
/// group. Closing runs a TRUNCATE checkpoint: a closed index leaves an empty WAL.
///
/// Durability is the writer's: it syncs the WAL at every commit. A checkpoint syncs the WAL before
/// copying and the database file before the log may start over (this connection's `synchronous`
/// is never OFF).
final class WALCheckpointer: @unchecked Sendable {
    /// What the checkpointer has done, for tests and status.
    struct Statistics: Sendable, Equatable {
        /// PASSIVE checkpoints run.
        var passes = 0
        /// RESTART checkpoints that finished, and those cut short waiting for readers.
        var restarts = 0
        var busyRestarts = 0
        /// Frames in the WAL after the last commit, and frames written since the index opened.
        var walFrames = 0
        var framesWritten = 0
    }

    /// How long a RESTART or the final TRUNCATE waits for readers (and the writer stays paused).
    static let restartTimeoutMilliseconds: Int32 = 250

    private enum Job { case passive, restart }

    /// Under `condition`.
    private struct State {
        var statistics = Statistics()
        /// Frames written since the last checkpoint began.
        var framesSinceCheckpoint = 0
        /// The WAL length at which a RESTART is next tried.
        var nextRestartAt: Int
        /// Set by the writer's commit hook; the writer waits before its next group until it is clear.
        var restartWanted = false
        var running: Job?
        var stopping = false
        var failure: DatabaseError?
    }

    /// Used by the checkpointer's thread only (after `init`).
    private let database: Database
    private let checkpointFrames: Int
    private let walFrameLimit: Int
    private let condition = NSCondition()
    private var state: State
    private var thread: Thread?
    private let finished = DispatchSemaphore(value: 0)

    /// Opens the checkpointer's own connection to the index at `path` (already in WAL mode).
    init(path: String, fullSync: Bool, checkpointFrames: Int, walFrameLimit: Int) throws(DatabaseError) {
        database = try Database(path: path, busyTimeoutMilliseconds: Self.restartTimeoutMilliseconds)
        // A checkpoint syncs with the flags of the connection that runs it; OFF would not sync at all.
        try database.execute("PRAGMA synchronous=\(fullSync ? "FULL" : "NORMAL")")
        // A connection opens the WAL at its first read; until then a checkpoint does nothing.
        _ = try database.scalar("SELECT count(*) FROM sqlite_schema")
        self.checkpointFrames = max(1, checkpointFrames)
        self.walFrameLimit = max(1, walFrameLimit)
        state = State(nextRestartAt: self.walFrameLimit)
    }

    /// Takes the writer's checkpoints over: turns its automatic checkpoints off and listens to its
    /// commits. Call before the writer commits again; `detach` before this object goes away (the
    /// hook holds it unretained).
    func attach(to writer: Database) throws(DatabaseError) {
        try writer.execute("PRAGMA wal_autocheckpoint=0")
        sqlite3_wal_hook(writer.handle, { context, _, _, frames in
            guard let context else { return SQLITE_OK }
            Unmanaged<WALCheckpointer>.fromOpaque(context).takeUnretainedValue().writerCommitted(walFrames: Int(frames))
            return SQLITE_OK
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// Removes the commit hook; the writer must not be committing.
    func detach(from writer: Database) {
        sqlite3_wal_hook(writer.handle, nil, nil)
    }

    func start() {
        let thread = Thread { [self] in run() }
        thread.name = "index-checkpointer"
        self.thread = thread
        thread.start()
    }

    // MARK: - The writer's side

    /// The commit hook, on the writer's thread (after the commit, its write lock released): counts
    /// frames and wakes the checkpointer when a checkpoint is due. A lock and no system call.
    private func writerCommitted(walFrames frames: Int) {
        condition.lock()
        defer { condition.unlock() }
        let previous = state.statistics.walFrames
        // A commit adds frames, so a log no longer than before has started over.
        let restarted = frames <= previous
        let added = restarted ? frames : frames - previous
        if restarted { state.nextRestartAt = walFrameLimit }
        state.statistics.walFrames = frames
        state.statistics.framesWritten += added
        let due = state.framesSinceCheckpoint < checkpointFrames && state.framesSinceCheckpoint + added >= checkpointFrames
        state.framesSinceCheckpoint += added
        if frames >= state.nextRestartAt {
            state.restartWanted = true
            condition.broadcast()
        } else if due {
            condition.broadcast()
        }
    }

    /// Called by the writer before each group, outside any transaction: returns at once unless a
    /// RESTART is due, which needs the writer to hold off until it is done.
    func waitForRestart() {
        condition.lock()
        while state.restartWanted { condition.wait() }
        condition.unlock()
    }

    // MARK: - The checkpointer's thread

    private func run() {
        while let job = nextJob() {
            let outcome = Result { () throws(DatabaseError) in try database.checkpoint(job == .passive ? .passive : .restart) }
            finish(job, outcome)
        }
        // The writer has stopped: leave an empty log behind.
        let outcome = Result { () throws(DatabaseError) in try database.checkpoint(.truncate) }
        condition.lock()
        if case .failure(let e) = outcome { state.failure = e }
        condition.unlock()
        finished.signal()
    }

    private func nextJob() -> Job? {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if state.restartWanted {
                state.framesSinceCheckpoint = 0
                state.running = .restart
                return .restart
            }
            if state.stopping { return nil }
            if state.framesSinceCheckpoint >= checkpointFrames {
                state.framesSinceCheckpoint = 0
                state.running = .passive
                return .passive
            }
            condition.wait()
        }
    }

    private func finish(_ job: Job, _ outcome: Result<CheckpointResult, DatabaseError>) {
        condition.lock()
        defer { condition.unlock() }
        state.running = nil
        switch (job, outcome) {
        case (_, .failure(let e)): state.failure = e
        case (.passive, .success): state.statistics.passes += 1
        case (.restart, .success(let r)):
            if r.busy { state.statistics.busyRestarts += 1 } else { state.statistics.restarts += 1 }
        }
        if job == .restart {
            // Done or not, the writer goes on; the next try waits for the log to grow (a restarted
            // log resets this in the commit hook).
            state.restartWanted = false
            state.nextRestartAt = state.statistics.walFrames + max(1, walFrameLimit / 4)
        }
        condition.broadcast()
    }

    // MARK: - Status and lifecycle

    var statistics: Statistics {
        condition.lock()
        defer { condition.unlock() }
        return state.statistics
    }

    /// The last checkpoint failure (I/O error, disk full, corruption), if any.
    var failure: DatabaseError? {
        condition.lock()
        defer { condition.unlock() }
        return state.failure
    }

    /// Blocks until no checkpoint is due or running (tests line up their checks with it).
    func waitUntilIdle() {
        condition.lock()
        while state.running != nil || state.restartWanted || (state.framesSinceCheckpoint >= checkpointFrames && !state.stopping) {
            condition.wait()
        }
        condition.unlock()
    }

    /// Runs the final TRUNCATE checkpoint and stops the thread. The writer must have stopped.
    func close() {
        condition.lock()
        let first = !state.stopping
        state.stopping = true
        condition.broadcast()
        condition.unlock()
        if first, thread != nil { finished.wait() }
    }
}
