#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import SearchlightWire

/// searchlight-desktop: the desktop's search over searchlightd (DESIGN §12, Docs/Desktop.md).
/// Started by the session bus on the first call to its name (D-Bus activation), it serves GNOME
/// Shell's SearchProvider2 and KRunner's krunner1, and exits when idle.
let busName = "org.searchlight.Searchlight.SearchProvider"

struct Options {
    var socket: String?
    var queryTimeout: Double = 1
    var idleExit: Double = 60
    var limits = DesktopSearch.Limits()
    var showSearch = false
    var searchURI: String?

    static let usage = """
        Usage: searchlight-desktop [--socket PATH] [--query-timeout S] [--idle-exit S] [--max-results N] [--max-per-app N] [--debug]
               searchlight-desktop --show-search [searchlight-search:TEXT]

        Serves the desktop's search on the session bus as \(busName):
          /org/searchlight/Searchlight/SearchProvider  org.gnome.Shell.SearchProvider2 (GNOME Shell)
          /org/searchlight/Searchlight/KRunner         org.kde.krunner1 (KDE Plasma)
        It is started by D-Bus activation (org.searchlight.Searchlight.SearchProvider.service) and
        searches searchlightd as the user it runs as (the desktop role). See Docs/Desktop.md.

          --socket PATH       the daemon's socket (default: $SEARCHLIGHT_SOCKET, else the user daemon's, else the system one)
          --query-timeout S   answer empty when the daemon has not answered within S seconds (default 1)
          --idle-exit S       exit after S seconds without a call (default 60; 0: never)
          --max-results N     results per search (default 10)
          --max-per-app N     results of one app per search (default 5)
          --show-search       the Searchlight app: search in a terminal, open results by number
          --debug             log every search with its time
        """

    static func parse(_ args: [String]) -> Options {
        var o = Options()
        var i = 0
        func value(_ name: String) -> String {
            i += 1
            guard i < args.count else { fail("\(name) needs a value") }
            return args[i]
        }
        func number(_ name: String, _ range: ClosedRange<Double>) -> Double {
            let text = value(name)
            guard let n = Double(text), n.isFinite, range.contains(n) else {
                fail("\(name) must be a number from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
            }
            return n
        }
        while i < args.count {
            switch args[i] {
            case "--socket": o.socket = value("--socket")
            case "--query-timeout": o.queryTimeout = number("--query-timeout", 0.01...60)
            case "--idle-exit": o.idleExit = number("--idle-exit", 0...86400)
            case "--max-results": o.limits.total = Int(number("--max-results", 1...100))
            case "--max-per-app": o.limits.perApp = Int(number("--max-per-app", 1...100))
            case "--debug": Log.debugEnabled = true
            case "--show-search":
                o.showSearch = true
                if i + 1 < args.count, !args[i + 1].hasPrefix("--") { o.searchURI = value("--show-search") }
            case "-h", "--help":
                print(usage)
                exit(0)
            default:
                fail("unknown argument '\(args[i])'")
            }
            i += 1
        }
        return o
    }

    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("searchlight-desktop: \(message)\n\(usage)\n".utf8))
        exit(2)
    }
}

// Whoever started us may have blocked signals (a test runner does); the apps we launch inherit
// our mask, and SIGTERM must stop us.
var unblocked = sigset_t()
sigemptyset(&unblocked)
sigprocmask(SIG_SETMASK, &unblocked, nil)
signal(SIGPIPE, SIG_IGN)
let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
let daemon = DaemonClient(socket: options.socket, timeout: .milliseconds(Int(options.queryTimeout * 1000)))

if options.showSearch {
    var limits = options.limits
    limits.total = max(limits.total, 20)
    limits.perApp = max(limits.perApp, 20)
    exit(TerminalSearch.run(uri: options.searchURI, search: DesktopSearch(daemon: daemon, limits: limits)))
}

let search = DesktopSearch(daemon: daemon, limits: options.limits)
do {
    // SIGTERM (a session ending, systemd --user stopping us), SIGINT and SIGHUP end the loop the
    // way an idle exit does: the name released, calls in flight answered, exit status 0. Through
    // a handler that writes to a pipe (SignalEvents), whichever thread the signal lands on.
    let stopSignals = [SIGTERM, SIGINT, SIGHUP]
    try SignalEvents.install(stopSignals)
    let bus = try SessionBus()
    SignalEvents.onSignal { signal in
        bus.stop(reason: signal == SIGTERM ? "SIGTERM" : signal == SIGINT ? "SIGINT" : "SIGHUP")
    }
    try bus.export(path: GnomeSearchProvider.path, interface: .searchProvider, handler: GnomeSearchProvider(bus: bus, search: search))
    try bus.export(path: KRunnerInterface.path, interface: .krunner, handler: KRunnerInterface(bus: bus, search: search))
    // The objects are there before the name: a call that activated us finds them.
    try bus.requestName(busName)
    Log.info("searchlight-desktop ready", ["name": busName, "pid": getpid(), "socket": options.socket ?? DefaultPaths.clientSocket()])
    bus.run(idleExit: options.idleExit > 0 ? .milliseconds(Int(options.idleExit * 1000)) : nil)
    Log.info("searchlight-desktop stopped")
} catch {
    Log.error("cannot serve the desktop's search", ["error": "\(error)"])
    exit(1)
}
