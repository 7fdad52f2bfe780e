#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightStore
import SearchlightWire

/// Everything the daemon is told by its flags and environment (DESIGN §2).
public struct Configuration: Sendable {
    /// System mode: `--system`, or running as root under systemd.
    public var system: Bool
    public var stateDirectory: String
    public var socketPath: String
    /// Members of this group may use admin methods (besides root and the daemon's user).
    public var adminGroup: String?
    public var limits = Limits()
    public var defaultExpiration: TimeInterval = 30 * 86400
    public var maxConnections = 512
    /// Connections one uid may hold at once (`--max-connections-per-user`); administrators
    /// (root, the daemon's user, `--admin-group`) are not counted against it, and the last
    /// `adminReservedConnections` slots of `maxConnections` are theirs alone.
    public var maxConnectionsPerUser = 64
    /// Seconds a client may leave a frame half-sent before its connection is closed.
    public var incompleteFrameTimeout = 60
    /// Seconds after which an idle client connection is closed (`--idle-timeout`; see
    /// `ClientSession.idle` for what counts as idle). The SDK reconnects by itself.
    public var idleTimeout = 300
    /// Seconds an answer may wait for a client that does not read before its connection is
    /// closed (`--send-timeout`).
    public var sendTimeout = 30
    /// Bundles one uid may own (`--max-bundles-per-user`); a write that would claim one more is
    /// refused with quotaExceeded. Administrators, extensions and admin writes are not limited.
    public var maxBundlesPerUser = 1000
    /// Index names an app may create in one bundle (`--max-indexes-per-bundle`); administrators
    /// and extensions are not limited.
    public var maxIndexesPerBundle = 64
    /// User activities kept per bundle (`--max-activities-per-bundle`): past it, the least
    /// recently used go (DESIGN §13).
    public var maxActivitiesPerBundle = 500
    /// Index stores kept open at once (`--max-open-indexes`); the least recently used idle one
    /// is closed past it, and reopened on its next call. Nil: 256, or fewer when the open-file
    /// limit would not hold that many (`IndexRegistry.defaultMaxOpen`).
    public var maxOpenIndexes: Int?
    public var logLevel: Logger.Level = .info
    /// Where unit files are read from, first match of a label wins (`--units-dir`, repeatable).
    public var unitDirectories: [String]
    /// First retry / relaunch delay after a failure, doubling up to 5 min (`--backoff`).
    public var backoffBase: TimeInterval = 10
    /// Attempts before a reindex request is reported as failed instead of retried (`--max-request-attempts`).
    public var maxRequestAttempts = 8
    /// How long a graceful stop may take before it is forced (extensions killed, blocked calls
    /// left behind); below systemd's `TimeoutStopSec` (60 s in our unit).
    public var stopTimeout: TimeInterval = 45
    /// `synchronous=FULL` on index files (durable on power loss). Tests may relax it.
    public var fullSync = true
    /// Where the load monitor reads `pressure/{cpu,io,memory}` and `loadavg` (`--proc-root`).
    public var procRoot = "/proc"
    /// Where the power gate reads the power supplies (`--power-supply-root`).
    public var powerSupplyRoot = PowerSupplyReader.defaultRoot
    /// On battery, background work runs only while the charge is above this percentage
    /// (`--battery-threshold`); nil (`off`): the battery does not hold it.
    public var batteryThreshold: Double? = 50
    /// Throttle and pause marks and the hysteresis of the background throttle (`--throttle-cpu`, …).
    public var throttleMarks = ThrottleMarks()
    /// Seconds between two load samples while background work waits or runs (`--load-interval`).
    public var loadInterval: TimeInterval = 2
    /// Seconds every pressure must stay below the throttle marks before the machine counts as idle (`--idle-after`).
    public var idleAfter: TimeInterval = 60
    /// Indexes of at most this many vectors are refined by the low-priority share soon after
    /// their donations, busy machine or not (`--refine-share-items`; 0: only idle maintenance refines).
    public var refineShareItems = 10_000
    /// Seconds after an index's last donation before the share refines it (`--refine-share-after`).
    public var refineShareSettle: TimeInterval = 30
    /// Minimum seconds between two idle maintenance runs (`--maintenance-interval`).
    public var maintenanceInterval: TimeInterval = 21600
    /// Damaged index files kept in `<state>/quarantine/`, newest first (`--quarantine-limit`);
    /// a file whose rows a salvage has not restored yet is kept beyond it.
    public var quarantineLimit = 5
    /// A cgroup per extension launch where the daemon may make one (`--extension-cgroups`).
    public var extensionCgroups = ExtensionCgroupMode.auto
    /// Seconds one query may run before it is stopped and answered `cancelled` (`--query-timeout`).
    public var queryTimeout: Double = 10
    /// The semantic model's folder (`--model-dir`, DESIGN §11); nil: the mode's default.
    public var modelDirectory: String?
    /// Seconds without a semantic query after which the transformer is unloaded (`--model-idle`).
    public var modelIdleSeconds: Double = 300
    /// Seconds after which a query still running is logged as slow, once (`--slow-query`).
    public var slowQuery: Double = 1
    /// Test seams (hidden flags, Docs/Reliability.md): seconds slept at every budget check of a
    /// query, so that a small query runs long (`--test-query-step-delay`); rows after which a
    /// salvage pauses for good, logging a line, so that a test can kill the daemon in the middle
    /// (`--test-pause-salvage-after`).
    public var testQueryStepDelay: Double = 0
    public var testPauseSalvageAfter: Int?

    public init(system: Bool) {
        self.system = system
        stateDirectory = DefaultPaths.stateDirectory(system: system)
        socketPath = DefaultPaths.socket(system: system)
        unitDirectories = DefaultPaths.unitDirectories(system: system)
    }

    /// Connection slots only administrators may take, so that `searchlight status` gets in when
    /// other users hold every other slot: a sixteenth of `maxConnections`, 1 to 32 (none below 4).
    public var adminReservedConnections: Int { maxConnections < 4 ? 0 : min(32, max(1, maxConnections / 16)) }

    var storeOptions: StoreOptions {
        var o = StoreOptions()
        o.defaultExpiration = defaultExpiration
        o.limits = limits
        o.fullSync = fullSync
        return o
    }
}
