import Foundation
import Synchronization

/// Keeps an app's SQLite database in its Searchlight index (NSCoreDataCoreSpotlightDelegate for
/// SQLite files). Two lines:
///
/// ```swift
/// let delegate = try SQLiteSpotlightDelegate(databaseAt: storeURL, model: model)
/// try await delegate.startSpotlightIndexing()
/// ```
///
/// From then on, every row inserted, updated or deleted in the model's tables, by this process or
/// any other (the `sqlite3` shell, a Python script), reaches the index: triggers the delegate
/// installs append each change to `searchlight_history`, and the delegate indexes that history
/// in batches whose client state is the last token applied (Docs/StoreDelegate.md).
///
/// Subclass to customise: override `attributeSet(for:)` (nil = do not index that row; a
/// relationship is read with `row.select`), `domainIdentifier()` and `indexName()`.
///
/// The delegate owns its index (`bundleIdentifier`, `indexName()`): it deletes what is there
/// when it rebuilds. Donate anything else to another index name.
open class SQLiteSpotlightDelegate: @unchecked Sendable {
    public let databaseURL: URL
    public let model: SpotlightModel
    /// The bundle whose index the delegate writes (an extension writes the index it is handed).
    public let bundleIdentifier: String
    /// The daemon's socket; nil: `SEARCHLIGHT_SOCKET`, then the user daemon's, then the system one's.
    public let socketPath: String?
    /// Without inotify (or on a network file system), how often to look for other processes'
    /// commits (one `PRAGMA data_version`). Set it before `startSpotlightIndexing()`.
    public var fallbackCheckInterval: Duration {
        get { fallback.withLock { $0 } }
        set { fallback.withLock { $0 = newValue } }
    }
    private let fallback = Mutex<Duration>(.seconds(1))

    let worker: DatabaseWorker
    private let progress = IndexingProgress()
    private let running = Mutex<Running?>(nil)
    private let identifier = Mutex<String?>(nil)

    private struct Running: Sendable {
        var monitor: ChangeMonitor
        var index: SearchableIndex
        var task: Task<Void, Never>
        /// Bumped at each start, so that a stale task's end does not clear a newer run.
        var generation: UUID
    }

    /// A delegate for the database at `url` (which the app creates) and its `model`.
    /// `bundleIdentifier` defaults to `SEARCHLIGHT_BUNDLE_IDENTIFIER`, then the executable's name.
    public init(databaseAt url: URL, model: SpotlightModel, bundleIdentifier: String? = nil, socketPath: String? = nil) throws {
        try model.validate()
        let environment = ProcessInfo.processInfo.environment
        let bundle = bundleIdentifier ?? environment[ExtensionEnvironment.bundleIdentifier]
            ?? URL(fileURLWithPath: CommandLine.arguments.first ?? "").lastPathComponent
        guard !bundle.isEmpty else { throw DelegateError.noBundleIdentifier }
        databaseURL = url.standardizedFileURL
        self.model = model
        self.bundleIdentifier = bundle
        self.socketPath = socketPath
        worker = DatabaseWorker(path: databaseURL.path)
    }

    deinit {
        if let running = running.withLock({ $0 }) {
            running.monitor.stop()
            running.task.cancel()
        }
    }

    // MARK: - Customising

    /// The searchable attributes of a row; nil means "do not index it" (a previously indexed
    /// item of that row is deleted). The default maps the model's attributes
    /// (`row.modelAttributes`). Called on the delegate's database thread, with the row read on
    /// the snapshot of the history being indexed; `row.select` reads more of that snapshot.
    open func attributeSet(for row: Row) throws -> AttributeSet? {
        row.modelAttributes
    }

    /// The domain of every item (`deleteSearchableItems(withDomainIdentifiers:)`); default: the
    /// store identifier.
    open func domainIdentifier() -> String {
        storeIdentifier ?? "searchlight-sqlite"
    }

    /// The index the delegate writes in its bundle; default: the bundle's default index (`""`).
    open func indexName() -> String { "" }

    /// A UUID the delegate keeps in the database (`searchlight_meta`), known once indexing started
    /// or a reindex request ran.
    public var storeIdentifier: String? { identifier.withLock { $0 } }

    // MARK: - Control

    /// Whether indexing is running (between `startSpotlightIndexing()` and
    /// `stopSpotlightIndexing()`, and until a schema change ends it with an error).
    public var isIndexingEnabled: Bool { running.withLock { $0 != nil } }

    /// Checks the model against the database (a missing table or column throws, naming it),
    /// installs the history triggers if they are not there (idempotent), and starts indexing: the
    /// history not yet in the index now, then every change as it is committed. Returns without
    /// waiting for the daemon: while it is unreachable, history waits in the database.
    public func startSpotlightIndexing() async throws {
        if isIndexingEnabled { return }
        let model = self.model
        let installation = try await worker.perform { db in try HistorySchema.install(model, db) }
        identifier.withLock { $0 = installation.storeIdentifier }
        let monitor = ChangeMonitor(databasePath: databaseURL.path, fallbackInterval: fallbackCheckInterval)
        let index = SearchableIndex(name: indexName(), bundleIdentifier: bundleIdentifier, socketPath: socketPath)
        let processor = HistoryProcessor(delegate: self, index: index, monitor: monitor, progress: progress,
            storeIdentifier: installation.storeIdentifier)
        let generation = UUID()
        let progress = self.progress
        let started: Bool = running.withLock { running in
            guard running == nil else { return false }
            progress.restart()
            // On the worker's thread, not the app's pool (`DatabaseWorker`).
            let task = Task(executorPreference: worker) { [weak self] in
                do {
                    try await processor.run()
                } catch {
                    DelegateLog.warning("indexing stopped", ["store": installation.storeIdentifier, "error": HistoryProcessor.describe(error)])
                    self?.ended(generation, error: error)
                }
            }
            running = Running(monitor: monitor, index: index, task: task, generation: generation)
            return true
        }
        if started {
            monitor.start()
        } else {
            monitor.stop()
        }
    }

    /// Stops indexing after the batch in flight; the history keeps growing in the database and
    /// is indexed at the next start. Waiters of `waitUntilIndexed` get an error.
    public func stopSpotlightIndexing() async {
        guard let current = running.withLock({ state -> Running? in
            defer { state = nil }
            return state
        }) else { return }
        current.monitor.stop()
        current.task.cancel()
        await current.task.value
        await current.index.close()
        progress.end(DelegateError.notIndexing, isFailure: false)
    }

    /// Stops indexing, deletes the index, and removes the history triggers and tables from the
    /// database; the app's tables and rows are untouched. A later start installs them again and
    /// rebuilds the index from the rows.
    public func deleteSpotlightIndex() async throws {
        await stopSpotlightIndexing()
        let index = SearchableIndex(name: indexName(), bundleIdentifier: bundleIdentifier, socketPath: socketPath)
        defer { Task { await index.close() } }
        try await index.deleteAllSearchableItems()
        try await worker.perform { db in try HistorySchema.uninstall(db) }
        await worker.closeConnection()
        identifier.withLock { $0 = nil }
    }

    /// After each history range (or rebuild) this process committed to the index: the store and
    /// the last history token the index covers. A new stream per access, from then on; it ends
    /// with an error when indexing stops with one (a schema change), never otherwise.
    public var indexDidUpdate: AsyncThrowingStream<IndexUpdate, any Error> { progress.subscribe() }

    /// Waits until every change committed to the database before the call is in the index (by
    /// this delegate or by another process on the same store). Throws `DelegateError.timedOut`
    /// (naming what kept it back) after `timeout`, and when indexing stops.
    public func waitUntilIndexed(timeout: Duration? = nil) async throws {
        guard let monitor = running.withLock({ $0?.monitor }) else { throw DelegateError.notIndexing }
        let target = try await worker.perform { db in
            try db.scalar("SELECT max(token) FROM searchlight_history")?.int64Value ?? 0
        }
        monitor.poke()
        try await progress.wait(until: target, timeout: timeout)
    }

    /// The last history token known to be in the index (nil before indexing found it out).
    public var indexedHistoryToken: Int64? { progress.indexedThrough }

    // MARK: - Internals shared with the processor and the extension

    /// The reader that turns rows into items through `attributeSet(for:)`.
    var reader: HistoryReader {
        HistoryReader(model: model) { [self] row in
            guard let attributes = try attributeSet(for: row) else { return nil }
            var item = SearchableItem(uniqueIdentifier: row.uniqueIdentifier, domainIdentifier: domainIdentifier(),
                attributeSet: attributes)
            // The database is the truth: its items stay until their rows go (the index's default
            // 30-day expiration would drop rows that simply did not change).
            item.expirationDate = .distantFuture
            return item
        }
    }

    /// The processor ended with an error (the model no longer fits the schema).
    private func ended(_ generation: UUID, error: any Error) {
        let mine = running.withLock { state -> Running? in
            guard let current = state, current.generation == generation else { return nil }
            state = nil
            return current
        }
        guard let mine else { return }
        mine.monitor.stop()
        progress.end(error, isFailure: true)
        Task { await mine.index.close() }
    }

    func setStoreIdentifier(_ value: String) { identifier.withLock { $0 = value } }
}
