#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightSemantic
import SearchlightStore
import SearchlightUnits
import SearchlightWire

/// What every client session shares: configuration, indexes, bundle records, counters.
final class ServiceContext: @unchecked Sendable {
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
    let startedAt = Date()
    let daemonUID = getuid()
    let adminGID: gid_t?
    private let lock = NSLock()
    private var _connections = 0
    /// Connections of peers that are not administrators, in all and per uid.
    private var _userConnections = 0
    private var _connectionsByUID: [UInt32: Int] = [:]
    private var _requests = 0
    private weak var _scheduler: RequestScheduler?
    private var _maintenance: Maintenance?
    private var _migrator: Migrator?
    private var _refinementShare: RefinementShare?

    init(config: Configuration, log: Logger) throws {
        self.config = config
        self.log = log
        try FileManager.default.createDirectory(atPath: config.stateDirectory, withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        semantic = SemanticEngine(directory: ModelDirectory.resolve(explicit: config.modelDirectory, systemMode: config.system),
            idleSeconds: config.modelIdleSeconds, log: log)
        var options = config.storeOptions
        options.vectorEncoder = semantic.staticEncoder
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
        get { lock.withLock { _scheduler } }
        set { lock.withLock { _scheduler = newValue } }
    }

    private var _cgroups: ExtensionCgroups?

    /// Where each launch gets a cgroup of its own; nil: none (`--extension-cgroups off`, or none
    /// available). Set once by the supervisor before any extension is launched.
    var cgroups: ExtensionCgroups? {
        get { lock.withLock { _cgroups } }
        set { lock.withLock { _cgroups = newValue } }
    }

    /// Set once by the supervisor before the units are loaded.
    var migrator: Migrator? {
        get { lock.withLock { _migrator } }
        set { lock.withLock { _migrator = newValue } }
    }

    /// The uid a unit's bundle belongs to (DESIGN §6): its `UserName` in system mode, else the daemon's.
    func unitOwner(_ unit: ExtensionUnit) -> UInt32 {
        if daemonUID == 0, let name = unit.userName, let ids = ProcessLauncher.userIDs(name) { return ids.uid }
        return daemonUID
    }

    /// Set once by the supervisor before the socket listens.
    var maintenance: Maintenance? {
        get { lock.withLock { _maintenance } }
        set { lock.withLock { _maintenance = newValue } }
    }

    /// The low-priority refinement of small indexes (nil before the start).
    var refinementShare: RefinementShare? {
        get { lock.withLock { _refinementShare } }
        set { lock.withLock { _refinementShare = newValue } }
    }

    var connections: Int { lock.withLock { _connections } }
    var requests: Int { lock.withLock { _requests } }

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
        lock.lock()
        defer { lock.unlock() }
        if admin {
            guard _connections < config.maxConnections else { throw .daemonFull }
        } else {
            guard _connections < config.maxConnections, _userConnections < config.maxConnections - config.adminReservedConnections else {
                throw .daemonFull
            }
            guard _connectionsByUID[uid, default: 0] < config.maxConnectionsPerUser else { throw .userFull }
            _userConnections += 1
            _connectionsByUID[uid, default: 0] += 1
        }
        _connections += 1
    }

    func connectionClosed(uid: UInt32, admin: Bool) {
        lock.withLock {
            _connections -= 1
            guard !admin else { return }
            _userConnections -= 1
            _connectionsByUID[uid, default: 1] -= 1
            if _connectionsByUID[uid] == 0 { _connectionsByUID[uid] = nil }
        }
    }
    func countRequest() { lock.withLock { _requests += 1 } }

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
