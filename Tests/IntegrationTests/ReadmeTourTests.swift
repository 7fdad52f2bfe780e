#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import Testing
import TestThreads

/// README.md's "A 60-second tour", run as a new user runs it: its lines taken from README.md
/// itself (so that the README cannot drift from what the programs print), each through `sh` from
/// the repository's root, against a daemon started as `make run` starts it (the Tags demo photos
/// seeded first, the sample units, the semantic model), each line's output checked for what its
/// comment promises.
@Suite("README tour", .onOwnThreads, .serialized)
struct ReadmeTourTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let units = root + "/launchd-like-units/extensions"
    static let samples = ["journal": "Journal", "notes": "Notes", "packages": "Packages", "tags": "Tags", "webpages": "WebPages"]
    static let semanticLine = #"searchlight search com.example.demo "read web feeds" --explain"#

    struct TourLine: CustomStringConvertible {
        var command: String
        var comment: String
        var description: String { command }
    }

    /// The tour's lines: the first ```sh block after the heading "## A 60-second tour", each line
    /// split at its comment (" # ").
    static func tourLines() throws -> [TourLine] {
        let readme = try String(contentsOfFile: root + "/README.md", encoding: .utf8)
        guard let heading = readme.range(of: "## A 60-second tour"),
              let open = readme.range(of: "```sh\n", range: heading.upperBound..<readme.endIndex),
              let close = readme.range(of: "\n```", range: open.upperBound..<readme.endIndex)
        else { throw HarnessError("README.md has no ```sh block under \"## A 60-second tour\"") }
        return readme[open.upperBound..<close.lowerBound].split(separator: "\n").map { line in
            guard let hash = line.range(of: " # ") else { return TourLine(command: String(line), comment: "") }
            return TourLine(command: line[..<hash.lowerBound].trimmingCharacters(in: .whitespaces),
                            comment: line[hash.upperBound...].trimmingCharacters(in: .whitespaces))
        }
    }

    /// What a tour line printed.
    struct Output: Sendable {
        var status: Int32
        var stdout: String
        var stderr: String
        var lines: [String] { stdout.split(separator: "\n").map(String.init) }
    }

    /// What the checks can reach besides the output.
    struct Tour: Sendable {
        let daemon: DaemonProcess
        let environment: [String: String]
        let model: Bool
    }

    typealias Check = @Sendable (Output, Tour) async throws -> [String]

    /// Each line's check, by its command exactly as README.md writes it. A line without one fails
    /// the test: a new tour line comes with what it promises.
    static let checks: [String: Check] = [
        "export PATH=$PWD/.build/debug:$PATH": { out, _ in
            out.status == 0 && out.stdout.isEmpty ? [] : ["the PATH line failed"]
        },
        #"searchlight search "json parser""#: { out, _ in
            // Across every app: the journal's and the notes' entries on JSON parsers.
            let apps = Set(out.lines.compactMap(ReadmeTourTests.bracketedBundle))
            return apps.isSuperset(of: ["org.searchlight.sample.journal", "org.searchlight.sample.notes"]) ? [] : ["results from \(apps.sorted()) only"]
        },
        #"searchlight search "keepers trimmed wicks""#: { out, _ in
            // The WebPages sample's lighthouse guide, found by the words of its og:description.
            let pages = out.lines.filter { $0.hasSuffix("[org.searchlight.sample.webpages]") }
            return pages.first?.contains("Lighthouse keeping") == true ? [] : ["the lighthouse guide is not the WebPages result: \(pages)"]
        },
        #"searchlight search "natural bridges""#: { out, _ in
            let tags = out.lines.filter { $0.hasSuffix("[org.searchlight.sample.tags]") }
            var problems: [String] = []
            if !tags.contains(where: { $0.contains("Natural Bridges State Park") }) { problems.append("the tag is not found") }
            if !tags.contains(where: { $0.contains("Sipapu Bridge at sunset") }) { problems.append("a photo it is on is not found") }
            return problems
        },
        #"Extensions/Tags/.build/debug/tags rename-tag "Natural Bridges State Park" "Natural Bridges NM""#: { out, tour in
            guard out.status == 0 else { return ["the rename failed"] }
            // Its photos follow, by the time the command returns (it waits until indexed).
            let items = try await TagsSample.items(socket: tour.daemon.socket)
            let photos = ["photo-1", "photo-2", "photo-3"].filter { items[$0]?.attributeSet.keywords?.contains("Natural Bridges NM") != true }
            return (photos.isEmpty ? [] : ["\(photos) do not have the new tag name"])
                + (items["tag-1"]?.attributeSet.displayName == "Natural Bridges NM" ? [] : ["the tag item is not renamed"])
        },
        "searchlight units": { out, _ in
            let missing = ReadmeTourTests.samples.keys.sorted().filter { name in !out.lines.contains { $0.hasPrefix("org.searchlight.sample.\(name) ") } }
            return missing.isEmpty && out.stdout.contains("PID") && out.stdout.contains("LAUNCHES") ? [] : ["units \(missing) are not listed"]
        },
        "searchlight reindex org.searchlight.sample.packages --all": { out, _ in
            out.stdout.contains("reindex of org.searchlight.sample.packages acknowledged") ? [] : ["no acknowledgement"]
        },
        "mdutil -cr org.searchlight.sample.notes": { out, _ in
            out.stdout.contains("reindex of org.searchlight.sample.notes acknowledged") ? [] : ["no acknowledgement"]
        },
        "searchlight requests": { out, _ in
            out.status == 0 && out.stdout.contains("no reindex requests are journaled") ? [] : ["the journal is not shown empty"]
        },
        "searchlight import com.example.demo Docs/examples/demo.jsonl": { out, _ in
            let count = try String(contentsOfFile: ReadmeTourTests.root + "/Docs/examples/demo.jsonl", encoding: .utf8).split(separator: "\n").count
            return out.stdout.contains("imported \(count) items into com.example.demo") ? [] : ["not \(count) items imported"]
        },
        #"searchlight search com.example.demo "json pars" --suggestions 3"#: { out, _ in
            (out.lines.first == "Top hits:" ? [] : ["no ranked results"])
                + (out.lines.contains { $0.hasPrefix("Suggestions:") && $0.contains("(completion)") } ? [] : ["no completion"])
        },
        #"searchlight search com.example.demo "serch""#: { out, _ in
            out.stdout.contains("Suggestions: search (correction)") ? [] : ["no correction to \"search\""]
        },
        semanticLine: { out, tour in
            guard tour.model else {
                // What the README says happens without the model.
                return out.stderr.contains(#"no items match "read web feeds""#) ? [] : ["without the model: not \"no items match\""]
            }
            // The first result is found by meaning alone, and shares no word (nor a word's stem) with the query.
            guard let first = out.lines.dropFirst().first, out.lines.first == "Top hits:" else { return ["no results"] }
            guard first.contains("lexical -, vector #1") else { return ["the first result is not by meaning alone"] }
            let id = String(first.prefix { $0 != " " })
            let item = try ReadmeTourTests.demoItems()[id]
            let words = Set((item ?? "").lowercased().split { !$0.isLetter }.map(String.init))
            let shared = words.filter { word in ["read", "web", "feed"].contains { word.hasPrefix($0) } }
            guard item != nil else { return ["\(id) is not a demo item"] }
            // A feed reader, as the comment says (not just any near miss: the old demo's nearest was `tracker`).
            return (shared.isEmpty ? [] : ["\(id) shares \(shared.sorted()) with the query"])
                + (words.contains("rss") ? [] : ["\(id) is not a feed reader"])
        },
        #"searchlight query com.example.demo '(keywords == "json"cd) && rankingHint > 20' --fetch title"#: { out, _ in
            out.lines.map { $0.split(separator: " ").map(String.init) } == [["jq", "jq"]] ? [] : ["not jq alone"]
        },
        #"searchlight query com.example.demo 'contentDescription == "*字体*" || textContent == "*검색*"'"#: { out, _ in
            out.lines.map { String($0.prefix { $0 != " " }) } == ["fonts-noto-cjk"] ? [] : ["not the CJK fonts alone"]
        },
        #"searchlight activity save com.example.demo --type com.example.demo.view --title "JSON parser comparison" --id compare"#: { out, tour in
            guard out.stdout == "saved activity compare of com.example.demo\n" else { return ["not saved"] }
            let list = try await runCLI(["activity", "list", "com.example.demo"], socket: tour.daemon.socket)
            return list.stdout.hasPrefix("compare  JSON parser comparison  last used ") ? [] : ["not in the app's history: \(list.stdout)"]
        },
        #"searchlight search "parser comparison""#: { out, _ in
            // The activity, across apps: its app named, marked as an activity.
            let activity = out.lines.filter { $0.hasPrefix("compare ") }
            return activity.count == 1 && activity[0].contains("JSON parser comparison") && activity[0].contains("[com.example.demo]") && activity[0].hasSuffix("(activity)")
                ? [] : ["the activity is not found, marked: \(out.lines)"]
        },
        "searchlight status": { out, tour in
            let bundles = ["com.example.demo"] + ReadmeTourTests.samples.keys.sorted().map { "org.searchlight.sample.\($0)" }
            var problems: [String] = []
            for bundle in bundles {
                // BUNDLE INDEX STATE ITEMS SIZE(2 columns) VECTORS
                guard let row = out.lines.first(where: { $0.hasPrefix(bundle + " ") && $0.contains("(default)") }) else {
                    problems.append("no row for \(bundle)")
                    continue
                }
                let columns = row.split(separator: " ")
                let items = columns.count >= 7 ? Int(columns[3]) : nil
                let vectors = columns.last.flatMap { Int($0) }
                if items == nil || vectors != (tour.model ? items : 0) { problems.append("\(bundle): \(items.map(String.init) ?? "?") items, \(vectors.map(String.init) ?? "?") vectors") }
            }
            let semantic = tour.model ? "semantic search: on" : "semantic search: unavailable"
            return problems + (out.stdout.contains(semantic) ? [] : ["no \"\(semantic)\""])
        },
        "searchlight delete com.example.demo --domains demo.json": { out, tour in
            guard out.stdout.contains("deleted the items of 1 domain") else { return ["nothing deleted"] }
            let jq = try await runCLI(["query", "com.example.demo", #"uniqueIdentifier == "jq""#], socket: tour.daemon.socket)
            return jq.stdout.isEmpty ? [] : ["jq is still there"]
        },
        "mdutil -s": { out, _ in
            out.stdout.hasPrefix("searchlightd ") && out.stdout.contains("BUNDLE") ? [] : ["not the status"]
        },
        "searchlight open com.example.demo liferea --dry-run": { out, _ in
            out.stdout.contains("would open https://packages.debian.org/sid/liferea") ? [] : ["not what opening it would run"]
        },
    ]

    /// `... [BUNDLE]` at the end of a result line of a search across apps.
    static func bracketedBundle(_ line: String) -> String? {
        guard line.hasSuffix("]"), let open = line.lastIndex(of: "[") else { return nil }
        return String(line[line.index(after: open)..<line.index(before: line.endIndex)])
    }

    /// The demo items' text (title, descriptions, keywords, content), by identifier.
    static func demoItems() throws -> [String: String] {
        var out: [String: String] = [:]
        for line in try String(contentsOfFile: root + "/Docs/examples/demo.jsonl", encoding: .utf8).split(separator: "\n") {
            let item = try JSONValue.parse(String(line))
            guard let id = item["uniqueIdentifier"]?.stringValue, let attributes = item["attributeSet"] else { continue }
            let fields = ["title", "displayName", "contentDescription", "textContent"].compactMap { attributes[$0]?.stringValue }
            out[id] = (fields + (attributes["keywords"]?.arrayValue ?? []).compactMap(\.stringValue)).joined(separator: " ")
        }
        return out
    }

    /// The daemon as `make run` starts it: the Tags demo photos seeded (demo.sh) in a temporary
    /// `XDG_DATA_HOME`, the sample units, the model folder; returned once the five initial
    /// reindexes are acknowledged.
    static func startAsMakeRun(model: String?) async throws -> (DaemonProcess, [String: String]) {
        for (name, folder) in samples {
            let program = "\(root)/Extensions/\(folder)/.build/debug/\(name)-extension"
            guard FileManager.default.isExecutableFile(atPath: program) else {
                throw HarnessError("\(program) is not built; run `make extensions` (make test does) before the tests")
            }
        }
        let dir = TempDir("slr")
        let environment = ["XDG_DATA_HOME": dir.path + "/data", "SEARCHLIGHT_SOCKET": dir.path + "/d.sock"]
        let seed = try await shell("Extensions/Tags/Sample/demo.sh Extensions/Tags/.build/debug/tags",
            environment: environment.merging(["SEARCHLIGHT_SOCKET": dir.path + "/no-daemon-yet.sock"]) { $1 })
        guard seed.status == 0 else { throw HarnessError("demo.sh failed (\(seed.status)): \(seed.stderr)") }
        let modelDir = model ?? dir.path + "/no-model"
        try FileManager.default.createDirectory(atPath: modelDir, withIntermediateDirectories: true)
        let daemon = try await DaemonProcess(arguments: ["--units-dir", units, "--model-dir", modelDir], dir: dir,
                                             environment: ["XDG_DATA_HOME": environment["XDG_DATA_HOME"]!])
        guard daemon.socket == environment["SEARCHLIGHT_SOCKET"] else { throw HarnessError("the daemon's socket is \(daemon.socket)") }
        // Units are queued in label order: journal 1, notes 2, packages 3, recentfiles 4, tags 5, webpages 6.
        for (id, name) in ["journal", "notes", "packages", "recentfiles", "tags", "webpages"].enumerated() {
            try await daemon.waitForLog("reindex request acknowledged id=\(id + 1) label=org.searchlight.sample.\(name)", timeout: 120)
        }
        return (daemon, environment)
    }

    /// Runs a line with `sh -c` from the repository's root, as the user types it, after the
    /// tour's `export` lines.
    static func shell(_ line: String, exports: [String] = [], environment: [String: String]) async throws -> Output {
        let script = (exports + [line]).joined(separator: "\n")
        return try await blocking {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/bin/sh")
            p.arguments = ["-c", script]
            p.currentDirectoryURL = URL(fileURLWithPath: root)
            p.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            let out = Pipe(), err = Pipe()
            p.standardOutput = out
            p.standardError = err
            p.standardInput = FileHandle.nullDevice
            try p.run()
            let (stdout, stderr) = readToEnd(p, out: out, err: err)
            return Output(status: p.terminationStatus, stdout: stdout, stderr: stderr)
        }
    }

    /// Runs every tour line in order; the problems, each naming its line.
    static func runTour(_ lines: [TourLine], tour: Tour) async throws -> [String] {
        var problems: [String] = []
        var exports: [String] = []
        for line in lines {
            guard let check = checks[line.command] else {
                problems.append("README tour line `\(line.command)` has no check in ReadmeTourTests.checks: add what its comment (\(line.comment)) promises")
                continue
            }
            let out = try await shell(line.command, exports: exports, environment: tour.environment)
            if line.command.hasPrefix("export ") { exports.append(line.command) }
            var found = try await check(out, tour)
            if out.status != 0 && !found.isEmpty { found.append("exit status \(out.status)") }
            problems += found.map { "`\(line.command)` (# \(line.comment)): \($0)\n  stdout: \(out.stdout.prefix(1500))\n  stderr: \(out.stderr.prefix(500))" }
        }
        return problems
    }

    @Test("every line of the README's tour prints what its comment promises, on a daemon started as make run starts it")
    func tour() async throws {
        let lines = try Self.tourLines()
        #expect(lines.count >= 18, "\(lines)")
        #expect(lines.allSatisfy { !$0.comment.isEmpty || $0.command.hasPrefix("export ") }, "a line without a comment: \(lines.filter { $0.comment.isEmpty })")
        let model = SemanticSearchTests.transformerModel
        let (daemon, environment) = try await Self.startAsMakeRun(model: model)
        let problems = try await Self.runTour(lines, tour: Tour(daemon: daemon, environment: environment, model: model != nil))
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
    }

    @Test("without the model, the tour's meaning line prints what the README says (no items match) and the lexical lines around it hold")
    func tourWithoutModel() async throws {
        let dir = TempDir("slr")
        let empty = dir.path + "/no-model"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        let daemon = try await DaemonProcess(arguments: ["--model-dir", empty], dir: dir)
        let all = try Self.tourLines()
        let wanted = ["export PATH=$PWD/.build/debug:$PATH", "searchlight import com.example.demo Docs/examples/demo.jsonl",
                      #"searchlight search com.example.demo "json pars" --suggestions 3"#, Self.semanticLine,
                      #"searchlight query com.example.demo '(keywords == "json"cd) && rankingHint > 20' --fetch title"#]
        let lines = all.filter { wanted.contains($0.command) }
        #expect(lines.map(\.command) == wanted, "the README's tour no longer has these lines: \(all)")
        let problems = try await Self.runTour(lines, tour: Tour(daemon: daemon, environment: ["SEARCHLIGHT_SOCKET": daemon.socket], model: false))
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
        let readme = try String(contentsOfFile: Self.root + "/README.md", encoding: .utf8)
        #expect(readme.contains(#"prints `no items match "read web feeds"`, and status says"#) && readme.contains("`semantic search: unavailable`"),
                "the README says what happens without the model")
        let status = try await runCLI(["status"], socket: daemon.socket)
        #expect(status.stdout.contains("semantic search: unavailable"), "\(status.stdout)")
    }
}
