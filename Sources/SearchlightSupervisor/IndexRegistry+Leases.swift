#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightStore
import SearchlightWire

/// The stores a piece of work uses (a client call, a maintenance step, a status line): none of
/// them is closed by the open-index bound until `release()`. One user at a time.
final class IndexLeases: @unchecked Sendable {
    // @unchecked: `held` (guarded by `lock`) keeps the registry's OpenIndex records, which only the registry's lock may change.
    private let registry: IndexRegistry
    private let lock = NSLock()
    private var held: [(IndexRegistry.Key, IndexRegistry.OpenIndex)] = []

    init(_ registry: IndexRegistry) { self.registry = registry }

    fileprivate func add(_ key: IndexRegistry.Key, _ open: IndexRegistry.OpenIndex) {
        lock.withLock { held.append((key, open)) }
    }

    /// Gives every store back; the registry may close the idle ones now. Idempotent.
    func release() {
        let all = lock.withLock {
            defer { held.removeAll() }
            return held
        }
        if !all.isEmpty { registry.release(all) }
    }

    deinit { release() }
}

/// The open-index bound (DESIGN §6 asks nothing of it; issue 13 item 5 does): at most `maxOpen`
/// stores stay open. Past it, the least recently leased store that nothing holds is closed
/// outside the lock, its file marked as settling meanwhile so that nobody opens, moves or
/// replaces it until its connections are gone. Never closed:
/// - a store with a lease (a call, a maintenance step, a migration or recovery step using it);
/// - a store with a write queued or running, a read in progress or a vector partition build under
///   way (`IndexStore.isIdle`);
/// - an index with a shadow (migration) or a condition (migrating, recovering), or whose store
///   found damage (recovery diagnoses that very store);
/// - shadows themselves (not in `open`).
/// Open batches live in their session, not in the store, so closing a store loses none. When
/// every open store is held, the bound is exceeded until leases come back (a soft bound: a call
/// never waits for another to finish), then closed down to it.
extension IndexRegistry {
    /// Under the lock: leases `o` to `lease`.
    func take(_ o: OpenIndex, _ key: Key, into lease: IndexLeases) {
        useClock += 1
        o.lastUse = useClock
        o.leases += 1
        lease.add(key, o)
    }

    /// Leases given back; closes what the bound then allows.
    fileprivate func release(_ leases: [(Key, OpenIndex)]) {
        let evicted: [(Key, IndexStore)] = lock.withLock {
            for (_, o) in leases { o.leases -= 1 }
            return openStores.count > maxOpen ? evictLocked() : []
        }
        closeEvicted(evicted)
    }

    /// Under the lock: takes the least recently used closable stores out of `open` until at
    /// most `maxOpen` remain (or none is closable), marking their files as settling. The caller
    /// closes them with `closeEvicted` once the lock is released.
    func evictLocked() -> [(Key, IndexStore)] {
        var victims: [(Key, IndexStore)] = []
        while openStores.count > maxOpen {
            var oldest: (key: Key, use: UInt64)?
            for (key, o) in openStores where o.leases == 0 && closable(key, o) && (oldest == nil || o.lastUse < oldest!.use) {
                oldest = (key, o.lastUse)
            }
            guard let victim = oldest?.key, let o = openStores.removeValue(forKey: victim) else { break }
            settling.insert(victim)
            victims.append((victim, o.store))
        }
        return victims
    }

    private func closable(_ key: Key, _ o: OpenIndex) -> Bool {
        shadows[key] == nil && !hasConditionLocked(key) && o.store.detectedDamage == nil && o.store.isIdle
    }

    /// Closes stores taken out by `evictLocked` (without the lock: a close checkpoints the WAL),
    /// keeping what `admin.status` shows of them.
    func closeEvicted(_ evicted: [(Key, IndexStore)]) {
        for (key, store) in evicted {
            let summary = try? store.summary()
            // Not saved: an eviction runs on the request path of the query that evicted (its
            // lease's release), and writing a 1M index's vectors (445 MB) there would make each
            // federated query over more indexes than the bound pay for it. The daemon's stop saves.
            store.shutDown(savingVectors: false)
            log.debug("index closed", ["bundle": key.bundle, "index": key.index.isEmpty ? "_default" : key.index, "reason": "open-index bound"])
            lock.withLock {
                settling.remove(key)
                if let summary { closedSummaries[key] = summary }
                lock.broadcast()
            }
        }
    }

    /// Under the lock: waits while the file of `key` is being closed or peeked at.
    func waitUntilSettled(_ key: Key) {
        while settling.contains(key) { lock.wait() }
    }

    /// How many stores are open now (shadows aside).
    var openCount: Int { lock.withLock { openStores.count } }

    /// What `admin.status` shows of an index, without opening it: the open store's own figures
    /// (and the store, for its state), the figures recorded when it was closed, or those read
    /// from the file by one read-only connection.
    func summary(bundle: String, index: String) throws(SearchlightError) -> (summary: IndexSummary, store: IndexStore?) {
        let (summary, store) = try summary(bundle: bundle, index: index, ofOpenStore: true)
        guard let summary else { throw SearchlightError(.internalError, "no summary of index \(index) of \(bundle)") }
        return (summary, store)
    }

    /// The figures of a closed index, as `summary` reads them without opening it; nil, read
    /// from nothing, when it is open: its store has its own figures (`IndexStore.vectorCounts`),
    /// and its summary would scan tables the caller does not need (the refinement share).
    func closedSummary(bundle: String, index: String) throws(SearchlightError) -> IndexSummary? {
        let (summary, store) = try summary(bundle: bundle, index: index, ofOpenStore: false)
        return store == nil ? summary : nil
    }

    private func summary(bundle: String, index: String, ofOpenStore: Bool) throws(SearchlightError) -> (summary: IndexSummary?, store: IndexStore?) {
        let key = Key(bundle: bundle, index: index)
        let lease = IndexLeases(self)
        defer { lease.release() }
        let known: (IndexStore?, IndexSummary?) = lock.withLock {
            waitUntilSettled(key)
            if let o = openStores[key] {
                take(o, key, into: lease)
                return (o.store, nil)
            }
            if let s = closedSummaries[key] { return (nil, s) }
            settling.insert(key)
            return (nil, nil)
        }
        if let store = known.0 { return (ofOpenStore ? try store.summary() : nil, store) }
        if let s = known.1 { return (s, nil) }
        defer {
            lock.withLock {
                settling.remove(key)
                lock.broadcast()
            }
        }
        let s = try IndexStore.peekSummary(at: path(bundle: bundle, index: index))
        lock.withLock { closedSummaries[key] = s }
        return (s, nil)
    }

    /// Descriptors an open store may hold: the writer's database, WAL and shared memory, and
    /// each reader's database and WAL.
    static func descriptorsPerStore(_ options: StoreOptions) -> Int { 3 + 2 * options.maxReaders }

    /// The default bound: 256 stores, or as many as the open-file limit leaves room for beside
    /// `connections` client connections and 64 descriptors of the daemon's own (at least 16).
    static func defaultMaxOpen(options: StoreOptions, connections: Int) -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < rlim_t(Int32.max) else { return 256 }
        let room = (Int(limit.rlim_cur) - connections - 64) / descriptorsPerStore(options)
        return min(256, max(16, room))
    }
}
