#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit

/// No stale results (issue 34 item 3, Docs/Desktop.md): an item whose `file:` contentURL no longer
/// exists is left out of the desktop's answers at query time, by the provider (as its user), and
/// reported to the daemon (`desktop.staleItems`), which asks the bundle's extension to reindex it
/// or, for a bundle without one, deletes it; `status` counts them. A real daemon, a real session
/// bus starting `searchlight-desktop`, `gdbus` as the Shell.
@Suite("Desktop search: results whose file is gone", .onOwnThreads, .serialized, .enabled(if: SessionBusHarness.missingTools == nil))
struct StaleResultsTests {
    /// Two notes backed by files in `dir`, and one on the web.
    static func notes(_ dir: String) throws -> [String] {
        for name in ["kept", "gone"] { try "bridges \(name)\n".write(toFile: dir + "/\(name).txt", atomically: true, encoding: .utf8) }
        return [
            #"{"uniqueIdentifier":"kept","attributeSet":{"title":"Bridges kept","contentURL":"file://\#(dir)/kept.txt"}}"#,
            #"{"uniqueIdentifier":"gone","attributeSet":{"title":"Bridges gone","contentURL":"file://\#(dir)/gone.txt"}}"#,
            #"{"uniqueIdentifier":"web","attributeSet":{"title":"Bridges web","contentURL":"https://example.org/web"}}"#,
        ]
    }

    static func staleCounts(_ socket: String) async throws -> JSONValue {
        let admin = SearchlightConnection(role: .admin, socketPath: socket)
        defer { Task { await admin.close() } }
        return try await admin.call(Method.adminStatus, [:])["staleItems"] ?? .null
    }

    /// Polls `condition` (off the pool's threads' time: each poll awaits) until it holds.
    static func until(_ what: String, timeout: TimeInterval = 30, _ condition: () async throws -> Bool) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while try await !condition() {
            guard Date() < deadline else { throw HarnessError("\(what) did not happen within \(timeout) s") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    @Test("a bundle without an extension: the result whose file is gone is left out at once, then deleted; status counts it")
    func deletedWithoutExtension() async throws {
        let daemon = try await DaemonProcess()
        let files = TempDir("slfiles")
        try await importItems("com.example.notes", try Self.notes(files.path), socket: daemon.socket, dir: daemon.dir)
        let bus = try SessionBusHarness(daemonSocket: daemon.socket)
        #expect(Set(try bus.initialResults(["bridges"])) == ["com.example.notes/kept", "com.example.notes/gone", "com.example.notes/web"])
        unlink(files.path + "/gone.txt")
        // Left out by the very next search, before the daemon has done anything.
        #expect(Set(try bus.initialResults(["bridges"])) == ["com.example.notes/kept", "com.example.notes/web"])
        try await Self.until("the stale item's deletion") { try await Self.staleCounts(daemon.socket)["deleted"]?.intValue == 1 }
        let counts = try await Self.staleCounts(daemon.socket)
        #expect(counts["reported"]?.intValue == 1 && counts["reindexRequested"]?.intValue == 0 && counts["kept"]?.intValue == 0, "\(counts)")
        let search = try await runCLI(["search", "com.example.notes", "bridges", "--json"], socket: daemon.socket)
        #expect(search.status == 0 && !search.stdout.contains("\"gone\"") && search.stdout.contains("\"kept\""), "\(search.stdout)\(search.stderr)")
        let status = try await runCLI(["status"], socket: daemon.socket)
        #expect(status.stdout.contains("stale items: 1 reported by the desktop (file gone): 0 reindex requested, 1 deleted, 0 kept"),
                "\(status.stdout)")
    }

    @Test("a bundle with an extension: the result is left out and the extension is asked to reindex it (background, once)")
    func reindexRequestedFromExtension() async throws {
        let bench = try await ExtensionBench.start([TestUnit("org.example.files-ext", bundle: "com.example.files")])
        _ = try await bench.waitForAcknowledgement("org.example.files-ext")
        let files = TempDir("slfiles")
        try await importItems("com.example.files", try Self.notes(files.path), socket: bench.socket, dir: bench.dir)
        let bus = try SessionBusHarness(daemonSocket: bench.socket)
        #expect(try bus.initialResults(["bridges"]).count == 3)
        unlink(files.path + "/gone.txt")
        #expect(Set(try bus.initialResults(["bridges"])) == ["com.example.files/kept", "com.example.files/web"])
        let control = bench.control("org.example.files-ext")
        try await Self.until("the extension's reindex-identifiers request") {
            control.received.contains { $0.kind == "identifiers" && $0.identifiers == ["gone"] }
        }
        // Searched again: still left out, and not asked again (the provider and the daemon remember it).
        #expect(Set(try bus.initialResults(["bridges"])) == ["com.example.files/kept", "com.example.files/web"])
        let counts = try await Self.staleCounts(bench.socket)
        #expect(counts["reported"]?.intValue == 1 && counts["reindexRequested"]?.intValue == 1 && counts["deleted"]?.intValue == 0, "\(counts)")
        #expect(control.received.filter { $0.kind == "identifiers" }.count == 1)
    }

    @Test("desktop.staleItems takes the desktop's word only for file items of bundles it may show")
    func reportsChecked() async throws {
        let daemon = try await DaemonProcess()
        let files = TempDir("slfiles")
        try await importItems("com.example.notes", try Self.notes(files.path), socket: daemon.socket, dir: daemon.dir)
        try await importItems("com.example.hidden", [#"{"uniqueIdentifier":"h","attributeSet":{"title":"h","contentURL":"file:///nonexistent"}}"#],
                              socket: daemon.socket, dir: daemon.dir)
        #expect(try await runCLI(["desktop", "hide", "com.example.hidden"], socket: daemon.socket).status == 0)
        let desktop = SearchlightConnection(role: .desktop, socketPath: daemon.socket)
        defer { Task { await desktop.close() } }
        // Not a file item, and an unknown identifier: nothing is done.
        let answer = try await desktop.send(DesktopStaleItems(bundle: "com.example.notes", identifiers: ["web", "nosuch"]))
        #expect(answer.result["accepted"]?.intValue == 0, "\(answer.result)")
        // A bundle hidden from the desktop: refused like one it cannot read.
        do {
            _ = try await desktop.send(DesktopStaleItems(bundle: "com.example.hidden", identifiers: ["h"]))
            Issue.record("a hidden bundle's stale report was accepted")
        } catch let error as SearchlightError {
            #expect(error.code == .permissionDenied, "\(error)")
        }
        // Too many identifiers in one call.
        do {
            _ = try await desktop.send(DesktopStaleItems(bundle: "com.example.notes", identifiers: (0...64).map { "id\($0)" }))
            Issue.record("65 identifiers were accepted")
        } catch let error as SearchlightError {
            #expect(error.code == .invalidParams, "\(error)")
        }
        let search = try await runCLI(["search", "com.example.notes", "bridges", "--json"], socket: daemon.socket)
        #expect(search.stdout.contains("\"web\"") && search.stdout.contains("\"gone\""), "\(search.stdout)")
        #expect(try await Self.staleCounts(daemon.socket)["reported"]?.intValue == 0)
    }
}
