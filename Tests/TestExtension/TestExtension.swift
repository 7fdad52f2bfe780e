#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit

/// A misbehaving-on-command index extension for the integration tests: a fake peer in the style
/// of sourcekit-lsp's tests. The directory in `TEST_EXTENSION_CONTROL` steers it:
/// - `mode` (read at launch and at every request): `ok`, `crash` (SIGSEGV, after a line on stderr),
///   `fatal` (a Swift `fatalError`), `hang`, `garbage`, `noack`,
///   `nack`, `batch-nack` (fails inside an open batch), `flood` (20 000 items; halfway it waits
///   for a file `release` in the control directory), `hold` (the same hold with `TEST_EXTENSION_ITEMS`
///   items, a multiple of 2 000), `exit-at-launch`, `slow` (progress every 100 ms for `TEST_EXTENSION_SLOW_MS`),
///   `poison:ID` (crash whenever a reindex-identifiers request contains ID), `forkbomb` (forks
///   without end, every child forking too, until the unit's `NumberOfProcesses` limit stops it;
///   then hangs), `midframe` (writes half a JSON-RPC frame on its connection and exits),
///   `foreign:BUNDLE` (tries to donate into BUNDLE through an app connection on the daemon socket
///   next to the control directory, records the outcomes as `foreign-write`, `foreign-delete`
///   and `foreign-client-state`, then goes on as ok), `tty` (records as `tty` whether it can open
///   /dev/tty, with its pid, session and process group, then goes on as ok), or `escape` (starts
///   a grandchild that calls setsid() and sleeps for ever holding stdout, stderr and fd 3,
///   records its pid as `escape`, then goes on as ok), or `stubborn` (ignores SIGTERM, records
///   `stubborn`, and its handler never returns nor heeds cancellation, so `extension.shutdown`
///   does not end it either: only SIGKILL does);
/// - `TEST_EXTENSION_PRINT`, when set, is written as a line to stdout and to stderr at launch;
/// - `received.jsonl` gets one line per request received, so tests can see what was asked.
/// `TEST_EXTENSION_ITEMS` (default 100) is how many items a reindex-all donates.
@main
struct TestExtension: IndexExtension {
    static let control = ProcessInfo.processInfo.environment["TEST_EXTENSION_CONTROL"] ?? FileManager.default.currentDirectoryPath
    static let itemCount = Int(ProcessInfo.processInfo.environment["TEST_EXTENSION_ITEMS"] ?? "") ?? 100

    init() {
        if Self.mode == "exit-at-launch" { exit(3) }
        if let text = ProcessInfo.processInfo.environment["TEST_EXTENSION_PRINT"] {
            for fd: Int32 in [1, 2] { _ = (text + "\n").withCString { write(fd, $0, strlen($0)) } }
        }
    }

    static var mode: String {
        let text = (try? String(contentsOfFile: control + "/mode", encoding: .utf8)) ?? "ok"
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func record(_ kind: String, _ detail: JSONValue) {
        let line = JSONValue.object(["kind": .string(kind), "detail": detail, "pid": .number(Double(getpid())),
                                     "uid": .number(Double(getuid()))]).jsonString + "\n"
        let fd = open(control + "/received.jsonl", O_WRONLY | O_CREAT | O_APPEND, 0o644)
        guard fd >= 0 else { return }
        _ = line.withCString { write(fd, $0, strlen($0)) }
        close(fd)
    }

    static func item(_ id: String) -> SearchableItem {
        var attributes = AttributeSet(contentType: "public.plain-text")
        attributes.title = "Test item \(id)"
        attributes.textContent = "a test item numbered \(id) for the extension tests"
        return SearchableItem(uniqueIdentifier: id, domainIdentifier: "test", attributeSet: attributes)
    }

    /// Dies by SIGSEGV. The default disposition first: the Swift runtime's backtracer handles
    /// SIGSEGV and, for a signal sent with kill(), would let the process carry on. raise() delivers
    /// to this thread before returning; kill() may pick another thread and return first, letting
    /// the handler go on to donate and acknowledge in the moment before the process dies.
    static func crash() -> Never {
        FileHandle.standardError.write(Data("test extension: crashing on purpose\n".utf8))
        signal(SIGSEGV, SIG_DFL)
        raise(SIGSEGV)
        while true { pause() }
    }

    /// Misbehaves as the mode says; returns normally only for the modes that go on to acknowledge.
    func misbehave(_ mode: String, _ index: SearchableIndex) async throws {
        switch mode {
        case "crash":
            Self.crash()
        case "fatal":
            fatalError("told to trap by the test")
        case "hang", "noack":
            while true { try await Task.sleep(for: .seconds(3600)) }
        case "garbage":
            let junk = "this is not JSON {{{\n\u{1}\u{2}]]\n{\"jsonrpc\":\"2.0\",\"id\":\"nobody\",\"result\":7}\n"
            _ = junk.withCString { write(ExtensionEnvironment.descriptor, $0, strlen($0)) }
            while true { try await Task.sleep(for: .seconds(3600)) }
        case "forkbomb":
            // Only fork() and usleep() in the children (async-signal-safe after fork in a threaded
            // process). Each child forks too; EAGAIN at the NumberOfProcesses limit ends nothing.
            Self.record("forkbomb", [:])
            if fork() == 0 {
                while true { if fork() < 0 { usleep(20_000) } }
            }
            while true { try await Task.sleep(for: .seconds(3600)) }
        case "midframe":
            let half = #"{"jsonrpc":"2.0","id":"half","method":"index.items","params":{"items":[{"uniqueIdentifier":"ha"#
            _ = half.withCString { write(ExtensionEnvironment.descriptor, $0, strlen($0)) }
            _exit(5)
        case let foreign where foreign.hasPrefix("foreign:"):
            let bundle = String(foreign.dropFirst(8))
            let socket = (Self.control as NSString).deletingLastPathComponent + "/d.sock"
            let other = SearchableIndex(name: "", bundleIdentifier: bundle, socketPath: socket)
            func attempt(_ kind: String, _ call: () async throws -> Void) async {
                do {
                    try await call()
                    Self.record(kind, ["bundle": .string(bundle), "outcome": "done"])
                } catch {
                    Self.record(kind, ["bundle": .string(bundle), "outcome": .string("\(error)")])
                }
            }
            await attempt("foreign-write") { try await other.indexSearchableItems([Self.item("stolen")]) }
            await attempt("foreign-delete") { try await other.deleteAllSearchableItems() }
            await attempt("foreign-client-state") { _ = try await other.fetchLastClientState() }
        case "tty":
            let fd = open("/dev/tty", O_RDWR | O_NOCTTY)
            let error = fd < 0 ? errno : 0
            if fd >= 0 { close(fd) }
            Self.record("tty", ["opened": .bool(fd >= 0), "errno": .number(Double(error)), "sid": .number(Double(getsid(0))),
                                "pgid": .number(Double(getpgrp()))])
        case "escape":
            // Only setsid() and pause() in the grandchild (async-signal-safe after fork in a
            // threaded process); it keeps every descriptor: stdout, stderr, fd 3.
            let pid = fork()
            if pid == 0 {
                setsid()
                while true { pause() }
            }
            Self.record("escape", ["grandchild": .number(Double(pid))])
        case "stubborn":
            signal(SIGTERM, SIG_IGN)
            Self.record("stubborn", [:])
            while true { usleep(100_000) }
        case "nack":
            throw SearchlightError(.extensionFailed, "told to fail by the test")
        case "batch-nack":
            // Opens a batch, donates into it, and fails without ending it.
            try await index.beginBatch()
            try await index.indexSearchableItems([Self.item("in-abandoned-batch")])
            throw SearchlightError(.extensionFailed, "told to fail inside a batch by the test")
        default:
            break
        }
    }

    func reindexAllSearchableItems(in index: SearchableIndex) async throws {
        let mode = Self.mode
        Self.record("all", ["index": .string(index.name), "mode": .string(mode)])
        try await misbehave(mode, index)
        let count = mode == "flood" ? max(Self.itemCount, 20_000) : Self.itemCount
        if mode == "slow" {
            let ms = Int(ProcessInfo.processInfo.environment["TEST_EXTENSION_SLOW_MS"] ?? "") ?? 1000
            for step in 0..<(ms / 100) {
                await index.reportProgress(completed: step, total: ms / 100)
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        try await index.deleteAllSearchableItems()
        var done = 0
        while done < count {
            if mode == "flood" || mode == "hold", done == count / 2 {
                // Halfway, hold until the test says `release`: the test's other requests are
                // then served while this one is certainly still going.
                Self.record("flood-holding", [:])
                while !FileManager.default.fileExists(atPath: Self.control + "/release") {
                    await index.reportProgress(completed: done, total: count)
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            let chunk = (done..<min(count, done + 1000)).map { Self.item("item-\($0)") }
            try await index.indexSearchableItems(chunk)
            done += chunk.count
            await index.reportProgress(completed: done, total: count)
        }
    }

    func reindexSearchableItems(withIdentifiers identifiers: [String], in index: SearchableIndex) async throws {
        let mode = Self.mode
        Self.record("identifiers", ["index": .string(index.name), "identifiers": .array(identifiers.map(JSONValue.string)), "mode": .string(mode)])
        if mode.hasPrefix("poison:"), identifiers.contains(String(mode.dropFirst(7))) { Self.crash() }
        try await misbehave(mode, index)
        try await index.indexSearchableItems(identifiers.map(Self.item))
    }

    func searchableIndexDidThrottle() async { Self.record("didThrottle", [:]) }
    func searchableIndexDidFinishThrottle() async { Self.record("didFinishThrottle", [:]) }

    func data(forItem identifier: String, typeIdentifier: String) async throws -> Data {
        Data("data of \(identifier) as \(typeIdentifier)".utf8)
    }
}
