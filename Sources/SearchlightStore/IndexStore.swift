#if canImport(Glibc)
import Glibc
#endif
import CSQLite
import Foundation
import SearchlightWire

/// One index: a SQLite database in WAL mode holding one bundle's items for one index name.
///
/// Writes go through a single writer thread that commits every pending call together (group
/// commit): each call runs in its own savepoint, so one failing call applies nothing while the
/// others commit, and a whole group costs one fsync. A call is answered only after its commit.
/// Reads use a small pool of separate connections and never wait for the writer.
public final class IndexStore: @unchecked Sendable {
    public let path: String
    public let options: StoreOptions
    /// The store format of the file as opened: `Schema.formatVersion` for a file made by this
    /// build, older for a file that waits for its migration (it is read and written as it is).
    public private(set) var formatVersion = Schema.formatVersion

    struct PendingWrite {
        /// Items the call donates (what may start a stream).
        var items = 0
        let work: (IndexStore) throws -> ApplyResult
        let complete: @Sendable (Result<ApplyResult, SearchlightError>) -> Void
        /// Runs on the writer thread between groups, outside any transaction (a WAL checkpoint
        /// cannot run inside one).
        var outsideTransaction = false
        /// The ranked index's own writes: they do not count as activity that a build waits out.
        var maintenance = false
        /// A background thread's write (`maintenanceWrite`): the writer hands it the connection
        /// and waits, instead of running the work itself.
        var lent: LentTurn?
    }

    /// The writer's turn handed to a background-priority thread (`maintenanceWrite`): `go` when the
    /// writer is parked and the connection is the caller's, `done` when the caller gives it back.
    final class LentTurn: @unchecked Sendable {
        let go = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        /// Set (before `go`) when the store refused the write: it is closing.
        var refused: SearchlightError?
    }

    let writer: Database
    private let queue = NSCondition()
    private var pending: [PendingWrite] = []
    /// The writer is running a group (taken from `pending`, not yet answered).
    private var writing = false
    private var stopping = false
    private var writerThread: Thread?
    private let writerDone = DispatchSemaphore(value: 0)

    /// The writer thread's prepared statements, made on first use.
    private var preparedWriterStatements: WriterStatements?

    /// What the writer knows of the ranked index (owned by the writer thread; see `RankWriter`).
    var rankWriter = RankWriter()
    /// Builds the ranked index's segments in the background (Ranked/RankMaintainer).
    private(set) lazy var rankMaintainer = RankMaintainer(store: self)
    /// Documents above the ranked index's coverage or written since, tokenized (Ranked/DeltaDocuments).
    let deltaCache = DeltaCache()
    /// How `query.search` pages with a one-term driver were answered (tests read it).
    let pageWalks = PageWalkTally()
    /// Semantic search's vectors in memory, following the commits (Vectors/StoreVectors).
    let vectors = StoreVectors()
    /// The items refinement takes first (`RefinementOrder.whereUsersLook`).
    let refinementHints = RefinementHintsBox()
    /// Scans of `item_vectors` to count its vectors (`vectorCounts` of an index not loaded; tests read it).
    let vectorCountScans = ScanTally()

    func writerStatements() throws -> WriterStatements {
        if let s = preparedWriterStatements { return s }
        let s = try WriterStatements(writer, vectors: formatVersion >= Schema.firstVectorFormat)
        preparedWriterStatements = s
        return s
    }

    /// Owned by the writer thread (read under `stateLock` for status).
    var itemCount = 0
    let stateLock = NSLock()
    var damage: DatabaseError?
    private var commits = 0
    private var committedCalls = 0
    /// When a group with a client's write last committed (the ranked index builds once it is quiet).
    private var lastClientWrite = Date.distantPast
    /// Owned by the writer thread: items donated since the writer last asked for a ranked build.
    private var donatedSinceBuildRequest = 0
    /// Owned by the writer thread: whether a stream of large calls runs (see "Streams").
    private var inStream = false
    private var streams = (started: 0, ended: 0)

    private let readers = NSCondition()
    private var idleReaders: [Database] = []
    private var openReaders = 0
    /// Readers handed out and not yet returned (guarded by `readers`).
    private var checkedOutReaders = 0
    /// Those connections, for `shutDown(interruptingReads:)` (guarded by `readers`, so none is
    /// closed while it is interrupted: a retired connection closes in `checkin`, under the lock).
    private var checkedOut: [ObjectIdentifier: Database] = [:]
    /// Of those, the ones background threads hold (guarded by `readers`): at most
    /// `backgroundReaderLimit`, so the rest of the pool is always there for queries. A build's
    /// read transaction at background priority lasts long; queries must not queue behind it.
    private var backgroundReaders = 0
    var backgroundReaderLimit: Int { max(1, options.maxReaders / 2) }
    /// Set by `shutDown`: every connection is closed and no new one is opened.
    private var retired = false
    /// The ranked index needed settling when the store opened (`init`).
    private var unsettledAtOpen = false

    /// Opens (creating if needed) the index file at `path`, in a 0700 directory with mode 0600.
    public init(path: String, options: StoreOptions = StoreOptions()) throws(SearchlightError) {
        self.path = path
        self.options = options
        vectors.usePartitionPath(options.vectorPartitionFile ? path + Self.partitionFileSuffix : nil)
        vectors.useIndexPath(store: path, saved: options.vectorIndexFile ? path + Self.vectorIndexFileSuffix : nil)
        let dir = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot create index directory \(dir): \(error.localizedDescription)")
        }
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if fd >= 0 { Glibc.close(fd) }
        do {
            writer = try Database(path: path)
            try Self.configure(writer, fullSync: options.fullSync)
            try writer.execute("PRAGMA cache_size=-\(options.cacheKiB); PRAGMA journal_size_limit=\(Self.walSizeLimit);")
            formatVersion = try Self.prepareSchema(writer, path: path)
            if formatVersion >= Schema.firstVectorFormat {
                _ = try writer.transaction { try writer.execute(Schema.vectorStamp) }
            }
            itemCount = try writer.intScalar("SELECT count(*) FROM items")
            if formatVersion >= RankWriter.firstFormat {
                try rankWriter.load(writer)
                // A store stopped mid-settle (a reboot, `systemctl stop`) reopens with its small
                // segments, and nothing else asks for settling until a write or a large delta.
                if options.rankedIndexBuilds {
                    unsettledAtOpen = try Self.planRankBuild(writer, now: options.clock().timeIntervalSince1970,
                        segmentDocs: options.rankedIndexSegmentDocs, mode: .settle) != nil
                }
            }
        } catch let e as DatabaseError {
            throw Self.map(e, path: path)
        } catch let e as SearchlightError {
            throw e
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot open index \(path): \(error)")
        }
        let background = options.backgroundWriter
        let thread = Thread { [unowned self] in
            if background { BackgroundPriority.lowerCurrentThread(name: "shadow-writer") } else { BackgroundPriority.nameCurrentThread("index-writer") }
            self.writerLoop()
        }
        thread.name = "index-writer"
        writerThread = thread
        thread.start()
        // Settling at background priority, as when the writes stop (no query waits for it).
        if unsettledAtOpen { rankMaintainer.request(byQuery: false) }
    }

    static func configure(_ db: Database, fullSync: Bool) throws {
        let mode = try db.scalar("PRAGMA journal_mode=WAL")
        guard mode == .text("wal") else {
            throw SearchlightError(.indexUnavailable, "cannot switch \(db.path) to WAL mode (got \(String(describing: mode)))")
        }
        try db.execute("""
            PRAGMA synchronous=\(fullSync ? "FULL" : "NORMAL");
            PRAGMA temp_store=MEMORY;
            PRAGMA foreign_keys=OFF;
            """)
        db.registerFunctions()
    }

    /// Creates the schema of a new file; returns the file's store format. An older format
    /// (Schema.oldestReadableFormat and later) opens as it is: every format keeps the tables and
    /// columns the queries and writes use, so an old file serves until its migration replaces it.
    static func prepareSchema(_ db: Database, path: String) throws -> Int {
        let version = try db.intScalar("PRAGMA user_version")
        let tables = try db.scalar("SELECT count(*) FROM sqlite_schema WHERE type='table' AND name='items'")
        let hasItems = tables == .integer(1)
        if version > Schema.formatVersion {
            throw SearchlightError(.indexUnavailable,
                "\(path) has store format \(version), newer than this build's \(Schema.formatVersion); upgrade searchlightd")
        }
        if version == 0 {
            if hasItems {
                throw SearchlightError(.indexUnavailable, "\(path) is not a Searchlight index (no format version); move it away")
            }
            _ = try db.transaction {
                try db.execute(Schema.create)
                try db.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('created', ?)", [.double(Date().timeIntervalSince1970)])
                try db.execute("PRAGMA user_version=\(Schema.formatVersion)")
            }
            return Schema.formatVersion
        } else if version < Schema.oldestReadableFormat {
            throw SearchlightError(.indexUnavailable,
                "\(path) has store format \(version), older than this build reads (\(Schema.oldestReadableFormat)); erase it and reindex")
        } else if version < Schema.formatVersion, !Schema.needsRebuild(from: version) {
            _ = try db.transaction { try db.execute(Schema.upgradeInPlace(from: version)) }
            return Schema.formatVersion
        }
        return version
    }

    /// Maps a SQLite failure to the wire error a caller sees, remembering corruption.
    static func map(_ e: DatabaseError, path: String) -> SearchlightError {
        if e.isCorruption {
            return SearchlightError(.indexUnavailable, "index file \(path) is damaged (\(e.message)); searchlightd recovers it (see `searchlight status`); retry shortly")
        }
        if e.isDiskFull {
            return SearchlightError(.indexUnavailable, "disk full while writing \(path); nothing was applied: free space and retry")
        }
        return SearchlightError(.indexUnavailable, "index \(path) failed: \(e)")
    }

    func mapAndRecord(_ error: any Error) -> SearchlightError {
        switch error {
        case let e as SearchlightError: return e
        case let e as DatabaseError:
            if e.isCorruption { markDamaged(e) }
            return Self.map(e, path: path)
        default: return SearchlightError(.internalError, "\(error)")
        }
    }

    /// The corruption seen at run time, if any (the supervisor's recovery acts on it).
    public var detectedDamage: DatabaseError? { stateLock.withLock { damage } }

    /// Told once, on the first damage found at run time (a failing call or the idle scrub), so the
    /// supervisor can start recovery at once instead of at the next status. Set before the store is shared.
    public var onDamage: (@Sendable (DatabaseError) -> Void)?

    /// Records that the file is damaged (SQLITE_CORRUPT/NOTADB at run time, or a failed scrub) and tells
    /// `onDamage` the first time.
    public func markDamaged(_ e: DatabaseError) {
        let first: Bool = stateLock.withLock {
            defer { if damage == nil { damage = e } }
            return damage == nil
        }
        if first { onDamage?(e) }
    }

    public var count: Int { stateLock.withLock { itemCount } }

    /// Transactions committed and the calls they carried: calls / commits is the group-commit factor.
    public var writeStatistics: (commits: Int, calls: Int) { stateLock.withLock { (commits, committedCalls) } }

    /// Streams of large calls started and ended (see "Streams").
    public var streamStatistics: (started: Int, ended: Int) { stateLock.withLock { streams } }

    /// Seconds since a client's write last committed.
    var secondsSinceClientWrite: TimeInterval { Date().timeIntervalSince(stateLock.withLock { lastClientWrite }) }

    /// Tests: the client writes stopped long ago, as far as the ranked index's settling can tell.
    func forgetClientWrites() { stateLock.withLock { lastClientWrite = .distantPast } }

    /// Set once `close` or `shutDown` began: background work stops.
    var isClosing: Bool {
        queue.lock()
        defer { queue.unlock() }
        return stopping
    }

    /// Calls waiting for the writer (tests use it to line up a group deterministically).
    var pendingCount: Int {
        queue.lock()
        defer { queue.unlock() }
        return pending.count
    }

    // MARK: - Writing

    /// Queues work for the writer; `complete` runs after the group containing it committed.
    func enqueue(items: Int = 0, _ work: @escaping (IndexStore) throws -> ApplyResult, outsideTransaction: Bool = false,
                 maintenance: Bool = false, lent: LentTurn? = nil,
                 complete: @escaping @Sendable (Result<ApplyResult, SearchlightError>) -> Void) {
        queue.lock()
        if stopping {
            queue.unlock()
            complete(.failure(SearchlightError(.indexUnavailable, "index \(path) is closing; retry")))
            return
        }
        pending.append(PendingWrite(items: items, work: work, complete: complete, outsideTransaction: outsideTransaction,
            maintenance: maintenance, lent: lent))
        queue.signal()
        queue.unlock()
    }

    /// Applies mutations atomically, checking and then setting the client state. Returns after
    /// commit. The items' storage form is built here, on the caller's thread, not by the writer.
    public func apply(
        _ mutations: [Mutation], expecting expectation: ClientStateExpectation = .any, newClientState: [UInt8]? = nil
    ) async throws(SearchlightError) -> ApplyResult {
        let prepared = prepare(mutations)
        let result: Result<ApplyResult, SearchlightError> = await withCheckedContinuation { continuation in
            enqueue(items: mutations.itemCount, { store in
                try store.applyInTransaction(prepared, expectation: expectation, newClientState: newClientState)
            }) {
                continuation.resume(returning: $0)
            }
        }
        withExtendedLifetime(prepared) {}  // freed here, not by the writer (see `writerLoop`)
        return try result.get()
    }

    /// The blocking form of `apply`, for callers on their own threads (the daemon's connections).
    /// `engaging`: items' engagement counted in the same transaction, after the mutations
    /// (`recordEngagement`'s work; a user activity's `becomeCurrent()` is one commit).
    public func applySync(
        _ mutations: [Mutation], expecting expectation: ClientStateExpectation = .any, newClientState: [UInt8]? = nil,
        engaging: [(identifier: String, weight: Double)] = []
    ) throws(SearchlightError) -> ApplyResult {
        let prepared = prepare(mutations)
        let box = ResultBox()
        let now = options.clock().timeIntervalSince1970
        enqueue(items: mutations.itemCount, { store in
            let result = try store.applyInTransaction(prepared, expectation: expectation, newClientState: newClientState)
            for e in engaging { try store.engage(e.identifier, weight: e.weight, at: now) }
            return result
        }) {
            box.set($0)
        }
        // Held until answered, so the rows are freed on this thread, not by the writer (see `writerLoop`).
        let result = withExtendedLifetime(prepared) { box.wait() }
        if mutations.itemCount > 0 { waitForRankedLag() }
        return try result.get()
    }

    /// Runs arbitrary writer work (maintenance, engagement) through the group-commit queue.
    public func writeSync(_ work: @escaping (IndexStore) throws -> ApplyResult) throws(SearchlightError) -> ApplyResult {
        let box = ResultBox()
        enqueue(work) { box.set($0) }
        return try box.wait().get()
    }

    /// Runs the ranked index's work through the group-commit queue (not counted as client activity).
    ///
    /// With `lendWriterToBackground`, from a thread at background priority (settling:
    /// `RankMaintainer`'s background queue), the work runs on that thread, in a transaction of its own, while the writer waits for it in its
    /// turn: the writer thread runs at the normal priority, and settling's term batches run there
    /// took the CPU from the queries of an app that had just donated (a query's thread waited up
    /// to 3 ms on the run queue to wake up, p99, while the settled index's waited 0.08 ms).
    func maintenanceWrite(_ work: @escaping (IndexStore) throws -> ApplyResult) throws(SearchlightError) -> ApplyResult {
        // Never to a SCHED_IDLE thread: it would hold the only write connection while any
        // other thread, a busy machine's included, preempts it (clients' writes waiting behind it).
        if options.lendWriterToBackground, !options.backgroundWriter, BackgroundPriority.isCurrentThreadBackground,
           !BackgroundPriority.isCurrentThreadIdle {
            let turn = LentTurn()
            enqueue({ _ in ApplyResult() }, maintenance: true, lent: turn) { result in
                // Only a refused write is answered: a lent turn is otherwise never completed.
                if case .failure(let e) = result { turn.refused = e; turn.go.signal() }
            }
            BlockingCheck.blocking("IndexStore: waiting for the writer's turn")
            turn.go.wait()
            if let refused = turn.refused { throw refused }
            defer {
                writer.yieldsToQueries = false  // before the writer thread goes on
                turn.done.signal()
            }
            writer.yieldsToQueries = true
            let result = commit([PendingWrite(work: work, complete: { _ in }, maintenance: true)])
            updateRankedLag()
            return try result[0].get()
        }
        let box = ResultBox()
        enqueue(work, maintenance: true) { box.set($0) }
        return try box.wait().get()
    }

    /// Runs work on the writer thread outside any transaction, after the group queued with it.
    func writeOutsideTransaction(_ work: @escaping (IndexStore) throws -> ApplyResult) throws(SearchlightError) -> ApplyResult {
        let box = ResultBox()
        enqueue(work, outsideTransaction: true) { box.set($0) }
        return try box.wait().get()
    }

    // MARK: - Pacing by the ranked index

    /// Items no segment of the ranked index holds yet (above its coverage), after the last group
    /// committed; guarded by `lagCondition`.
    private var rankedLag = 0
    private let lagCondition = NSCondition()
    /// Past this many items above the coverage, a donation's answer waits for fresh segments
    /// (at most `rankedLagWait` seconds): on a busy machine the donations' threads outrun the
    /// one thread that builds fresh segments, and the app's first query would meet all it
    /// donated in the delta. Tantivy's writer blocks `add_document` the same way when its
    /// indexing threads fall behind.
    static let rankedLagLimit = 2048
    static let rankedLagWait = 1.0

    /// Writer thread, after a group: how far the fresh segments lag.
    private func updateRankedLag() {
        guard rankWriter.enabled, options.rankedIndexBuilds, options.rankedIndexFreshSegments else { return }
        let top = (try? writer.intScalar("SELECT coalesce(max(rowid), 0) FROM items")) ?? 0
        let lag = max(0, Int64(top) - rankWriter.covered)
        lagCondition.withLock {
            rankedLag = Int(lag)
            lagCondition.broadcast()
        }
    }

    /// A donation's thread (`applySync`: the daemon's connections), after its commit: waits while
    /// the fresh segments lag by more than `rankedLagLimit` items, `rankedLagWait` at most.
    /// Not while the fresh lane's builds fail (a persistent error, shown by `admin.status` as the
    /// ranked index's `lastError`): no segment would end the wait, and every donation would pay
    /// the whole of it.
    private func waitForRankedLag() {
        guard options.rankedIndexBuilds, options.rankedIndexFreshSegments else { return }
        let deadline = Date(timeIntervalSinceNow: Self.rankedLagWait)
        BlockingCheck.blocking("IndexStore: waiting for fresh segments")
        let paced: Bool = lagCondition.withLock {
            var paced = false
            while rankedLag > Self.rankedLagLimit, !isClosing, !rankMaintainer.freshBuildsFailing {
                paced = true
                if !lagCondition.wait(until: deadline) { break }
            }
            return paced
        }
        if paced { stateLock.withLock { pacedDonations += 1 } }
    }

    /// Donations whose answer waited for fresh segments (`waitForRankedLag`), since the store opened.
    private var pacedDonations = 0
    var pacedDonationCount: Int { stateLock.withLock { pacedDonations } }

    /// The fresh lane's build failed: donations waiting for its segments stop waiting.
    func rankedBuildsFailed() {
        lagCondition.withLock { lagCondition.broadcast() }
    }

    private func writerLoop() {
        while true {
            queue.lock()
            while pending.isEmpty && !stopping {
                if inStream {
                    // The only timed wait: once after a stream, so an idle daemon never wakes.
                    let timedOut = !queue.wait(until: Date(timeIntervalSinceNow: options.streamIdleSeconds))
                    if timedOut && pending.isEmpty && !stopping {
                        queue.unlock()
                        endStream()
                        queue.lock()
                    }
                } else {
                    queue.wait()
                }
            }
            if pending.isEmpty && stopping {
                queue.unlock()
                if inStream { endStream() }
                writerDone.signal()
                return
            }
            var group = pending
            pending.removeAll(keepingCapacity: true)
            writing = true
            queue.unlock()
            let outside = group.filter(\.outsideTransaction)
            let lent = group.compactMap(\.lent)
            var plain = group.filter { !$0.outsideTransaction && $0.lent == nil }
            if !inStream, itemCount >= options.streamIndexItems,
                plain.reduce(0, { $0 + $1.items }) >= options.streamGroupItems { startStream() }
            group.removeAll()
            if !plain.isEmpty {
                // Only background work yields to queries (`QueryYield`): a client's donation, or
                // a write a query waits for (a vector load), keeps the writer's slice.
                writer.yieldsToQueries = plain.allSatisfy(\.maintenance)
                let results = commit(plain)
                if plain.contains(where: { !$0.maintenance }) { stateLock.withLock { lastClientWrite = Date() } }
                updateRankedLag()
                // Enough new items ask for a ranked build (it starts once the writes stop), so the
                // first query after a large import or reindex-all does not have to ask for it.
                donatedSinceBuildRequest += plain.reduce(0) { $0 + ($1.maintenance ? 0 : $1.items) }
                if donatedSinceBuildRequest >= RankMaintainer.deltaBuildThreshold {
                    donatedSinceBuildRequest = 0
                    rankMaintainer.request(byQuery: false)
                }
                // The writer lets go of the calls' work (and the prepared rows it holds) before it
                // answers them, so the callers, who hold the rows too, free them on their own threads:
                // freeing a group's rows cost the writer about 5 000 instructions per item (3%).
                let completions = plain.map(\.complete)
                plain.removeAll()
                for (complete, result) in zip(completions, results) { complete(result) }
            }
            // Each lent turn in its order after the group: the caller commits on its own thread
            // (`maintenanceWrite`) while this thread waits.
            for turn in lent {
                turn.go.signal()
                turn.done.wait()
            }
            // Outside a transaction: a query's vector load, a checkpoint: they do not yield.
            writer.yieldsToQueries = false
            for write in outside {
                do {
                    write.complete(.success(try write.work(self)))
                } catch {
                    write.complete(.failure(mapAndRecord(error)))
                }
            }
            queue.lock()
            writing = false
            queue.unlock()
        }
    }

    /// Commits a group in one transaction. The calls run first without savepoints: FTS5 flushes
    /// its pending terms to a new segment at every savepoint, so a savepoint per call would cut
    /// the group's full-text data into one small segment per call (more segments, more merging).
    /// When a call fails, the transaction is rolled back and the group runs again with a
    /// savepoint per call, so the failing call applies nothing and the others commit.
    private func commit(_ group: [PendingWrite]) -> [Result<ApplyResult, SearchlightError>] {
        let countBefore = itemCount
        var results: [Result<ApplyResult, SearchlightError>]
        do {
            if let together = try commitTogether(group) {
                results = together
            } else {
                results = try commitWithSavepoints(group)
            }
        } catch {
            // A storage failure (disk full, I/O error, corruption) fails the whole group: nothing
            // in it was committed, so nothing is acknowledged.
            if writer.isInTransaction { try? writer.execute("ROLLBACK") }
            rankWriter.reload(writer)
            itemCount = countBefore
            let mapped = mapAndRecord(error)
            results = group.map { _ in .failure(mapped) }
        }
        // A call rolled back (alone or with its group) may have journalled vectors that did not
        // commit: the in-memory index is then reloaded from the table instead of patched.
        vectors.writerCommitted(clean: results.allSatisfy { if case .success = $0 { true } else { false } })
        stateLock.withLock {
            commits += 1
            committedCalls += group.count
        }
        return results
    }

    // MARK: - Streams

    /// While large calls keep coming (a reindex-all sends a million items in calls of 1000, three
    /// in flight), the writer uses a larger page cache and checkpoints the WAL less often. With
    /// an 8 MB cache and a checkpoint every 1000 pages, filling an index to 1M items read its b-tree
    /// pages back from the file over and over and copied pages to the file that the next commits
    /// rewrote anyway: 2.4 reads and 4.0 writes per item over the last fifth, against 1.2 and 3.2
    /// with these settings. Commits stay `synchronous=FULL`: only when pages reach the file changes.
    /// `streamIdleSeconds` after the last call the stream ends: the log is checkpointed, the cache
    /// goes back to `cacheKiB` and its memory to the system, so an idle daemon stays small.
    private func startStream() {
        inStream = true
        stateLock.withLock { streams.started += 1 }
        try? writer.execute("PRAGMA cache_size=-\(options.streamCacheKiB); PRAGMA wal_autocheckpoint=\(options.streamCheckpointPages);")
    }

    private func endStream() {
        writer.yieldsToQueries = false  // the end of a client's stream of writes
        inStream = false
        // PASSIVE: never waits for readers; what it cannot copy now, the next checkpoint does.
        try? writer.execute("""
            PRAGMA wal_autocheckpoint=1000;
            PRAGMA wal_checkpoint(PASSIVE);
            PRAGMA cache_size=-\(options.cacheKiB);
            PRAGMA shrink_memory;
            """)
        HeapTrimmer.shared.requestTrim()  // the cache's pages and the stream's rows go back to the system
        stateLock.withLock { streams.ended += 1 }
    }

    /// The WAL file is cut back to this size when it starts over (a stream lets it grow to 64 MiB).
    static let walSizeLimit = 8 << 20

    /// Every call in one transaction with no savepoints; nil (rolled back) when a call of a larger
    /// group fails. A group of one fails alone, so its failure is its result.
    private func commitTogether(_ group: [PendingWrite]) throws -> [Result<ApplyResult, SearchlightError>]? {
        let countBefore = itemCount
        var results: [Result<ApplyResult, SearchlightError>] = []
        results.reserveCapacity(group.count)
        try writer.execute("BEGIN IMMEDIATE")
        for write in group {
            do {
                results.append(.success(try write.work(self)))
            } catch let e as SearchlightError {
                try writer.execute("ROLLBACK")
                rankWriter.reload(writer)
                itemCount = countBefore
                return group.count == 1 ? [.failure(e)] : nil
            }
        }
        try bumpVectorEpochIfTouched()
        try writer.execute("COMMIT")
        return results
    }

    private func commitWithSavepoints(_ group: [PendingWrite]) throws -> [Result<ApplyResult, SearchlightError>] {
        var results: [Result<ApplyResult, SearchlightError>] = []
        results.reserveCapacity(group.count)
        try writer.execute("BEGIN IMMEDIATE")
        for write in group {
            try writer.execute("SAVEPOINT call")
            let saved = itemCount
            do {
                results.append(.success(try write.work(self)))
                try writer.execute("RELEASE call")
            } catch let e as SearchlightError {
                try writer.execute("ROLLBACK TO call; RELEASE call")
                rankWriter.reload(writer)
                itemCount = saved
                results.append(.failure(e))
            }
        }
        try bumpVectorEpochIfTouched()
        try writer.execute("COMMIT")
        return results
    }

    // MARK: - Reading

    /// Runs `body` on a read connection from the pool. With a `budget` (a query), SQLite stops
    /// the statement once the budget says so and the call answers its `cancelled` error; a
    /// statement SQLite refuses for its size answers invalidQuery. Neither touches the index's
    /// health: only corruption is recorded.
    public func read<T>(budget: QueryBudget? = nil, _ body: (Database) throws -> T) throws(SearchlightError) -> T {
        // Background work (a thread at background priority: maintenance, refinement, the vector
        // fill, ranked-index builds) takes at most half the pool.
        let background = BackgroundPriority.isCurrentThreadBackground
        let db = try checkoutReader(background: background)
        defer { checkin(db, background: background) }
        db.postingCache?.needsCheck = true
        return try run(on: db, budget: budget, body)
    }

    /// Runs `body` on a reader already checked out (`read`, `IndexSnapshot`), with the budget
    /// and the error mapping of `read`.
    func run<T>(on db: Database, budget: QueryBudget?, _ body: (Database) throws -> T) throws(SearchlightError) -> T {
        do {
            return try db.withBudget(budget) { try body(db) }
        } catch {
            if let budget, budget.stop != nil { throw budget.error }
            if let e = error as? DatabaseError, e.isQueryTooLarge {
                throw SearchlightError(.invalidQuery,
                    "the query is too large for the index to run (SQLite: \(e.message)); use fewer filter queries, comparisons or words",
                    data: ["offset": 0])
            }
            throw mapAndRecord(error)
        }
    }

    func checkoutReader(background: Bool) throws(SearchlightError) -> Database {
        readers.lock()
        defer { readers.unlock() }
        while true {
            if retired {
                throw SearchlightError(.indexUnavailable, "index \(path) was closed while being replaced (recovery or migration); retry")
            }
            if background, backgroundReaders >= backgroundReaderLimit {
                readers.wait()
                continue
            }
            if let db = idleReaders.popLast() {
                checkedOutReaders += 1
                checkedOut[ObjectIdentifier(db)] = db
                if background { backgroundReaders += 1 }
                HeapTrimmer.shared.readBegan()
                began(db, background: background)
                return db
            }
            if openReaders < options.maxReaders {
                openReaders += 1
                do {
                    let db = try Database(path: path)
                    try db.execute("PRAGMA query_only=1; PRAGMA cache_size=-4000; PRAGMA temp_store=MEMORY;")
                    db.registerFunctions()
                    db.postingCache = PostingListCache()
                    checkedOutReaders += 1
                    checkedOut[ObjectIdentifier(db)] = db
                    if background { backgroundReaders += 1 }
                    HeapTrimmer.shared.readBegan()
                    began(db, background: background)
                    return db
                } catch {
                    openReaders -= 1
                    throw mapAndRecord(error)
                }
            }
            readers.wait()
        }
    }

    /// A reader lent to a background thread yields to user queries (`QueryYield`).
    private func began(_ db: Database, background: Bool) {
        db.yieldsToQueries = background
    }

    func checkin(_ db: Database, background: Bool) {
        db.clearFunctionCache()  // the query's compiled patterns by address go with it
        readers.lock()
        checkedOutReaders -= 1
        checkedOut[ObjectIdentifier(db)] = nil
        if background { backgroundReaders -= 1 }
        if retired {
            db.close()
            openReaders -= 1
        } else {
            idleReaders.append(db)
        }
        readers.broadcast()
        readers.unlock()
        HeapTrimmer.shared.readEnded()
    }

    /// Where this store's memory is, for `admin.status`: reader connections open, the page cache
    /// and kept posting lists of the idle ones (a reader in use is its thread's alone, so it is
    /// counted but not read), and the loaded vector index's heap.
    public var memoryFigures: StoreMemory {
        var m = StoreMemory()
        readers.lock()
        m.readers = openReaders
        m.busyReaders = checkedOutReaders
        for db in idleReaders {
            m.readerPageCacheBytes += db.pageCacheBytes
            m.postingCacheBytes += db.postingCache?.bytes ?? 0
            m.unionScratchBytes += db.unionScratch.freeBytes
        }
        readers.unlock()
        m.vectorHeapBytes = vectors.heapBytes ?? 0
        m.partitionBuilding = vectors.isPartitionBuilding
        m.vectorLoad = vectors.indexLoad
        return m
    }

    // MARK: - Lifecycle

    /// True when no write is queued or running and no read is in progress: closing the store now
    /// waits for nobody and fails no call (the daemon closes idle stores past its open-index bound).
    public var isIdle: Bool {
        queue.lock()
        let writes = writing || !pending.isEmpty
        queue.unlock()
        if writes { return false }
        // A partition build under way is background work closing would throw away (a 1M index
        // spends seconds of CPU on it): not idle.
        if vectors.isPartitionBuilding { return false }
        readers.lock()
        defer { readers.unlock() }
        return checkedOutReaders == 0
    }

    /// The figures of `summary()` read from a file that is not open as a store, through one
    /// read-only connection (no writer thread, nothing written, no expired item purged).
    public static func peekSummary(at path: String) throws(SearchlightError) -> IndexSummary {
        do {
            let db = try Database(path: path, readOnly: true, busyTimeoutMilliseconds: 2000)
            defer { db.close() }
            var format = try db.intScalar("PRAGMA user_version")
            // As it will be served: opening relabels a format whose tables are the current ones.
            if format >= Schema.oldestReadableFormat, format < Schema.formatVersion, !Schema.needsRebuild(from: format) {
                format = Schema.formatVersion
            }
            let items = try db.intScalar("SELECT count(*) FROM items")
            let state = try db.scalar("SELECT value FROM meta WHERE key = 'clientState'")
            var st = stat()
            var bytes: Int64 = 0
            for suffix in ["", "-wal"] + vectorSideFileSuffixes where stat(path + suffix, &st) == 0 { bytes += Int64(st.st_size) }
            var summary = IndexSummary(itemCount: items, fileBytes: bytes, formatVersion: format,
                hasClientState: { if case .blob? = state { true } else { false } }())
            if try db.scalar("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'item_vectors'") != nil,
               let row = try db.rows(Self.vectorCountSQL).first {
                summary.vectors = Int(row.int(0) ?? 0)
                summary.refined = Int(row.int(1) ?? 0)
            }
            return summary
        } catch {
            throw map(error, path: path)
        }
    }

    /// Waits, at most `timeout`, for the store's background file writes (the vector partition's
    /// save) to end after `close`: before its directory is removed. False when the wait ran out.
    @discardableResult
    public func waitForBackgroundFiles(timeout: TimeInterval) -> Bool {
        vectors.close(waitingUpTo: timeout)
    }

    /// Finishes queued writes, then stops the writer. Idempotent. Does not wait for a partition
    /// build (it stops at its next check; `shutDown` and `waitForBackgroundFiles` wait).
    public func close() {
        vectors.close()
        queue.lock()
        let wasStopping = stopping
        stopping = true
        queue.signal()
        queue.unlock()
        if !wasStopping, writerThread != nil { writerDone.wait() }
        readers.lock()
        openReaders -= idleReaders.count
        idleReaders.removeAll()
        readers.unlock()
    }

    /// Closes the file for good before it is moved or replaced: finishes queued writes, waits up
    /// to `timeout` for reads in progress, then closes every connection; later calls fail with
    /// indexUnavailable. Returns false when a read was still running at the deadline (its
    /// connection closes when it returns). Moving a file with a connection still open is unsafe:
    /// SQLite deletes `<path>-wal` by name when the last connection to a WAL database closes.
    ///
    /// With `interruptingReads`, the statements of the reads in progress are interrupted first
    /// (`sqlite3_interrupt`: the read fails with SQLITE_INTERRUPT at its next step), for a store
    /// whose only readers are its own background work (a shadow: client calls read the served
    /// file), which a later run redoes. A read between statements, or busy outside SQLite, is
    /// still waited for.
    ///
    /// With `savingVectors` (the daemon's stop: the files stay where they are), the loaded vector
    /// index is saved beside the store once the writer has stopped, for the next load
    /// (`saveVectorIndex`); a save still running at `saveDeadline` is not put in place. Never
    /// before a move, a replace or an erase.
    @discardableResult
    public func shutDown(timeout: TimeInterval = 10, interruptingReads: Bool = false, savingVectors: Bool = false,
                         saveDeadline: Date = .distantFuture) -> Bool {
        let start = Date()
        close()
        // Before the files are moved or removed: the partition thread ends (it stops at its next
        // check once closed), within the same deadline as the reads.
        let partitionEnded = vectors.close(waitingUpTo: max(0, timeout - Date().timeIntervalSince(start)))
        // The writer has stopped (its last group applied to the index): the table and the index
        // agree, at the stamp read now.
        if savingVectors && partitionEnded && Date() < saveDeadline { saveVectorIndex(deadline: saveDeadline) }
        readers.lock()
        retired = true
        if interruptingReads {
            for db in checkedOut.values { sqlite3_interrupt(db.handle) }
        }
        let deadline = start.addingTimeInterval(timeout)
        while checkedOutReaders > 0, readers.wait(until: deadline) {}
        let drained = checkedOutReaders == 0
        let idle = idleReaders
        idleReaders.removeAll()
        openReaders -= idle.count
        readers.unlock()
        for db in idle { db.close() }
        // The writer thread has stopped (close waited for it): its statements and connection are ours.
        preparedWriterStatements = nil
        rankWriter.close()
        writer.close()
        return drained
    }

    deinit { close() }
}

/// A one-shot result handed from the writer thread to a blocked caller.
final class ResultBox: @unchecked Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private var result: Result<ApplyResult, SearchlightError>?
    func set(_ r: Result<ApplyResult, SearchlightError>) {
        result = r
        semaphore.signal()
    }
    func wait() -> Result<ApplyResult, SearchlightError> {
        BlockingCheck.blocking("IndexStore: waiting for the group commit")
        semaphore.wait()
        return result!
    }
}

/// The scans of `item_vectors` a store ran to count its vectors (`IndexStore.vectorCountScans`;
/// tests read `value`), and the last one's counts with the vector epoch they were read at.
final class ScanTally: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    private var last: (epoch: Int64, counts: (vectors: Int, refined: Int))?
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
    func keep(_ counts: (vectors: Int, refined: Int), at epoch: Int64) { lock.withLock { last = (epoch, counts) } }
    func counts(at epoch: Int64) -> (vectors: Int, refined: Int)? { lock.withLock { last?.epoch == epoch ? last?.counts : nil } }
}
