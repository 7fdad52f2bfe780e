#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightSupervisor

// searchlightd: thin executable, flags -> Configuration -> Supervisor.

SignalWaiter.blockHandledSignals()  // before any thread exists

let usage = """
    usage: searchlightd [--system] [--state-dir DIR] [--socket PATH] [--units-dir DIR]...
                        [--admin-group GROUP] [--default-expiration SECONDS] [--log-level LEVEL] [limits…]

    Searchlight's index supervisor. User mode by default (system mode with --system, or when systemd
    starts it as root). Paths: Docs/Operations.md.

    limits: --max-frame-bytes N (16777216)  --max-item-bytes N (1048576)  --max-identifiers N (10000)
            --max-query-bytes N (65536)  --max-query-depth N (64)  --max-client-state N (250)
            --max-items-per-index N (1000000)  --max-connections N (512)
            --incomplete-frame-timeout SECONDS (60): close a client that leaves a frame half-sent
    extensions: --units-dir DIR (repeatable; replaces the default unit directories, first match wins)
            --backoff SECONDS (10): first retry/relaunch delay after a failure, doubling to 5 min
            --max-request-attempts N (8): then a reindex request is reported as failed
    other:  --no-full-sync  commit with synchronous=NORMAL (durable on crash, not on power loss)
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
        case "--no-full-sync": config.fullSync = false
        case "--units-dir": unitDirectories.append(value(flag))
        case "--backoff":
            let v = value(flag)
            guard let seconds = Double(v), seconds >= 0, seconds <= 3600 else { fail("--backoff must be seconds between 0 and 3600, got \"\(v)\"") }
            config.backoffBase = seconds
        case "--max-request-attempts": config.maxRequestAttempts = positive(flag)
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
    if !unitDirectories.isEmpty {
        let cwd = FileManager.default.currentDirectoryPath
        config.unitDirectories = unitDirectories.map { $0.hasPrefix("/") ? $0 : cwd + "/" + $0 }
    }
    return config
}

let config = parseArguments(Array(CommandLine.arguments.dropFirst()))
let supervisor = Supervisor(config: config)
SignalWaiter.start { sig in
    if sig == SIGHUP {
        supervisor.reloadUnits()
    } else {
        supervisor.stop()
    }
}
do {
    try supervisor.run()
    exit(0)
} catch {
    FileHandle.standardError.write(Data("searchlightd: cannot start: \(error)\n".utf8))
    exit(1)
}
