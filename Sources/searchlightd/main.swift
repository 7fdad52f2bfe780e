#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightSupervisor
import SearchlightWire
import Synchronization

// searchlightd: thin executable, flags -> Configuration -> Supervisor.

// First thing: the handlers that write SIGTERM, SIGINT and SIGHUP to the signal pipe, whatever
// thread they land on (OpenBLAS's workers exist already); those that arrive before the
// supervisor exists are kept for it (Docs/Architecture.md, "Signals").
SignalControl.installFirstThing()

let usage = """
    usage: searchlightd [--system] [--state-dir DIR] [--socket PATH] [--units-dir DIR]...
                        [--admin-group GROUP] [--default-expiration SECONDS] [--log-level LEVEL] [limits…]

    Searchlight's index supervisor. User mode by default (system mode with --system, or when systemd
    starts it as root). Paths: Docs/Operations.md.

    limits: --max-frame-bytes N (16777216)  --max-item-bytes N (1048576)  --max-identifiers N (10000)
            --max-query-bytes N (65536)  --max-query-depth N (64)  --max-client-state N (250)
            --max-items-per-index N (1000000)  --max-connections N (512)
            --incomplete-frame-timeout SECONDS (60): close a client that leaves a frame half-sent
    per user: --max-connections-per-user N (64): connections one uid may hold (administrators aside)
            --max-bundles-per-user N (1000): bundles one uid may own (administrators aside)
            --max-indexes-per-bundle N (64): index names an app may create in one bundle
            --max-activities-per-bundle N (500): user activities kept per bundle (least recently used go)
            --idle-timeout SECONDS (300): close a client connection idle this long (the SDK reconnects)
            --send-timeout SECONDS (30): close a client that does not read its answers this long
    resources: --max-open-indexes N (256, fewer under a low open-file limit): index stores kept
            open; the least recently used idle one is closed past it and reopened when next used
    queries: --query-timeout SECONDS (10): stop a query running longer, answer cancelled
            --slow-query SECONDS (1): log a query still running after this long
            --max-query-terms N (64): different words of a user query
            --max-query-predicates N (256): comparisons of a query and its filters ('*' counts 8)
            --max-filter-queries N (64): filter queries per call
    semantic search: --model-dir DIR (user: $XDG_DATA_HOME/searchlight/models/all-MiniLM-L6-v2,
                system: /usr/share/searchlight/models/all-MiniLM-L6-v2): the model files (make model)
            --model-idle SECONDS (300): unload the transformer after this long without a query
            --refine-share-items N (10000): refine an index of at most N vectors at background
                priority soon after its donations, even on a busy machine (0: only when idle)
            --refine-share-after SECONDS (30): wait this long after an index's last donation
    extensions: --units-dir DIR (repeatable; replaces the default unit directories, first match wins)
            --backoff SECONDS (10): first retry/relaunch delay after a failure, doubling to 5 min
            --max-request-attempts N (8): then a reindex request is reported as failed
            --extension-cgroups auto|off (auto): each launch in a cgroup of its own, where the daemon
                may make one (cgroup v2, Delegate=yes); what an extension leaves running dies with it
    recovery: --quarantine-limit N (5): damaged index files kept in <state>/quarantine/, newest first
    load:   --proc-root DIR (/proc): where pressure/{cpu,io,memory} and loadavg are read
            --throttle-cpu/--throttle-io/--throttle-memory PERCENT (25/20/10): throttle background work
            --pause-cpu/--pause-io/--pause-memory PERCENT (60/50/30): start no new background request
            --resume-after SECONDS (20): below the mark this long before stepping down a state
            --load-interval SECONDS (2): sampling period while background work waits or runs
            --idle-after SECONDS (60)  --maintenance-interval SECONDS (21600): idle maintenance
    power:  --battery-threshold PERCENT|off (50): on battery, defer background work (reindexing the
                daemon starts itself, refinement, maintenance) unless the charge is above PERCENT;
                off: run it on battery too. Work asked for by hand always runs
            --power-supply-root DIR (/sys/class/power_supply): where the power supplies are read
    other:  --no-full-sync  commit with synchronous=NORMAL (durable on crash, not on power loss)
            --stop-timeout SECONDS (45): a graceful stop (SIGTERM) taking longer is forced
            --version, --help
    """

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("searchlightd: \(message)\n".utf8))
    exit(2)
}

/// Flags -> Configuration; exits with status 2 and a message on bad usage.
func parseArguments(_ args: [String]) -> Configuration {
    let env = ProcessInfo.processInfo.environment
    let startedBySystemdAsRoot = getuid() == 0 && env["INVOCATION_ID"] != nil
    if args.contains("--help") || args.contains("-h") {
        print(usage)
        exit(0)
    }
    if args.contains("--version") {
        print("searchlightd \(Version.string)")
        exit(0)
    }
    var config = Configuration(system: args.contains("--system") || startedBySystemdAsRoot)
    var i = 0
    var unitDirectories: [String] = []
    func value(_ flag: String) -> String {
        i += 1
        guard i < args.count else { fail("\(flag) needs a value") }
        return args[i]
    }
    func positive(_ flag: String) -> Int {
        let v = value(flag)
        guard let n = Int(v), n > 0 else { fail("\(flag) must be a positive integer, got \"\(v)\"") }
        return n
    }
    func seconds(_ flag: String, max limit: Double) -> Double {
        let v = value(flag)
        guard let s = Double(v), s.isFinite, s > 0, s <= limit else { fail("\(flag) must be seconds above 0 and at most \(Int(limit)), got \"\(v)\"") }
        return s
    }
    func percent(_ flag: String) -> Double {
        let v = value(flag)
        guard let p = Double(v), p.isFinite, p > 0, p <= 100 else { fail("\(flag) must be a percentage above 0 and at most 100, got \"\(v)\"") }
        return p
    }
    while i < args.count {
        let flag = args[i]
        switch flag {
        case "--system": break
        case "--state-dir": config.stateDirectory = value(flag)
        case "--socket": config.socketPath = value(flag)
        case "--admin-group": config.adminGroup = value(flag)
        case "--default-expiration": config.defaultExpiration = TimeInterval(positive(flag))
        case "--max-frame-bytes": config.limits.maxFrameBytes = positive(flag)
        case "--max-item-bytes": config.limits.maxItemBytes = positive(flag)
        case "--max-identifiers": config.limits.maxIdentifiersPerCall = positive(flag)
        case "--max-query-bytes": config.limits.maxQueryBytes = positive(flag)
        case "--max-query-depth": config.limits.maxQueryDepth = positive(flag)
        case "--max-client-state": config.limits.maxClientStateBytes = positive(flag)
        case "--max-items-per-index": config.limits.maxItemsPerIndex = positive(flag)
        case "--max-connections": config.maxConnections = positive(flag)
        case "--incomplete-frame-timeout": config.incompleteFrameTimeout = positive(flag)
        case "--max-connections-per-user": config.maxConnectionsPerUser = positive(flag)
        case "--max-bundles-per-user": config.maxBundlesPerUser = positive(flag)
        case "--max-indexes-per-bundle": config.maxIndexesPerBundle = positive(flag)
        case "--max-activities-per-bundle": config.maxActivitiesPerBundle = positive(flag)
        case "--idle-timeout": config.idleTimeout = Int(seconds(flag, max: 30 * 86400).rounded(.up))
        case "--send-timeout": config.sendTimeout = Int(seconds(flag, max: 3600).rounded(.up))
        case "--max-open-indexes": config.maxOpenIndexes = positive(flag)
        case "--query-timeout": config.queryTimeout = seconds(flag, max: 86400)
        case "--slow-query": config.slowQuery = seconds(flag, max: 86400)
        case "--model-dir": config.modelDirectory = value(flag)
        case "--model-idle": config.modelIdleSeconds = seconds(flag, max: 86400)
        case "--refine-share-items":
            let v = value(flag)
            guard let n = Int(v), n >= 0 else { fail("\(flag) must be a count of 0 or more (0: off), got \"\(v)\"") }
            config.refineShareItems = n
        case "--refine-share-after": config.refineShareSettle = seconds(flag, max: 86400)
        case "--max-query-terms": config.limits.maxQueryTerms = positive(flag)
        case "--max-query-predicates": config.limits.maxQueryPredicates = positive(flag)
        case "--max-filter-queries": config.limits.maxFilterQueries = positive(flag)
        // Test seams, left out of --help (Docs/Reliability.md, "Test seams").
        case "--test-query-step-delay": config.testQueryStepDelay = seconds(flag, max: 1)
        case "--test-pause-salvage-after": config.testPauseSalvageAfter = positive(flag)
        case "--no-full-sync": config.fullSync = false
        case "--units-dir": unitDirectories.append(value(flag))
        case "--backoff":
            let v = value(flag)
            guard let seconds = Double(v), seconds >= 0, seconds <= 3600 else { fail("--backoff must be seconds between 0 and 3600, got \"\(v)\"") }
            config.backoffBase = seconds
        case "--max-request-attempts": config.maxRequestAttempts = positive(flag)
        case "--stop-timeout": config.stopTimeout = seconds(flag, max: 3600)
        case "--quarantine-limit": config.quarantineLimit = positive(flag)
        case "--extension-cgroups":
            let v = value(flag)
            guard let mode = ExtensionCgroupMode(rawValue: v) else { fail("--extension-cgroups must be auto or off, got \"\(v)\"") }
            config.extensionCgroups = mode
        case "--proc-root": config.procRoot = value(flag)
        case "--power-supply-root": config.powerSupplyRoot = value(flag)
        case "--battery-threshold":
            let v = value(flag)
            if v == "off" {
                config.batteryThreshold = nil
            } else {
                guard let p = Double(v), p.isFinite, p >= 0, p <= 100 else {
                    fail("--battery-threshold must be a percentage from 0 to 100, or off, got \"\(v)\"")
                }
                config.batteryThreshold = p
            }
        case "--throttle-cpu": config.throttleMarks.throttleCPU = percent(flag)
        case "--throttle-io": config.throttleMarks.throttleIO = percent(flag)
        case "--throttle-memory": config.throttleMarks.throttleMemory = percent(flag)
        case "--pause-cpu": config.throttleMarks.pauseCPU = percent(flag)
        case "--pause-io": config.throttleMarks.pauseIO = percent(flag)
        case "--pause-memory": config.throttleMarks.pauseMemory = percent(flag)
        case "--resume-after": config.throttleMarks.resumeAfter = seconds(flag, max: 86400)
        case "--load-interval": config.loadInterval = seconds(flag, max: 3600)
        case "--idle-after": config.idleAfter = seconds(flag, max: 7 * 86400)
        case "--maintenance-interval": config.maintenanceInterval = seconds(flag, max: 30 * 86400)
        case "--log-level":
            switch value(flag) {
            case "debug": config.logLevel = .debug
            case "info": config.logLevel = .info
            case "notice": config.logLevel = .notice
            case "warning": config.logLevel = .warning
            case "error": config.logLevel = .error
            case let other: fail("--log-level must be debug, info, notice, warning or error, got \"\(other)\"")
            }
        default: fail("unknown option \(flag); see searchlightd --help")
        }
        i += 1
    }
    let m = config.throttleMarks
    for (name, low, high) in [("cpu", m.throttleCPU, m.pauseCPU), ("io", m.throttleIO, m.pauseIO), ("memory", m.throttleMemory, m.pauseMemory)] where low > high {
        fail("--throttle-\(name) (\(low)) must not be above --pause-\(name) (\(high)); lower the first or raise the second")
    }
    if !unitDirectories.isEmpty {
        let cwd = FileManager.default.currentDirectoryPath
        config.unitDirectories = unitDirectories.map { $0.hasPrefix("/") ? $0 : cwd + "/" + $0 }
    }
    return config
}

let config = parseArguments(Array(CommandLine.arguments.dropFirst()))
// Blocking calls (SQLite, fsync, fork/exec, blocking socket writes) never run on Swift's
// cooperative pool (Docs/Architecture.md): a debug daemon stops at the first that does, so the
// integration tests fail on such a path; `SEARCHLIGHT_BLOCKING_CHECK=abort|log|off` overrides.
#if DEBUG
BlockingCheck.enableFromEnvironment(default: .abort)
#else
BlockingCheck.enableFromEnvironment(default: .off)
#endif
let supervisor = Supervisor(config: config)
SignalControl.deliver(to: supervisor)
/// The daemon's life: `run()` until SIGTERM/SIGINT (or a failure to start). Awaited in a task
/// while the main thread waits for it on a semaphore: top-level code is on the main actor.
func serve(_ supervisor: Supervisor) async -> Int32 {
    do {
        try await supervisor.run()
        return 0
    } catch {
        FileHandle.standardError.write(Data("searchlightd: cannot start: \(error)\n".utf8))
        return 1
    }
}
let exitStatus = Mutex<Int32>(1)
let served = DispatchSemaphore(value: 0)
// Detached: top-level code is on the main actor, whose thread waits below.
Task.detached {
    let status = await serve(supervisor)
    exitStatus.withLock { $0 = status }
    served.signal()
}
served.wait()
// `_exit`, not `exit`: what the daemon owns is closed by now (stores, journal, log lines written
// whole), and a thread a forced stop left running (inside OpenBLAS, say) must not meet the
// libraries' exit-time teardown, which frees what that thread still uses.
fflush(nil)
_exit(exitStatus.withLock { $0 })
