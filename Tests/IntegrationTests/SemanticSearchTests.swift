#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit
import SearchlightWire

/// Semantic search through the real daemon (Docs/SemanticSearch.md): the static table committed
/// in Models/ is put in a temporary model folder (`--model-dir`), so these tests need no download;
/// the transformer's test uses the folder `make model` fills and says so when it is missing.
@Suite("Semantic search through the daemon", .onOwnThreads, .serialized)
struct SemanticSearchTests {
    static let repository: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }()

    /// A model folder holding only the committed static table.
    static func staticModelDirectory(_ dir: TempDir) throws -> String {
        let path = dir.path + "/model"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: path + "/static-table.bin",
            withDestinationPath: repository + "/Models/all-MiniLM-L6-v2-static.bin")
        return path
    }

    static let items = [
        #"{"uniqueIdentifier":"music","attributeSet":{"title":"Rhythmbox","contentDescription":"music player and audio library organizer","textContent":"Play your MP3 and Ogg Vorbis collection, internet radio and podcasts."}}"#,
        #"{"uniqueIdentifier":"chess","attributeSet":{"title":"GNU Chess","contentDescription":"chess engine","textContent":"A program that plays chess against you on the board."}}"#,
        #"{"uniqueIdentifier":"mail","attributeSet":{"title":"Postfix","contentDescription":"mail transport agent","textContent":"Delivers electronic mail between servers with SMTP."}}"#,
        #"{"uniqueIdentifier":"images","attributeSet":{"title":"GIMP","contentDescription":"image manipulation program","textContent":"Edit photographs, retouch pictures and paint."}}"#,
    ]

    static func importItems(_ lines: [String], bundle: String, daemon: DaemonProcess, dir: TempDir, runner: ([String]) async throws -> CLIResult) async throws {
        let file = dir.path + "/items-\(UUID().uuidString).jsonl"
        try lines.joined(separator: "\n").write(toFile: file, atomically: false, encoding: .utf8)
        chmod(file, 0o644)
        let r = try await runner(["import", bundle, file])
        #expect(r.status == 0, "\(r.stderr)")
    }

    func search(_ args: [String], _ daemon: DaemonProcess) async throws -> (ids: [String], items: [JSONValue], result: CLIResult) {
        let r = try await runCLI(["search"] + args + ["--json"], socket: daemon.socket)
        let json = (try? JSONValue.parse(Array(r.stdout.utf8))) ?? .null
        let items = json["items"]?.arrayValue ?? []
        return (items.compactMap { $0["uniqueIdentifier"]?.stringValue }, items, r)
    }

    @Test("an item is found by meaning with no shared word, not with --no-semantic; --explain gives its ranks and similarity")
    func findsByMeaning() async throws {
        let dir = TempDir()
        let daemon = try await DaemonProcess(arguments: ["--model-dir", try Self.staticModelDirectory(dir)], dir: dir)
        try await Self.importItems(Self.items, bundle: "com.example.apps", daemon: daemon, dir: dir) { try await runCLI($0, socket: daemon.socket) }

        let hybrid = try await search(["com.example.apps", "listen to songs", "--explain"], daemon)
        #expect(hybrid.ids.first == "music", "\(hybrid.result.stdout) \(hybrid.result.stderr)")
        let explain = hybrid.items.first?["explain"]
        #expect(explain?["vectorRank"]?.intValue == 1 && explain?["lexicalRank"] == nil, "\(String(describing: explain))")
        #expect((explain?["similarity"]?.doubleValue ?? 0) > 0.35 && (explain?["score"]?.doubleValue ?? 0) > 0)

        let lexical = try await search(["com.example.apps", "listen to songs", "--no-semantic"], daemon)
        #expect(lexical.ids.isEmpty, "\(lexical.ids)")

        // A word hit and a meaning hit: both ranks shown, fused (admin search across bundles too).
        let both = try await search(["chess", "--explain"], daemon)
        let chess = both.items.first { $0["uniqueIdentifier"]?.stringValue == "chess" }?["explain"]
        #expect(chess?["lexicalRank"]?.intValue == 1 && chess?["vectorRank"]?.intValue == 1, "\(both.result.stdout)")

        let text = try await runCLI(["search", "com.example.apps", "listen to songs", "--explain"], socket: daemon.socket)
        #expect(text.status == 0 && text.stdout.contains("lexical -, vector #1 (similarity"), "\(text.stdout)")
        let both2 = try await runCLI(["search", "com.example.apps", "x", "--semantic", "--no-semantic"], socket: daemon.socket)
        #expect(both2.status != 0 && both2.stderr.contains("not both"), "\(both2.stderr)")
    }

    @Test("deleted and expired items never come back through the vector side")
    func deletedAndExpired() async throws {
        let dir = TempDir()
        let daemon = try await DaemonProcess(arguments: ["--model-dir", try Self.staticModelDirectory(dir)], dir: dir)
        let expired = #"{"uniqueIdentifier":"radio","expirationDate":"2001-01-01T00:00:00Z","attributeSet":{"title":"Radio tray","contentDescription":"streaming audio player","textContent":"Plays music streams from online stations."}}"#
        try await Self.importItems(Self.items + [expired], bundle: "com.example.apps", daemon: daemon, dir: dir) { try await runCLI($0, socket: daemon.socket) }
        let before = try await search(["com.example.apps", "listen to songs"], daemon)
        #expect(before.ids == ["music"], "the expired item is not returned: \(before.ids)")
        let deleted = try await runCLI(["delete", "com.example.apps", "--identifiers", "music"], socket: daemon.socket)
        #expect(deleted.status == 0, "\(deleted.stderr)")
        let after = try await search(["com.example.apps", "listen to songs"], daemon)
        #expect(after.ids.isEmpty, "\(after.ids)")
        // After a restart the index is loaded from the file: still gone.
        try await daemon.restart()
        await #expect(try search(["com.example.apps", "listen to songs"], daemon).ids.isEmpty)
        let status = try await runCLI(["status", "--json"], socket: daemon.socket)
        let json = try JSONValue.parse(Array(status.stdout.utf8))
        let index = json["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first
        #expect(index?["vectors"]?.intValue == index?["items"]?.intValue && index?["refined"]?.intValue == 0, "a vector per item: \(String(describing: index))")
        #expect(json["semantic"]?["state"]?.stringValue == "unloaded", "\(String(describing: json["semantic"]))")
    }

    @Test("without the model files everything lexical works and status says why, with the command that installs them")
    func unavailable() async throws {
        let dir = TempDir()
        let empty = dir.path + "/no-model"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        let daemon = try await DaemonProcess(arguments: ["--model-dir", empty], dir: dir)
        try await Self.importItems(Self.items, bundle: "com.example.apps", daemon: daemon, dir: dir) { try await runCLI($0, socket: daemon.socket) }
        await #expect(try search(["com.example.apps", "listen to songs"], daemon).ids.isEmpty)
        let lexical = try await search(["com.example.apps", "chess", "--explain"], daemon)
        #expect(lexical.ids == ["chess"] && lexical.items.first?["explain"]?["lexicalRank"]?.intValue == 1)
        let status = try await runCLI(["status"], socket: daemon.socket)
        #expect(status.stdout.contains("semantic search: unavailable") && status.stdout.contains("make model"), "\(status.stdout)")
        let json = try JSONValue.parse(Array(try await runCLI(["status", "--json"], socket: daemon.socket).stdout.utf8))
        #expect(json["semantic"]?["state"]?.stringValue == "unavailable")
        #expect(json["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first?["vectors"]?.intValue == 0)
    }

    /// The folder `make model` fills (`SEARCHLIGHT_MODEL_DIR`, as `make test` sets it), when the
    /// transformer's files are there.
    static var transformerModel: String? {
        let model = ProcessInfo.processInfo.environment["SEARCHLIGHT_MODEL_DIR"]
            ?? (NSHomeDirectory() + "/.local/share/searchlight/models/all-MiniLM-L6-v2")
        guard FileManager.default.fileExists(atPath: model + "/model.safetensors"),
              FileManager.default.fileExists(atPath: model + "/static-table.bin") else {
            print("SKIPPED: the model files are not in \(model); run `make model`")
            return nil
        }
        return model
    }

    @Test("idle maintenance refines the stored vectors with the transformer; status counts them")
    func refinement() async throws {
        guard let model = Self.transformerModel else { return }
        let dir = TempDir()
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model], dir: dir)
        try await Self.importItems(Self.items, bundle: "com.example.apps", daemon: daemon, dir: dir) { try await runCLI($0, socket: daemon.socket) }
        func index() async throws -> JSONValue? {
            let json = try JSONValue.parse(Array(try await runCLI(["status", "--json"], socket: daemon.socket).stdout.utf8))
            return json["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first
        }
        let before = try await index()
        #expect(before?["vectors"]?.intValue == 4 && before?["refined"]?.intValue == 0, "\(String(describing: before))")
        let mark = daemon.log.count
        let idle = try await runCLI(["simulate", "idle", "--json"], socket: daemon.socket)
        #expect(idle.status == 0, "\(idle.stderr)")
        let line = try await daemon.waitForLog("vectors refined", after: mark)
        #expect(line.contains("items=4"), "\(line)")
        await #expect(try index()?["refined"]?.intValue == 4)
        let status = try await runCLI(["status"], socket: daemon.socket)
        #expect(status.stdout.contains("4 (4 refined)"), "\(status.stdout)")
        await #expect(try search(["com.example.apps", "listen to songs"], daemon).ids.first == "music")
    }

    @Test("query.prepare loads the transformer, queries use it, and it is unloaded after --model-idle")
    func prepareAndUnload() async throws {
        guard let model = Self.transformerModel else { return }
        let dir = TempDir()
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model, "--model-idle", "1"], dir: dir)
        try await Self.importItems(Self.items, bundle: "com.example.apps", daemon: daemon, dir: dir) { try await runCLI($0, socket: daemon.socket) }
        let index = daemon.index("com.example.apps")
        let state = try await UserQuery.prepare(index: index)
        #expect(state.state == "loaded" && state.modelDirectory == model, "\(state)")
        var context = UserQueryContext()
        context.explain = true
        let r = try await UserQuery(userQueryString: "listen to songs", userQueryContext: context, index: index).run()
        #expect(r.items.first?.uniqueIdentifier == "music")
        #expect(r.explanations.first??.vectorRank == 1)
        await index.close()
        // The one load of this daemon, then its unload once idle for a second (it may already
        // have happened while the query ran on a loaded machine: the query then used the table).
        _ = try await daemon.waitForLog("semantic model unloaded", after: 0, timeout: 30)
        let json = try JSONValue.parse(Array(try await runCLI(["status", "--json"], socket: daemon.socket).stdout.utf8))
        #expect(json["semantic"]?["state"]?.stringValue == "unloaded")
    }
}

/// System mode: one uid's semantic search never returns another uid's items.
@Suite("Semantic search between users", .onOwnThreads, .serialized,
    .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
struct SemanticIsolationTests {
    func cli(as uid: UInt32, _ arguments: [String], socket: String) async throws -> CLIResult {
        try await runCLI(["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--", Products.path("searchlight"), "--socket", socket] + arguments,
            socket: nil, executable: "/usr/bin/setpriv")
    }

    @Test("another uid's bundle is never returned by the vector side")
    func otherUID() async throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let model = try SemanticSearchTests.staticModelDirectory(dir)
        chmod(model, 0o755)
        let daemon = try await DaemonProcess(arguments: ["--system", "--model-dir", model], dir: dir)
        try await SemanticSearchTests.importItems(Array(SemanticSearchTests.items.prefix(1)), bundle: "com.alice.music", daemon: daemon, dir: dir) {
            try await cli(as: IsolationTests.alice, $0, socket: daemon.socket)
        }
        try await SemanticSearchTests.importItems(Array(SemanticSearchTests.items.dropFirst()), bundle: "com.bob.apps", daemon: daemon, dir: dir) {
            try await cli(as: IsolationTests.bob, $0, socket: daemon.socket)
        }
        let alice = try await cli(as: IsolationTests.alice, ["search", "com.alice.music", "listen to songs", "--json"], socket: daemon.socket)
        #expect(alice.status == 0 && alice.stdout.contains("\"music\""), "\(alice.stdout) \(alice.stderr)")
        let bob = try await cli(as: IsolationTests.bob, ["search", "com.bob.apps", "listen to songs", "--json", "--explain"], socket: daemon.socket)
        #expect(bob.status == 0 && !bob.stdout.contains("\"music\""), "\(bob.stdout) \(bob.stderr)")
        let denied = try await cli(as: IsolationTests.bob, ["search", "com.alice.music", "listen to songs"], socket: daemon.socket)
        #expect(denied.status == 1 && !denied.stdout.contains("music"))
    }
}
