import Foundation
import SearchlightKit
import Testing
import TestThreads

/// The `searchlight` CLI, run as a built binary against a real daemon on a temp socket.
/// Build first: `swift build` builds `searchlight` and `searchlightd`; `swift test` does not.
@Suite(.onOwnThreads, .serialized)
struct CLITests {
    static let bundle = "com.example.notes"

    static let notes = """
        {"uniqueIdentifier":"n1","domainIdentifier":"notes.work","attributeSet":{"title":"Quarterly report","textContent":"revenue of the json parser team","keywords":["finance"]}}
        {"uniqueIdentifier":"n2","domainIdentifier":"notes.home","attributeSet":{"title":"Shopping list","textContent":"milk eggs bread"}}

        {"uniqueIdentifier":"n3","domainIdentifier":"notes.work.old","attributeSet":{"displayName":"Old memo","textContent":"parser design notes"}}

        """

    static let everything = "uniqueIdentifier == \"*\""

    func write(_ text: String, to name: String, in daemon: DaemonProcess) throws -> String {
        let path = daemon.dir.path + "/" + name
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        return path
    }

    /// A daemon holding the three notes.
    func daemonWithNotes() async throws -> DaemonProcess {
        let daemon = try await DaemonProcess()
        let file = try write(Self.notes, to: "notes.jsonl", in: daemon)
        let r = try await runCLI(["import", Self.bundle, file], socket: daemon.socket)
        try #require(r.status == 0, "import failed: \(r.stderr)")
        return daemon
    }

    func identifiers(_ daemon: DaemonProcess, bundle: String = bundle) async throws -> [String] {
        let r = try await runCLI(["query", bundle, Self.everything], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        return r.stdout.split(separator: "\n").compactMap { $0.split(separator: " ").first.map(String.init) }.sorted()
    }

    // MARK: - import, query, search

    @Test("import then query and search find the items")
    func importQuerySearch() async throws {
        let daemon = try await daemonWithNotes()
        await #expect(try identifiers(daemon) == ["n1", "n2", "n3"])

        let query = try await runCLI(["query", Self.bundle, "textContent == \"*parser*\"cd", "--fetch", "keywords,domainIdentifier"], socket: daemon.socket)
        #expect(query.status == 0)
        let lines = query.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2)
        #expect(lines.contains { $0.hasPrefix("n1") && $0.contains("Quarterly report") && $0.contains("finance") && $0.contains("notes.work") })
        #expect(lines.contains { $0.hasPrefix("n3") && $0.contains("Old memo") })

        let search = try await runCLI(["search", "parser"], socket: daemon.socket)
        #expect(search.status == 0, "\(search.stderr)")
        #expect(search.stdout.contains("n1") && search.stdout.contains("n3") && search.stdout.contains(Self.bundle))
        #expect(!search.stdout.contains("n2"))

        let own = try await runCLI(["search", Self.bundle, "milk"], socket: daemon.socket)
        #expect(own.status == 0)
        #expect(own.stdout.contains("Shopping list"))
    }

    @Test("query --json prints one wire-shape item per line")
    func queryJSON() async throws {
        let daemon = try await daemonWithNotes()
        let r = try await runCLI(["query", Self.bundle, Self.everything, "--json", "--limit", "2"], socket: daemon.socket)
        #expect(r.status == 0)
        let items = try r.stdout.split(separator: "\n").map { try JSONValue.parse(String($0)) }
        #expect(items.count == 2)
        for item in items {
            #expect(item["uniqueIdentifier"]?.stringValue != nil)
            #expect(item["attributeSet"]?["textContent"]?.stringValue != nil)
        }
    }

    @Test("search --json answers items tagged with their bundle, and suggestions")
    func searchJSON() async throws {
        let daemon = try await daemonWithNotes()
        let r = try await runCLI(["search", "pars", "--json", "--suggestions", "3"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        let answer = try JSONValue.parse(r.stdout)
        let items = answer["items"]?.arrayValue ?? []
        #expect(Set(items.compactMap { $0["uniqueIdentifier"]?.stringValue }) == ["n1", "n3"])
        #expect(items.allSatisfy { $0["bundle"]?.stringValue == Self.bundle })
        #expect(answer["suggestions"]?.arrayValue?.contains { $0["text"]?.stringValue == "parser" } == true)
    }

    @Test("import with one bad line imports nothing and names the line")
    func importBadLine() async throws {
        let daemon = try await DaemonProcess()
        let file = try write("""
            {"uniqueIdentifier":"a","attributeSet":{"title":"fine"}}
            {"uniqueIdentifier":"b","attributeSet":{"title":5}}
            {"uniqueIdentifier":"c","attributeSet":{"title":"fine too"}}
            """, to: "bad.jsonl", in: daemon)
        let r = try await runCLI(["import", Self.bundle, file], socket: daemon.socket)
        #expect(r.status == 1)
        #expect(r.stderr.contains("line 2"))
        #expect(r.stderr.contains("attributeSet.title"))
        #expect(r.stderr.contains("nothing was imported"))
        await #expect(try identifiers(daemon).isEmpty)
    }

    @Test("import names a line that is not JSON")
    func importNotJSON() async throws {
        let daemon = try await DaemonProcess()
        let r = try await runCLI(["import", Self.bundle, "-"], socket: daemon.socket, stdin: "{\"uniqueIdentifier\":\"a\"}\nnot json\n")
        #expect(r.status == 1)
        #expect(r.stderr.contains("stdin line 2: invalid JSON"))
    }

    @Test("import reads stdin and a gzip file")
    func importStdinAndGzip() async throws {
        let daemon = try await DaemonProcess()
        let stdin = try await runCLI(["import", "com.example.stdin", "-"], socket: daemon.socket, stdin: Self.notes)
        #expect(stdin.status == 0, "\(stdin.stderr)")
        #expect(stdin.stdout.contains("imported 3 items"))

        let plain = try write(Self.notes, to: "notes.jsonl", in: daemon)
        let gzip = Process()
        gzip.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        gzip.arguments = ["gzip", "-k", plain]
        try gzip.run()
        gzip.waitUntilExit()
        let r = try await runCLI(["import", "com.example.gz", plain + ".gz", "--batch", "2"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        await #expect(try identifiers(daemon, bundle: "com.example.gz") == ["n1", "n2", "n3"])
    }

    @Test("import with --client-state commits the items with that state")
    func importClientState() async throws {
        let daemon = try await DaemonProcess()
        let file = try write(Self.notes, to: "notes.jsonl", in: daemon)
        let r = try await runCLI(["import", Self.bundle, file, "--client-state", "v7", "--batch", "1"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        let index = daemon.index(Self.bundle)
        #expect(try await index.fetchLastClientState() == Data("v7".utf8))
        await #expect(try identifiers(daemon) == ["n1", "n2", "n3"])
    }

    @Test("2000 corpus items import, and search finds \"json parser\"", .enabled(if: Products.corpus != nil))
    func importCorpus() async throws {
        let daemon = try await DaemonProcess()
        let file = try write(try Self.corpusAsWireItems(2000), to: "corpus.jsonl", in: daemon)
        let r = try await runCLI(["import", "org.debian.packages", file], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("imported 2000 items"))
        #expect(r.stdout.contains("items/s"))

        let search = try await runCLI(["search", "json parser", "--json"], socket: daemon.socket)
        #expect(search.status == 0, "\(search.stderr)")
        #expect(try JSONValue.parse(search.stdout)["items"]?.arrayValue?.isEmpty == false)
    }

    /// The first `count` corpus items in the wire shape `import` reads.
    static func corpusAsWireItems(_ count: Int) throws -> String {
        try Corpus.load(limit: count).map(\.json.jsonString).joined(separator: "\n") + "\n"
    }

    // MARK: - delete, erase, indexing

    @Test("delete --identifiers removes those items")
    func deleteIdentifiers() async throws {
        let daemon = try await daemonWithNotes()
        let r = try await runCLI(["delete", Self.bundle, "--identifiers", "n1", "n2"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        await #expect(try identifiers(daemon) == ["n3"])
    }

    @Test("delete --domains removes the domain and its subdomains")
    func deleteDomains() async throws {
        let daemon = try await daemonWithNotes()
        let r = try await runCLI(["delete", Self.bundle, "--domains", "notes.work"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        await #expect(try identifiers(daemon) == ["n2"])
    }

    @Test("delete without a choice of what to delete is a usage error")
    func deleteNeedsChoice() async throws {
        let daemon = try await daemonWithNotes()
        let r = try await runCLI(["delete", Self.bundle], socket: daemon.socket)
        #expect(r.status == 2)
        #expect(r.stderr.contains("--identifiers, --domains or --all"))
        await #expect(try identifiers(daemon).count == 3)
    }

    @Test("erase removes the bundle's items")
    func erase() async throws {
        let daemon = try await daemonWithNotes()
        let r = try await runCLI(["erase", Self.bundle], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        await #expect(try identifiers(daemon).isEmpty)
    }

    @Test("erase --reindex is refused before anything is erased")
    func eraseReindexRefused() async throws {
        let daemon = try await daemonWithNotes()
        let r = try await runCLI(["erase", Self.bundle, "--reindex"], socket: daemon.socket)
        #expect(r.status == 1)
        #expect(r.stderr.contains("nothing was erased"))
        await #expect(try identifiers(daemon).count == 3)
    }

    @Test("indexing off makes import fail with a message about indexing")
    func indexingOff() async throws {
        let daemon = try await daemonWithNotes()
        let off = try await runCLI(["indexing", "off", Self.bundle], socket: daemon.socket)
        #expect(off.status == 0, "\(off.stderr)")
        let file = try write(Self.notes, to: "again.jsonl", in: daemon)
        let r = try await runCLI(["import", Self.bundle, file], socket: daemon.socket)
        #expect(r.status == 1)
        #expect(r.stderr.contains("indexing is off"))

        #expect(try await runCLI(["indexing", "on", Self.bundle], socket: daemon.socket).status == 0)
        #expect(try await runCLI(["import", Self.bundle, file], socket: daemon.socket).status == 0)
    }

    // MARK: - status, check, version

    @Test("status --json shows the bundle with its item count")
    func statusJSON() async throws {
        let daemon = try await daemonWithNotes()
        let r = try await runCLI(["status", "--json"], socket: daemon.socket)
        #expect(r.status == 0)
        let status = try JSONValue.parse(r.stdout)
        let bundle = status["bundles"]?.arrayValue?.first { $0["bundle"]?.stringValue == Self.bundle }
        #expect(bundle?["indexes"]?.arrayValue?.first?["items"]?.intValue == 3)
        #expect(status["socket"]?.stringValue == daemon.socket)
    }

    @Test("status prints a header and a table of indexes")
    func statusTable() async throws {
        let daemon = try await daemonWithNotes()
        let r = try await runCLI(["status", Self.bundle], socket: daemon.socket)
        #expect(r.status == 0)
        #expect(r.stdout.contains("mode user"))
        #expect(r.stdout.contains("socket \(daemon.socket)"))
        let row = r.stdout.split(separator: "\n").first { $0.hasPrefix(Self.bundle) }
        #expect(row?.split(separator: " ").contains("3") == true)
    }

    @Test("check exits 0 on a healthy index")
    func checkHealthy() async throws {
        let daemon = try await daemonWithNotes()
        let r = try await runCLI(["check"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("\(Self.bundle) (default): ok"))
    }

    @Test("version prints the CLI's and the daemon's versions")
    func version() async throws {
        let daemon = try await DaemonProcess()
        let r = try await runCLI(["version", "--json"], socket: daemon.socket)
        #expect(r.status == 0)
        let v = try JSONValue.parse(r.stdout)
        #expect(v["cli"]?.stringValue?.isEmpty == false)
        #expect(v["daemon"]?.stringValue?.isEmpty == false)

        let alone = try await runCLI(["version"], socket: daemon.dir.path + "/absent.sock")
        #expect(alone.status == 0)
        #expect(alone.stdout.contains("searchlight "))
        #expect(alone.stdout.contains("not reachable"))
    }

    // MARK: - the command line itself

    @Test("a missing argument exits 2 with the command's usage")
    func usageError() async throws {
        let r = try await runCLI(["query", Self.bundle], socket: "/nonexistent.sock")
        #expect(r.status == 2)
        #expect(r.stderr.contains("searchlight: missing QUERY"))
        #expect(r.stderr.contains("Usage: searchlight query BUNDLE"))
    }

    @Test("a bad option is named")
    func badOption() async throws {
        let unknown = try await runCLI(["query", Self.bundle, "x", "--colour"], socket: "/nonexistent.sock")
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("'--colour'"))
        let badValue = try await runCLI(["import", Self.bundle, "-", "--batch", "lots"], socket: "/nonexistent.sock")
        #expect(badValue.status == 2)
        #expect(badValue.stderr.contains("--batch"))
    }

    @Test("an unknown subcommand exits 2")
    func unknownSubcommand() async throws {
        let r = try await runCLI(["frobnicate"], socket: "/nonexistent.sock")
        #expect(r.status == 2)
        #expect(r.stderr.contains("unknown command 'frobnicate'"))
    }

    @Test("--help prints a command's options and exits 0")
    func help() async throws {
        let r = try await runCLI(["import", "--help"], socket: nil)
        #expect(r.status == 0)
        #expect(r.stdout.contains("--client-state S"))
    }

    @Test("an unreachable daemon exits 3 and says what to do")
    func unreachable() async throws {
        let dir = TempDir()
        let r = try await runCLI(["status"], socket: dir.path + "/absent.sock")
        #expect(r.status == 3)
        #expect(r.stderr.hasPrefix("searchlight: cannot reach searchlightd"))
    }

    @Test("global options may follow the subcommand")
    func globalOptionsAfterSubcommand() async throws {
        let daemon = try await daemonWithNotes()
        let r = try await runCLI(["status", "--json", "--socket", daemon.socket], socket: nil)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try JSONValue.parse(r.stdout)["bundles"]?.arrayValue?.count == 1)
    }

    @Test("simulate prints the daemon's refusal and exits 1")
    func simulateRefused() async throws {
        let daemon = try await DaemonProcess()
        let r = try await runCLI(["simulate", "idle", "org.example.nothing"], socket: daemon.socket)
        #expect(r.status == 1)
        #expect(r.stderr.contains("has no index"), "\(r.stderr)")
    }

    @Test("invoked as mdutil, -s shows status and -i off turns indexing off")
    func mdutil() async throws {
        let daemon = try await daemonWithNotes()
        let links = TempDir()
        let mdutil = links.path + "/mdutil"
        try FileManager.default.createSymbolicLink(atPath: mdutil, withDestinationPath: Products.path("searchlight"))
        // runCLI runs a program named relative to the products directory.
        let relative = String(repeating: "../", count: Products.directory.split(separator: "/").count) + mdutil.dropFirst()

        let status = try await runCLI(["-s"], socket: daemon.socket, executable: relative)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains(Self.bundle))

        let off = try await runCLI(["-i", "off", Self.bundle], socket: daemon.socket, executable: relative)
        #expect(off.status == 0, "\(off.stderr)")
        let json = try JSONValue.parse(try await runCLI(["status", "--json"], socket: daemon.socket).stdout)
        #expect(json["bundles"]?.arrayValue?.first?["indexingEnabled"]?.boolValue == false)

        let bad = try await runCLI(["-x"], socket: daemon.socket, executable: relative)
        #expect(bad.status == 2)
        #expect(bad.stderr.contains("Usage: mdutil"))
    }
}
