import Foundation
import SearchlightStore
import SearchlightWire

/// The open index stores, one per (bundle, index name), at
/// `<state>/indexes/<bundle>/<index or _default>.sqlite` (DESIGN §2). Opened on first use.
final class IndexRegistry: @unchecked Sendable {
    struct Key: Hashable {
        var bundle: String
        var index: String
    }

    let root: String
    let options: StoreOptions
    let log: Logger
    private let lock = NSLock()
    private var stores: [Key: IndexStore] = [:]
    private var conditions: [Key: IndexCondition] = [:]

    init(stateDirectory: String, options: StoreOptions, log: Logger) throws {
        root = stateDirectory + "/indexes"
        self.options = options
        self.log = log
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    func path(bundle: String, index: String) -> String { "\(root)/\(bundle)/\(Names.fileName(index: index))" }

    /// The store for a bundle's index. With `create: false`, nil when it does not exist yet
    /// (a query of an index nobody wrote finds nothing, and creates nothing).
    func store(bundle: String, index: String, create: Bool) throws(SearchlightError) -> IndexStore? {
        let key = Key(bundle: bundle, index: index)
        lock.lock()
        defer { lock.unlock() }
        if let s = stores[key] { return s }
        let p = path(bundle: bundle, index: index)
        if !create, !FileManager.default.fileExists(atPath: p) { return nil }
        let s = try IndexStore(path: p, options: options)
        stores[key] = s
        log.info("index opened", ["bundle": bundle, "index": index.isEmpty ? "_default" : index, "items": s.count])
        purgeExpired(s, key)
        return s
    }

    /// Deletes expired items of every open index (they are invisible already; this reclaims them).
    func purgeExpired() {
        let open = lock.withLock { stores }
        for (key, store) in open { purgeExpired(store, key) }
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
            .map { $0 == "_default" ? "" : $0 }.filter(Names.validIndex).sorted()
    }

    /// Closes and deletes every index file of a bundle.
    func erase(bundle: String) -> Int {
        // Held throughout, so nobody reopens a file while it is being deleted.
        lock.lock()
        defer { lock.unlock() }
        let doomed = stores.filter { $0.key.bundle == bundle }
        for key in doomed.keys { stores[key] = nil }
        for store in doomed.values { store.close() }
        let dir = "\(root)/\(bundle)"
        let count = indexes(of: bundle).count
        try? FileManager.default.removeItem(atPath: dir)
        return count
    }

    /// What is being done to an index beyond plain service (DESIGN §6 Triggers): nil when it is ready.
    func condition(bundle: String, index: String) -> IndexCondition? {
        lock.withLock { conditions[Key(bundle: bundle, index: index)] }
    }

    /// Records (or, with nil, clears) what is being done to an index; `status` and queries read it.
    func setCondition(_ condition: IndexCondition?, bundle: String, index: String) {
        lock.withLock { conditions[Key(bundle: bundle, index: index)] = condition }
    }

    func closeAll() {
        lock.lock()
        let all = stores
        stores.removeAll()
        lock.unlock()
        for s in all.values { s.close() }
    }
}

/// An index that is being rebuilt: by migration (queries answer from the old file, complete) or by
/// recovery (queries answer from a fresh file that is still being filled: `incomplete: true`).
struct IndexCondition: Sendable {
    enum Phase: String, Sendable {
        case migrating, recovering
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
    var incomplete: Bool { phase == .recovering }
}
