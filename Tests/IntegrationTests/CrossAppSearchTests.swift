import Foundation
import Testing
import TestThreads
import SearchlightWire

/// `searchlight search TEXT` (an admin query without a bundle) ranks every app's items as one
/// ranking (Docs/Architecture.md, "Queries"), through the real daemon.
@Suite("Search across apps", .onOwnThreads, .serialized)
struct CrossAppSearchTests {
    /// 90 items whose words are spread unevenly: a word common in one half is rare in the other,
    /// so each app's own statistics would score it differently from the union's.
    static let items: [String] = {
        let words = ["bridge", "natural", "park", "stone", "river", "arch", "canyon", "trail", "desert", "water",
                     "photo", "editor", "image", "music", "player", "audio", "mail", "server", "chess", "board"]
        var seed: UInt64 = 99
        func next() -> Int {
            seed = seed &* 6364136223846793005 &+ 1442695040888963407
            return Int(seed >> 33)
        }
        return (0..<90).map { i in
            let lean = i < 45 ? 0 : 10
            let text = (0..<(2 + next() % 10)).map { _ in words[next() % 3 == 0 ? next() % 20 : lean + next() % 10] }.joined(separator: " ")
            let title = (0..<(1 + next() % 3)).map { _ in words[next() % 20] }.joined(separator: " ")
            return #"{"uniqueIdentifier":"item\#(i)","attributeSet":{"title":"\#(title)","textContent":"\#(text)"}}"#
        }
    }()

    /// (identifier, score) best first, from `searchlight search … --json --explain`.
    func ranking(_ args: [String], _ daemon: DaemonProcess) async throws -> [(String, Double)] {
        let r = try await runCLI(["search"] + args + ["--json", "--explain", "--limit", "50"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        let items = (try? JSONValue.parse(Array(r.stdout.utf8)))?["items"]?.arrayValue ?? []
        return items.map { ($0["uniqueIdentifier"]?.stringValue ?? "?", $0["explain"]?["score"]?.doubleValue ?? .nan) }
    }

    @Test("lexical: a query over apps A and B ranks as the same query over one app holding A∪B, score for score")
    func splitRanksAsUnion() async throws {
        let dir = TempDir(), unionDir = TempDir()
        let split = try await DaemonProcess(dir: dir)
        let union = try await DaemonProcess(dir: unionDir)
        try await SemanticSearchTests.importItems(Array(Self.items[..<45]), bundle: "com.example.a", daemon: split, dir: dir) {
            try await runCLI($0, socket: split.socket)
        }
        try await SemanticSearchTests.importItems(Array(Self.items[45...]), bundle: "com.example.b", daemon: split, dir: dir) {
            try await runCLI($0, socket: split.socket)
        }
        try await SemanticSearchTests.importItems(Self.items, bundle: "com.example.all", daemon: union, dir: unionDir) {
            try await runCLI($0, socket: union.socket)
        }
        for q in ["bridge", "natural bridge", "stone arch", "photo editor", "music player", "canyon trail water"] {
            let across = try await ranking([q, "--no-semantic"], split)
            let oneApp = try await ranking(["com.example.all", q, "--no-semantic"], union)
            #expect(!oneApp.isEmpty && !across.isEmpty, "\(q)")
            // Best-match both ways (issue 37): the items with every word, then a tail with some
            // of them, the whole ranking compared.
            let one = oneApp
            #expect(across.map(\.1) == one.map(\.1), "\(q): \(across.prefix(4)) vs \(one.prefix(4))")
            // Ties go to the lower rowid, which differs between the two daemons: the same items at each score.
            let group = { (l: [(String, Double)]) in Dictionary(grouping: l, by: \.1).mapValues { Set($0.map(\.0)) } }
            #expect(group(across) == group(one), "\(q)")
        }
    }

    @Test("\"natural bridges\": an exact name hit in one app ranks above a meaning-only near miss in another")
    func exactHitAboveNearMissInAnotherApp() async throws {
        let dir = TempDir()
        let daemon = try await DaemonProcess(arguments: ["--model-dir", try SemanticSearchTests.staticModelDirectory(dir)], dir: dir)
        let cli = { (args: [String]) async throws -> CLIResult in try await runCLI(args, socket: daemon.socket) }
        // Visited first (bundles in name order): per-app rankings merged by score tied the two #1s and kept this one first.
        try await SemanticSearchTests.importItems([
            #"{"uniqueIdentifier":"arches","attributeSet":{"title":"rock-arches","contentDescription":"stone arch and bridge formations of the canyon country"}}"#,
        ], bundle: "com.example.apackages", daemon: daemon, dir: dir, runner: cli)
        try await SemanticSearchTests.importItems([
            #"{"uniqueIdentifier":"tag-1","attributeSet":{"displayName":"Natural Bridges State Park","keywords":["Utah"]}}"#,
        ], bundle: "com.example.tags", daemon: daemon, dir: dir, runner: cli)
        let r = try await runCLI(["search", "natural bridges", "--json", "--explain"], socket: daemon.socket)
        let items = (try? JSONValue.parse(Array(r.stdout.utf8)))?["items"]?.arrayValue ?? []
        let ids = items.compactMap { $0["uniqueIdentifier"]?.stringValue }
        // The near miss is there (the vector side found it), below the exact hit.
        #expect(ids == ["tag-1", "arches"], "\(r.stdout) \(r.stderr)")
        #expect(items.first?["explain"]?["lexicalRank"]?.intValue == 1)
        #expect(items.last?["explain"]?["lexicalRank"] == nil && items.last?["explain"]?["vectorRank"] != nil, "\(r.stdout)")
    }

    @Test("suggestions across apps: no correction for words another app has; a word no app has is corrected; completions stay")
    func correctionsOnlyForWordsNoAppHas() async throws {
        let dir = TempDir()
        let daemon = try await DaemonProcess(dir: dir)
        let cli = { (args: [String]) async throws -> CLIResult in try await runCLI(args, socket: daemon.socket) }
        try await SemanticSearchTests.importItems([
            #"{"uniqueIdentifier":"bridge-utils","attributeSet":{"title":"bridge-utils","contentDescription":"nature of the neutral bridge"}}"#,
        ], bundle: "com.example.apackages", daemon: daemon, dir: dir, runner: cli)
        try await SemanticSearchTests.importItems([
            #"{"uniqueIdentifier":"tag-1","attributeSet":{"displayName":"Natural Bridges State Park","keywords":["Utah"]}}"#,
        ], bundle: "com.example.tags", daemon: daemon, dir: dir, runner: cli)
        func suggestions(_ text: String) async throws -> [(text: String, kind: String)] {
            let r = try await runCLI(["search", text, "--json", "--suggestions", "5", "--no-semantic"], socket: daemon.socket)
            #expect(r.status == 0, "\(r.stderr)")
            return ((try? JSONValue.parse(Array(r.stdout.utf8)))?["suggestions"]?.arrayValue ?? []).map {
                ($0["text"]?.stringValue ?? "", $0["kind"]?.stringValue ?? "")
            }
        }
        // Each word has hits (in the Tags app): the Packages app alone would have offered "nature bridge".
        let spelled = try await suggestions("natural bridges ")
        #expect(spelled.isEmpty, "\(spelled)")
        let typing = try await suggestions("natural bridges")
        #expect(!typing.contains { $0.kind == "correction" }, "\(typing)")
        // A word no app holds is corrected.
        let misspelt = try await suggestions("natral bridges ")
        #expect(misspelt.contains { $0.kind == "correction" && $0.text == "natural bridges " }, "\(misspelt)")
        // Completions of the word being typed stay.
        let completing = try await suggestions("natural bri")
        #expect(completing.contains { $0.kind == "completion" && $0.text == "natural bridges" }, "\(completing)")
    }
}
