#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import SearchlightSemantic
import SearchlightStore
import SearchlightUnits
import SearchlightWire

/// What every client session shares: configuration, indexes, bundle records, counters.
final class ServiceContext: Sendable {
    let config: Configuration
    let registry: IndexRegistry
    let state: SupervisorState
    let catalog: UnitCatalog
    let journal: RequestJournal
    let events: EventMonitor
    let recovery: IndexRecovery
    let initialFill: InitialFill
    /// Hidden bundles and registered desktop files of the desktop's search (DESIGN §12).
    let desktop: DesktopSettingsStore
    let log: Logger
    /// Semantic search's model: the static table for items and queries, the transformer on demand.
    let semantic: SemanticEngine
    /// Items the desktop found with a vanished `file:` contentURL (`desktop.staleItems`).
    let staleItems = StaleItems()
    let startedAt = Date()
    let daemonUID = getuid()
    let adminGID: gid_t?
    /// The connection counts and the parts the supervisor sets once at start.
    private struct Counted {
        var connections = 0
        /// Connections of non-administrators.
        var userConnections = 0
        var connectionsByUID: [UInt32: Int] = [:]
        var requests = 0
        weak var scheduler: RequestScheduler?
        var maintenance: Maintenance?
        var migrator: Migrator?
        var cgroups: ExtensionCgroups?
        var refinementShare: RefinementShare?
    }

    private let lock = Mutex(Counted())

    init(config: Configuration, log: Logger) throws {
        self.config = config
        self.log = log
        try FileManager.default.createDirectory(atPath: config.stateDirectory, withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        semantic = SemanticEngine(directory: ModelDirectory.resolve(explicit: config.modelDirectory, systemMode: config.system),
            idleSeconds: config.modelIdleSeconds, log: log)
        var options = config.storeOptions
        options.vectorEncoder = semantic.staticEncoder
        options.vectorIndexEvents = { event in
            switch event {
            case .saved(let path, let bytes, let ms): log.info("vector index saved", ["path": path, "bytes": bytes, "ms": ms])
            case .notUsed(let path, let reason): log.notice("saved vector index not used", ["path": path, "reason": reason])
            }
        }
        let maxOpen = config.maxOpenIndexes ?? IndexRegistry.defaultMaxOpen(options: options, connections: config.maxConnections)
        registry = try IndexRegistry(stateDirectory: config.stateDirectory, options: options, maxOpen: maxOpen, log: log)
        state = try SupervisorState(path: config.stateDirectory + "/supervisor.sqlite", exists: registry.bundleExists)
        journal = try RequestJournal(path: config.stateDirectory + "/supervisor.sqlite")
        desktop = try DesktopSettingsStore(path: config.stateDirectory + "/supervisor.sqlite")
        catalog = UnitCatalog(directories: config.unitDirectories, system: config.system)
        events = EventMonitor(log: log)
        initialFill = InitialFill(registry: registry, journal: journal, catalog: catalog, log: log)
        let recoveries = try RecoveryRecords(path: config.stateDirectory + "/supervisor.sqlite")
        recovery = IndexRecovery(
            quarantine: Quarantine(stateDirectory: config.stateDirectory, limit: config.quarantineLimit, pinned: { recoveries.pinned }),
            records: recoveries, log: log, pauseSalvageAfter: config.testPauseSalvageAfter)
        if let group = config.adminGroup {
            guard let gr = getgrnam(group) else { throw SystemError("getgrnam(\(group)): no such group", errno: ENOENT) }
            adminGID = gr.pointee.gr_gid
        } else {
            adminGID = nil
        }
        recovery.context = self
        registry.damageHandler = recovery
    }

    /// Set once by the supervisor before the socket listens.
    var scheduler: RequestScheduler? {
        get { lock.withLock { $0.scheduler } }
        set { lock.withLock { $0.scheduler = newValue } }
    }

    /// Where each launch gets a cgroup of its own; nil: none (`--extension-cgroups off`, or none
    /// available). Set once by the supervisor before any extension is launched.
    var cgroups: ExtensionCgroups? {
        get { lock.withLock { $0.cgroups } }
        set { lock.withLock { $0.cgroups = newValue } }
    }

    /// Set once by the supervisor before the units are loaded.
    var migrator: Migrator? {
        get { lock.withLock { $0.migrator } }
        set { lock.withLock { $0.migrator = newValue } }
    }

    /// The uid a unit's bundle belongs to (DESIGN §6): its `UserName` in system mode, else the daemon's.
    func unitOwner(_ unit: ExtensionUnit) -> UInt32 {
        if daemonUID == 0, let name = unit.userName, let ids = ProcessLauncher.userIDs(name) { return ids.uid }
        return daemonUID
    }

    /// Set once by the supervisor before the socket listens.
    var maintenance: Maintenance? {
        get { lock.withLock { $0.maintenance } }
        set { lock.withLock { $0.maintenance = newValue } }
    }

    /// The low-priority refinement of small indexes (nil before the start).
    var refinementShare: RefinementShare? {
        get { lock.withLock { $0.refinementShare } }
        set { lock.withLock { $0.refinementShare = newValue } }
    }

    var connections: Int { lock.withLock { $0.connections } }

    /// At the graceful stop, once nothing writes any more: every connection to `supervisor.sqlite`
    /// (the request journal and the records beside it) closes; the last close checkpoints the WAL
    /// into the file (synced: `synchronous=FULL`) and removes it.
    func closeSupervisorDatabase() {
        maintenance?.closeRecord()
        migrator?.records.close()
        recovery.records.close()
        desktop.close()
        state.close()
        journal.close()
    }
    var requests: Int { lock.withLock { $0.requests } }

    /// Why a connection was refused a slot.
    enum ConnectionRefusal: Error {
        /// Every slot is taken (for a non-administrator: every slot but the administrators' reserve).
        case daemonFull
        /// The peer's uid holds `--max-connections-per-user` connections already.
        case userFull
    }

    /// Takes a connection slot for a peer. Administrators (`admin`) may use every slot, and are
    /// not limited per uid; other peers may use all but `adminReservedConnections`, at most
    /// `maxConnectionsPerUser` per uid, so that one user cannot lock out the others or root.
    func connectionOpened(uid: UInt32, admin: Bool) throws(ConnectionRefusal) {
        let config = self.config
        try lock.withLock { (c: inout Counted) throws(ConnectionRefusal) in
            if admin {
                guard c.connections < config.maxConnections else { throw .daemonFull }
            } else {
                guard c.connections < config.maxConnections, c.userConnections < config.maxConnections - config.adminReservedConnections else {
                    throw .daemonFull
                }
                guard c.connectionsByUID[uid, default: 0] < config.maxConnectionsPerUser else { throw .userFull }
                c.userConnections += 1
                c.connectionsByUID[uid, default: 0] += 1
            }
            c.connections += 1
        }
    }

    func connectionClosed(uid: UInt32, admin: Bool) {
        lock.withLock { c in
            c.connections -= 1
            guard !admin else { return }
            c.userConnections -= 1
            c.connectionsByUID[uid, default: 1] -= 1
            if c.connectionsByUID[uid] == 0 { c.connectionsByUID[uid] = nil }
        }
    }
    func countRequest() { lock.withLock { $0.requests += 1 } }

    /// Admin: root, the daemon's own user, or a member of `--admin-group`.
    func mayAdminister(_ peer: PeerCredentials) -> Bool {
        if peer.uid == 0 || peer.uid == daemonUID { return true }
        guard let adminGID else { return false }
        if peer.gid == adminGID { return true }
        // getpwuid_r: connections are checked concurrently, and getpwuid's buffer is shared.
        var pw = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(peer.uid, &pw, &buffer, buffer.count, &result) == 0, result != nil, let name = pw.pw_name else { return false }
        var count: Int32 = 256
        var groups = [gid_t](repeating: 0, count: 256)
        if getgrouplist(name, pw.pw_gid, &groups, &count) == -1 { return false }
        return groups.prefix(Int(count)).contains(adminGID)
    }
}
