import Foundation
import Synchronization
import SearchlightStore
import SearchlightWire

/// The open index stores, one per (bundle, index name), at
/// `<state>/indexes/<bundle>/<index or _default>.sqlite` (DESIGN §2). Opened on first use, and
/// closed again when more than `maxOpen` are open (the least recently used idle one goes first;
/// IndexRegistry+Leases.swift): each open store holds a writer thread and up to
/// `StoreOptions.maxReaders` + 1 connections, so the bound caps the daemon's threads and
/// descriptors however many bundles exist. Whoever uses a store holds a lease on it
/// (`IndexLeases`) for as long as it does; a leased store is never closed under it.
final class IndexRegistry: @unchecked Sendable {
    // @unchecked: the open stores, settling keys and summaries are guarded by `lock`, an NSCondition opens wait on while a file settles.
    struct Key: Hashable {
        var bundle: String
        var index: String
    }

    /// An open store and what the bound needs to know of it.
    final class OpenIndex {
        let store: IndexStore
        /// Leases held on it (guarded by the registry's lock).
        var leases = 0
        /// When it was last leased, on the registry's use clock.
        var lastUse: UInt64 = 0
        init(_ store: IndexStore) { self.store = store }
    }

    let root: String
    let options: StoreOptions
    let log: Logger
    /// Open stores past which idle ones are closed.
    let maxOpen: Int
    /// Indexes held open for a whole federated query (`IndexSnapshot`), over every query at once:
    /// at most half the bound, so that many queries together (one user's, naming a different
    /// index each) cannot hold the open stores past it. Past it a query leases an index per phase.
    private let snapshotHolds = Mutex(0)
    var maxSnapshotHolds: Int { max(1, maxOpen / 2) }

    /// Takes one of the held-for-a-query places, if one is free; give it back with `releaseSnapshotHold`.
    func reserveSnapshotHold() -> Bool {
        snapshotHolds.withLock { held in
            guard held < maxSnapshotHolds else { return false }
            held += 1
            return true
        }
    }

    func releaseSnapshotHold() { snapshotHolds.withLock { $0 -= 1 } }

    /// The held-for-a-query places taken now (`admin.status`'s `federatedHolds`).
    var snapshotHoldsTaken: Int { snapshotHolds.withLock { $0 } }

    /// Guards every table below; waited on while a file is being closed or read outside it.
    let lock = NSCondition()
    var openStores: [Key: OpenIndex] = [:]
    var useClock: UInt64 = 0
    /// Indexes whose file is being closed or peeked at without the lock: nobody opens, moves or
    /// replaces that file until it is done (`waitUntilSettled`).
    var settling: Set<Key> = []
    /// What `admin.status` shows for indexes that are not open (recorded when one is closed).
    var closedSummaries: [Key: IndexSummary] = [:]
    /// `closeAll` ran (guarded by `lock`).
    var closedForStop = false
    private var conditions: [Key: IndexCondition] = [:]
    /// While an index is rebuilt into a shadow file: that file's store, written with the open one
    /// (IndexRegistry+Swap.swift). Shadows are never closed by the bound.
    var shadows: [Key: IndexStore] = [:]
    /// Why a shadow missed a donation (it must be refilled before it may replace the file).
    var shadowFaults: [Key: String] = [:]
    /// Client calls run inside it; `replace` waits for the calls in progress and holds new ones
    /// back until the new file is open, so no call ever meets a closed store.
    let gate = ServiceGate()
    /// How long `replace` waits for reads in progress on the stores it closes
    /// (`IndexStore.shutDown`): then the shadow swap refuses, a plain replace goes on (see
    /// `replaceLocked`). 10 s; a test seam.
    var shutDownTimeout: TimeInterval = 10
    /// Called before an index opened by `store` purges its expired items, outside the lock (a
    /// test seam: it holds the purge to show that other bundles do not wait for it).
    var willPurgeOnOpen: (@Sendable (Key) -> Void)?

    init(stateDirectory: String, options: StoreOptions, maxOpen: Int = 256, log: Logger) throws {
        root = stateDirectory + "/indexes"
        self.options = options
        self.maxOpen = max(1, maxOpen)
        self.log = log
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    func path(bundle: String, index: String) -> String { "\(root)/\(bundle)/\(Names.fileName(index: index))" }

    /// Whether a bundle has files (its directory exists), open or not.
    func bundleExists(_ bundle: String) -> Bool { FileManager.default.fileExists(atPath: "\(root)/\(bundle)") }

    /// Told about damage (DESIGN §6 Triggers): found on open (the file was set aside and a fresh
    /// one opened) or at run time (a call or the scrub met it). Set once before serving.
    weak var damageHandler: (any IndexDamageHandler)?

    /// The store served for an index if it is open; never opens one, and leases nothing: for
    /// telling whether the store a call used is still the one served.
    func servedStore(bundle: String, index: String) -> IndexStore? {
        lock.withLock { openStores[Key(bundle: bundle, index: index)]?.store }
    }

    /// The store for a bundle's index, leased to `lease` until it is released. With
    /// `create: false`, nil when it does not exist yet (a query of an index nobody wrote finds
    /// nothing, and creates nothing). A damaged file is set aside by the damage handler and a
    /// fresh one answers at once.
    func store(bundle: String, index: String, create: Bool, lease: IndexLeases) throws(SearchlightError) -> IndexStore? {
        let key = Key(bundle: bundle, index: index)
        var found: IndexDamage?
        var evicted: [(Key, IndexStore)] = []
        var opened: IndexStore?
        // Declared before the lock's defer, so they run after the unlock: the handler may call
        // back, closing a store may take a checkpoint's time, and a purge of many expired items
        // takes seconds, which every other bundle's first call would otherwise wait for (the
        // store is leased to the caller meanwhile, so the bound does not close it under the purge).
        defer { if let found { damageHandler?.damageFound(found) } }
        defer { closeEvicted(evicted) }
        defer {
            if let opened {
                willPurgeOnOpen?(key)
                purgeExpired(opened, key)
            }
        }
        lock.lock()
        defer { lock.unlock() }
        waitUntilSettled(key)
        if let o = openStores[key] {
            take(o, key, into: lease)
            return o.store
        }
        let p = path(bundle: bundle, index: index)
        let existed = FileManager.default.fileExists(atPath: p)
        if !create, !existed { return nil }
        let s: IndexStore
        if existed, let reason = IndexStore.fileDamage(at: p, deep: false) {
            (s, found) = try openFresh(key, path: p, reason: reason, failure: nil)
        } else {
            do {
                s = try IndexStore(path: p, options: options)
            } catch {
                guard existed, let reason = IndexStore.fileDamage(at: p, deep: true) else { throw error }
                (s, found) = try openFresh(key, path: p, reason: reason, failure: error)
            }
        }
        take(install(s, key), key, into: lease)
        log.info("index opened", ["bundle": bundle, "index": index.isEmpty ? "_default" : index, "items": s.count, "open": openStores.count])
        opened = s
        evicted = evictLocked()
        return s
    }

    /// Runs `body` with the store of an index leased (nil as `store` returns it), then releases it.
    func withStore<T>(bundle: String, index: String, create: Bool, _ body: (IndexStore?) throws(SearchlightError) -> T) throws(SearchlightError) -> T {
        let lease = IndexLeases(self)
        defer { lease.release() }
        return try body(try store(bundle: bundle, index: index, create: create, lease: lease))
    }

    /// The file at `path` is damaged and not open: the handler sets it aside, a fresh one replaces it.
    private func openFresh(_ key: Key, path: String, reason: String, failure: SearchlightError?) throws(SearchlightError) -> (IndexStore, IndexDamage) {
        guard let handler = damageHandler else {
            throw failure ?? SearchlightError(.indexUnavailable, "index file \(path) is damaged (\(reason)); move it away and restart searchlightd")
        }
        log.error("index damaged on open", ["bundle": key.bundle, "index": key.index.isEmpty ? "_default" : key.index, "reason": reason])
        let aside = try handler.setAside(path: path, bundle: key.bundle, index: key.index, reason: reason)
        let s = try IndexStore(path: path, options: options)
        return (s, IndexDamage(bundle: key.bundle, index: key.index, reason: reason, store: s, setAside: aside))
    }

    /// Serves `store` for `key` (under the lock), telling the damage handler of damage met at run time.
    @discardableResult
    private func install(_ store: IndexStore, _ key: Key) -> OpenIndex {
        store.onDamage = { [weak self, weak store] error in
            // Off this thread: it may be the writer of a store that `replace` is closing under
            // the lock. Only the store still served is recovered, never one already replaced.
            guard let self, let store else { return }
            DispatchQueue.global().async {
                guard self.lock.withLock({ self.openStores[key]?.store === store }) else { return }
                self.damageHandler?.damageFound(IndexDamage(bundle: key.bundle, index: key.index, reason: error.message, store: store, setAside: nil))
            }
        }
        let o = OpenIndex(store)
        useClock += 1
        o.lastUse = useClock
        openStores[key] = o
        closedSummaries[key] = nil
        return o
    }

    /// Replaces the file of an open (or closed) index while nobody uses it: closes the open store
    /// (waiting for reads in progress), runs `swap` with no connection open (it moves files at
    /// the index's path), opens what is then at the path and serves it. Client calls (the gate)
    /// and calls to the registry wait meanwhile: none meets a closed store. When `swap` throws,
    /// the file left at the path is served again and the error rethrown. The one primitive of
    /// recovery (quarantine) and migration (shadow swap).
    @discardableResult
    func replace(bundle: String, index: String, _ swap: (_ path: String) throws(SearchlightError) -> Void) throws(SearchlightError) -> IndexStore {
        try gate.exclusively { () throws(SearchlightError) -> IndexStore in
            try replaceLocked(bundle: bundle, index: index, swap)
        }
    }

    private func replaceLocked(bundle: String, index: String, _ swap: (_ path: String) throws(SearchlightError) -> Void) throws(SearchlightError) -> IndexStore {
        let key = Key(bundle: bundle, index: index)
        let p = path(bundle: bundle, index: index)
        lock.lock()
        defer { lock.unlock() }
        waitUntilSettled(key)
        if let old = openStores.removeValue(forKey: key), !old.store.shutDown(timeout: shutDownTimeout) {
            // A read still holds a connection to the old file. Safe to go on, unlike a shadow's
            // (IndexRegistry+Swap.swift): `swap` renames a file over the path or moves this one
            // away, and SQLite neither checkpoints nor deletes `-wal`/`-shm` by name on the last
            // close of a file that has moved (`databaseIsUnmoved`); the read ends on the old
            // snapshot. IndexReplaceTests pins this.
            log.warning("index replaced while a read was still running", ["bundle": bundle, "index": index.isEmpty ? "_default" : index])
        }
        var swapError: SearchlightError?
        do { try swap(p) } catch { swapError = error }
        let s = try IndexStore(path: p, options: options)
        install(s, key)
        if let swapError { throw swapError }
        return s
    }

    private func purgeExpired(_ store: IndexStore, _ key: Key) {
        do {
            let n = try store.purgeExpired()
            if n > 0 { log.info("expired items purged", ["bundle": key.bundle, "index": key.index.isEmpty ? "_default" : key.index, "items": n]) }
        } catch {
            log.warning("purging expired items failed", ["bundle": key.bundle, "error": error.message])
        }
    }

    func bundles() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).filter(Names.validBundle).sorted()
    }

    /// Index names of a bundle, from its files ("" is the default index).
    func indexes(of bundle: String) -> [String] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: "\(root)/\(bundle)")) ?? []
        return files.filter { $0.hasSuffix(".sqlite") }.map { String($0.dropLast(7)) }
            .map { $0 == "_default" ? "" : $0 }.filter(Names.validStoredIndex).sorted()
    }

    /// Closes and deletes every index file of a bundle.
    func erase(bundle: String) -> Int {
        // Held throughout, so nobody reopens a file while it is being deleted.
        lock.lock()
        defer { lock.unlock() }
        while settling.contains(where: { $0.bundle == bundle }) { lock.wait() }
        let doomed = openStores.filter { $0.key.bundle == bundle }
        for key in doomed.keys { openStores[key] = nil }
        // A rebuild in progress loses its shadow (its file goes with the directory) and ends.
        let shadowed = shadows.filter { $0.key.bundle == bundle }
        for key in shadowed.keys { shadows[key] = nil }
        for store in shadowed.values { store.shutDown() }
        conditions = conditions.filter { $0.key.bundle != bundle }
        closedSummaries = closedSummaries.filter { $0.key.bundle != bundle }
        for o in doomed.values { o.store.close() }
        // A partition save under way stops at its next check and removes its .tmp: waited for,
        // so the directory's removal does not meet a file appearing in it.
        for o in doomed.values { o.store.waitForBackgroundFiles(timeout: shutDownTimeout) }
        let dir = "\(root)/\(bundle)"
        let count = indexes(of: bundle).count
        try? FileManager.default.removeItem(atPath: dir)
        return count
    }

    /// What is being done to an index beyond plain service (DESIGN §6 Triggers): nil when it is ready.
    func condition(bundle: String, index: String) -> IndexCondition? {
        lock.withLock { conditions[Key(bundle: bundle, index: index)] }
    }

    /// Under the lock: whether an index is being rebuilt (the bound never closes it meanwhile).
    func hasConditionLocked(_ key: Key) -> Bool { conditions[key] != nil }

    /// How many indexes are in each phase (migrating, recovering, filling), for the systemd status line.
    var conditionCounts: [IndexCondition.Phase: Int] {
        lock.withLock { conditions.values.reduce(into: [:]) { $0[$1.phase, default: 0] += 1 } }
    }

    /// The indexes of a bundle that have a condition (one being filled may have no file yet).
    func conditionedIndexes(of bundle: String) -> [String] {
        lock.withLock { conditions.keys.filter { $0.bundle == bundle }.map(\.index) }
    }

    /// The bundles with an index that has a condition.
    func conditionedBundles() -> Set<String> {
        lock.withLock { Set(conditions.keys.map(\.bundle)) }
    }

    /// Records (or, with nil, clears) what is being done to an index; `status` and queries read it.
    func setCondition(_ condition: IndexCondition?, bundle: String, index: String) {
        lock.withLock { conditions[Key(bundle: bundle, index: index)] = condition }
    }

    /// Set by `closeAll` (the daemon's stop): background work must not reopen a store after it.
    var isClosedForStop: Bool { lock.withLock { closedForStop } }

    /// Seconds the daemon's stop spends saving vector indexes at most (`closeAll`).
    static let stopSaveBudget: TimeInterval = 10

    /// Closes every store for the daemon's stop. Vector indexes are saved until `saveUntil` (the
    /// supervisor's: well before the forced stop) or for `stopSaveBudget` seconds, whichever ends
    /// first; a save still running then is not put in place.
    func closeAll(saveUntil: Date = .distantFuture) {
        lock.lock()
        closedForStop = true
        while !settling.isEmpty { lock.wait() }
        let stores = openStores.values.map(\.store), shadowStores = Array(shadows.values)
        openStores.removeAll()
        shadows.removeAll()
        lock.unlock()
        // Every connection closed, not only the writer drained: a store that background work
        // (refinement) or a query still held kept its connections open to the process's exit,
        // its WAL left behind (SignalTests). Reads in progress get one shared grace period;
        // one still running after it closes its connection when it returns.
        let deadline = Date().addingTimeInterval(5)
        // The loaded vector indexes saved beside their files, for the first query after the
        // restart, while the saves so far took less than `Self.stopSaveBudget` (a 1M index's
        // takes 0.4–1.3 s): past it the rest close unsaved, so that many large indexes do not
        // outlast systemd's stop timeout (a store not saved loads from its table next time).
        // A shadow never saves (its files are replaced or removed).
        let saveDeadline = min(saveUntil, Date().addingTimeInterval(Self.stopSaveBudget))
        for s in stores { s.shutDown(timeout: max(0, deadline.timeIntervalSinceNow), savingVectors: true, saveDeadline: saveDeadline) }
        for s in shadowStores { s.shutDown(timeout: max(0, deadline.timeIntervalSinceNow), savingVectors: false) }
    }
}

/// Damage found in an index: on open (`setAside` names the damaged file, now in the quarantine,
/// and `store` is the fresh one) or at run time (`store` is the damaged one, still open).
struct IndexDamage: Sendable {
    var bundle: String
    var index: String
    var reason: String
    var store: IndexStore
    var setAside: String?
}

/// Acts on damage the registry finds (`IndexRecovery`).
protocol IndexDamageHandler: AnyObject, Sendable {
    /// Moves a damaged, closed index file out of the way; returns where it went. Called under
    /// the registry's lock: it must not call the registry.
    func setAside(path: String, bundle: String, index: String, reason: String) throws(SearchlightError) -> String
    /// Starts recovery; called with no lock held, from any thread (it must not block).
    func damageFound(_ damage: IndexDamage)
}

/// An index that is being (re)built: by migration (queries answer from the old file, complete), by
/// recovery (queries answer from a fresh file that is still being filled: `incomplete: true`), or
/// by its extension's initial fill (`filling`: incomplete too, until the reindex-all is acknowledged).
struct IndexCondition: Sendable {
    enum Phase: String, Sendable {
        case migrating, recovering, filling
    }

    var phase: Phase
    /// Why, in words for status and logs ("store format 1 -> 2", "quick_check: …").
    var reason: String
    var since: Date
    /// The journaled reindex-all filling the new file, when an extension does it (for progress).
    var requestID: Int64?

    init(_ phase: Phase, reason: String, since: Date = Date(), requestID: Int64? = nil) {
        self.phase = phase
        self.reason = reason
        self.since = since
        self.requestID = requestID
    }

    /// Results from an index in this condition may be missing items.
    var incomplete: Bool { phase == .recovering || phase == .filling }
}
