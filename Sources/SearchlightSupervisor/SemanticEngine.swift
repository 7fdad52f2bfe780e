import Foundation
import SearchlightSemantic
import SearchlightStore
import SearchlightWire
import Synchronization

/// The daemon's semantic model (DESIGN §11, Docs/SemanticSearch.md): the static token table,
/// loaded at start (4.5 MB; it embeds every donated item and, while the transformer is not
/// loaded, the queries), and the transformer, loaded by `query.prepare` and unloaded after
/// `--model-idle` seconds without a query so that an idle daemon stays small.
final class SemanticEngine: Sendable {
    let directory: ModelDirectory
    /// nil: semantic search is unavailable (`unavailableReason` says why and what to do).
    let staticEncoder: StaticEncoder?
    let unavailableReason: String?
    private let idleSeconds: Double
    private let log: Logger
    /// The transformer while it is loaded, and what its idle unload needs.
    private struct Loaded {
        var transformer: TransformerEncoder?
        var lastUse = Date()
        var transformerError: String?
        var timer: DispatchSourceTimer?
    }

    private let lock = Mutex(Loaded())
    /// The threads that embed queries with the transformer, fair between uids (`QueryCompute`).
    let compute = QueryCompute()

    init(directory: ModelDirectory, idleSeconds: Double, log: Logger) {
        self.directory = directory
        self.idleSeconds = idleSeconds
        self.log = log
        // OpenBLAS's own threads off (it is a library-wide setting): the daemon decides how many
        // threads compute (`compute`, refinement's parts); OpenBLAS's threads, called from
        // several of them at once, spun in `exec_blas_async_wait` (issue 29, D2).
        TransformerEncoder.setThreads(1)
        let file = directory.staticTableFile
        if !FileManager.default.fileExists(atPath: file) {
            staticEncoder = nil
            unavailableReason = "the static table \(file) is missing; run `\(ModelDirectory.installCommand)` in the source tree "
                + "(or `make model MODEL_DIR=\(directory.path)`), or point --model-dir at the model folder"
        } else {
            do {
                staticEncoder = try StaticEncoder(file: file)
                unavailableReason = nil
            } catch {
                staticEncoder = nil
                unavailableReason = "the static table \(file) cannot be read (\(error.message)); run `\(ModelDirectory.installCommand)` again"
            }
        }
        if let unavailableReason {
            log.notice("semantic search unavailable", ["reason": unavailableReason])
        } else {
            log.info("semantic search ready", ["model_dir": directory.path, "transformer": directory.hasTransformer])
        }
    }

    /// Starts the idle check (every few seconds; a tenth of the idle time, 1 to 30 s).
    func startIdleUnload() {
        let period = min(30, max(1, idleSeconds / 10))
        lock.withLock { state in
            let t = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
            t.schedule(deadline: .now() + period, repeating: period)
            t.setEventHandler { [weak self] in self?.unloadIfIdle() }
            t.resume()
            state.timer = t
        }
    }

    func stop() {
        lock.withLock { $0.timer?.cancel(); $0.timer = nil }
        compute.stop()
    }

    var isLoaded: Bool { lock.withLock { $0.transformer != nil } }

    /// `unavailable` (no static table), `loaded` (the transformer embeds the queries) or
    /// `unloaded` (the static table does).
    var status: JSONValue {
        var o: [String: JSONValue] = ["modelDirectory": .string(directory.path)]
        let (loaded, error) = lock.withLock { ($0.transformer != nil, $0.transformerError) }
        if let unavailableReason {
            o["state"] = "unavailable"
            o["reason"] = .string(unavailableReason)
        } else if loaded {
            o["state"] = "loaded"
        } else {
            o["state"] = "unloaded"
            if let reason = error ?? directory.unavailableReason { o["reason"] = .string(reason) }
        }
        return .object(o)
    }

    /// Loads the transformer (`query.prepare`). Without its files, or when they do not load,
    /// `status` says why (the reason names the command that installs them); queries then embed
    /// with the static table. Not an error: lexical and static-table search work on.
    func prepare() {
        guard staticEncoder != nil, directory.hasTransformer else { return }
        if isLoaded {
            lock.withLock { $0.lastUse = Date() }
            return
        }
        let started = Date()
        do {
            // One thread for a query's products: the daemon serves several queries at once.
            let encoder = try TransformerEncoder(directory: directory, queryThreads: 1)
            lock.withLock {
                if $0.transformer == nil { $0.transformer = encoder }
                $0.transformerError = nil
                $0.lastUse = Date()
            }
            log.info("semantic model loaded", ["model_dir": directory.path, "elapsed_s": String(format: "%.3f", Date().timeIntervalSince(started))])
        } catch {
            let reason = "the model in \(directory.path) does not load (\(error.message)); run `\(ModelDirectory.installCommand)` again"
            lock.withLock { $0.transformerError = reason }
            log.warning("semantic model not loaded", ["reason": reason])
        }
    }

    /// The transformer for background refinement: loaded (as by `query.prepare`) when its files
    /// are there; nil otherwise.
    func transformerForRefinement() -> TransformerEncoder? {
        prepare()
        return lock.withLock { $0.transformer }
    }

    /// Threads of one refinement batch (`TransformerEncoder.embed(_:threads:)`): every core, up to
    /// 4. Refinement runs only while the machine is idle and stops at the first batch after the
    /// throttle leaves normal, so the cores it takes are cores nobody else wanted.
    static let refinementThreads = max(1, min(4, ProcessInfo.processInfo.activeProcessorCount))

    /// The CPU time of refinement's threads, live: without PSI the throttle subtracts its share
    /// from the load average (`LoadMonitor`, `OwnLoad`), or refinement would throttle itself.
    let refinementWork = WorkMeter()

    /// Refinement is using the transformer: the idle unload waits.
    func touch() { lock.withLock { $0.lastUse = Date() } }

    /// The query's vector: the transformer's when it is loaded, else the static table's (the same
    /// space: Docs/SemanticSearch.md measured the mixed case), with which of the two made it (the
    /// fusion's constants depend on it: `SemanticRequest.tuning`). nil when unavailable.
    ///
    /// The transformer's embedding runs as `owner`'s job on the compute threads (`QueryCompute`:
    /// one at a time per uid, the rest queued) and answers `cancelled` once `budget` says stop;
    /// the static table's (microseconds, no matrix products) on the caller's thread.
    func embedQuery(_ text: String, owner: UInt32, budget: QueryBudget) throws(SearchlightError) -> (vector: [Float], encoder: QueryEncoder)? {
        let t: TransformerEncoder? = lock.withLock {
            if $0.transformer != nil { $0.lastUse = Date() }
            return $0.transformer
        }
        if let t {
            let failure = FailureBox()
            do throws(SearchlightError) {
                let vector = try compute.run(owner: owner, budget: budget) { shouldStop in
                    do throws(SemanticError) {
                        return try t.embed(text, shouldStop: shouldStop)
                    } catch {
                        failure.error.withLock { $0 = error }
                        return nil
                    }
                }
                return (vector, .transformer)
            } catch {
                // The model file could not be read (it changed after loading): the transformer is
                // dropped and the static table answers; `query.prepare` loads the file again.
                guard let reason = failure.error.withLock({ $0 }) else { throw error }
                transformerFailed(t, reason)
            }
        }
        return staticEncoder.map { ($0.embed(text), .staticTable) }
    }

    private final class FailureBox: Sendable {
        let error = Mutex<SemanticError?>(nil)
    }

    /// `encoder` could not read its model file (it was changed or truncated after loading): it is
    /// unloaded, and `status` says why until a `query.prepare` loads the model again.
    func transformerFailed(_ encoder: TransformerEncoder, _ error: SemanticError) {
        let reason = "the model in \(directory.path) failed after loading (\(error.message)); run `\(ModelDirectory.installCommand)` again"
        // Once per loaded encoder: every query or batch in flight with it fails the same way.
        let dropped: Bool = lock.withLock {
            guard $0.transformer === encoder else { return false }
            $0.transformer = nil
            $0.transformerError = reason
            return true
        }
        if dropped { log.warning("semantic model unloaded after a failure", ["reason": reason]) }
    }

    /// The vector side of a user query at `weight`: the query embedded once (`embedQuery`) for
    /// every index it searches; each index then picks the constants for its own share of refined
    /// vectors (`SemanticRequest.tuning`). nil when semantic search is unavailable.
    func request(_ text: String, weight: Double, owner: UInt32, budget: QueryBudget) throws(SearchlightError) -> SemanticRequest? {
        try embedQuery(text, owner: owner, budget: budget).map { SemanticRequest(vector: $0.vector, weight: weight, encoder: $0.encoder) }
    }

    func unloadIfIdle(now: Date = Date()) {
        let unloaded: Bool = lock.withLock {
            guard $0.transformer != nil, now.timeIntervalSince($0.lastUse) >= idleSeconds else { return false }
            $0.transformer = nil
            return true
        }
        if unloaded {
            log.info("semantic model unloaded", ["idle_s": Int(idleSeconds)])
        }
    }
}
