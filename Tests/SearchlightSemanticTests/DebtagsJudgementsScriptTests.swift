import Foundation
import Testing
import TestThreads

enum PythonCheck {
    static let available = runTool("/bin/sh", ["-c", "python3 --version"], environment: [:]).status == 0
}

/// The relevance set's script (Scripts/semantic/make-debtags-judgements.py), run for real on a
/// small vocabulary, tag database and corpus written here, and the committed files it made: the
/// tuning half must stay the queries the fusion constants were chosen on, the held-out half must
/// share none of them, and the union must be exactly both.
@Suite("relevance set (Scripts/semantic/make-debtags-judgements.py)", .onOwnThreads,
       .enabled(if: PythonCheck.available, "SKIPPED: python3 is not installed, and the script needs it"))
struct DebtagsJudgementsScriptTests {
    static let script = TestModel.repositoryFile("Scripts/semantic/make-debtags-judgements.py")

    /// A vocabulary of `tags` (tag → description), a tag database giving each tag `counts[tag]`
    /// packages, and a corpus holding every such package once. Returns the folder.
    static func fixture(tags: [(String, String)], counts: [String: Int]) throws -> String {
        let dir = NSTemporaryDirectory() + "debtags-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir + "/out", withIntermediateDirectories: true)
        var vocabulary = "Facet: use\nDescription: Purpose\n\n"
        for (tag, description) in tags { vocabulary += "Tag: \(tag)\nDescription: \(description)\n Longer text.\n\n" }
        try vocabulary.write(toFile: dir + "/vocabulary", atomically: true, encoding: .utf8)
        var packageTags: [String: [String]] = [:]
        for (tag, n) in counts { for i in 0..<n { packageTags["pkg-\(tag.replacingOccurrences(of: ":", with: "-"))-\(i)", default: []].append(tag) } }
        try packageTags.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value.joined(separator: ", "))" }.joined(separator: "\n")
            .write(toFile: dir + "/package-tags", atomically: true, encoding: .utf8)
        let corpus = packageTags.keys.sorted().map { #"{"id": "\#($0)_1.0_all", "title": "\#($0)"}"# }.joined(separator: "\n") + "\n"
        try corpus.write(toFile: dir + "/corpus.jsonl", atomically: true, encoding: .utf8)
        return dir
    }

    static func run(_ dir: String) -> ScriptResult {
        runTool("/usr/bin/env", ["python3", script, dir + "/corpus.jsonl", dir + "/out", "--vocabulary", dir + "/vocabulary",
                                 "--package-tags", dir + "/package-tags"], environment: [:])
    }

    static func lines(_ path: String) throws -> [[String: Any]] {
        try Data(contentsOf: URL(fileURLWithPath: path)).split(separator: 0x0A).map {
            try JSONSerialization.jsonObject(with: Data($0)) as! [String: Any]
        }
    }

    @Test("eligible tags alternate between tuning and held-out in name order; the union holds both, with their split")
    func splitsAlternately() throws {
        let tags = ["use::a", "use::b", "use::c", "use::d", "use::e"].map { ($0, "Query for \($0)") }
        let dir = try Self.fixture(tags: tags, counts: Dictionary(uniqueKeysWithValues: tags.map { ($0.0, 20) }))
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let result = Self.run(dir)
        #expect(result.status == 0, "\(result.output)")
        let tuning = try Self.lines(dir + "/out/debtags-tuning.jsonl"), heldOut = try Self.lines(dir + "/out/debtags-heldout.jsonl")
        let all = try Self.lines(dir + "/out/debtags-all.jsonl")
        #expect(tuning.map { $0["tag"] as? String } == ["use::a", "use::c", "use::e"])
        #expect(heldOut.map { $0["tag"] as? String } == ["use::b", "use::d"])
        #expect(all.map { $0["tag"] as? String } == ["use::a", "use::b", "use::c", "use::d", "use::e"])
        #expect(all.map { $0["split"] as? String } == ["tuning", "held-out", "tuning", "held-out", "tuning"])
        #expect(tuning.allSatisfy { $0["split"] as? String == "tuning" } && heldOut.allSatisfy { $0["split"] as? String == "held-out" })
        #expect((tuning.first?["relevant"] as? [String])?.count == 20)
        #expect(tuning.first?["query"] as? String == "Query for use::a")
    }

    @Test("skipped facets, placeholders, tags outside 15 to 600 packages and name-only descriptions are left out")
    func eligibility() throws {
        let tags = [("use::kept", "A real query"), ("role::program", "Program"), ("use::TODO", "Needs tagging"),
                    ("use::rare", "Rare thing"), ("use::common", "Common thing"), ("use::monitoring", "Monitoring"),
                    ("interface::x11", "X Window System")]
        let counts = ["use::kept": 15, "role::program": 50, "use::TODO": 50, "use::rare": 14, "use::common": 601,
                      "use::monitoring": 50, "interface::x11": 50]
        let dir = try Self.fixture(tags: tags, counts: counts)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let result = Self.run(dir)
        #expect(result.status == 0, "\(result.output)")
        #expect(try Self.lines(dir + "/out/debtags-all.jsonl").map { $0["tag"] as? String } == ["use::kept"])
        let sources = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/out/debtags-sources.json"))) as! [String: Any]
        #expect(sources["eligible_tags"] as? Int == 1)
    }

    @Test("the same inputs give byte-identical files, the inputs' SHA-256 recorded")
    func deterministic() throws {
        let tags = (0..<6).map { ("use::t\($0)", "Query \($0)") }
        let dir = try Self.fixture(tags: tags, counts: Dictionary(uniqueKeysWithValues: tags.map { ($0.0, 16) }))
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let names = ["debtags-tuning.jsonl", "debtags-heldout.jsonl", "debtags-all.jsonl", "debtags-sources.json"]
        #expect(Self.run(dir).status == 0)
        let first = try names.map { try Data(contentsOf: URL(fileURLWithPath: dir + "/out/" + $0)) }
        #expect(Self.run(dir).status == 0)
        let second = try names.map { try Data(contentsOf: URL(fileURLWithPath: dir + "/out/" + $0)) }
        #expect(first == second)
        let sources = try JSONSerialization.jsonObject(with: first[3]) as! [String: Any]
        let vocabularySHA = runTool("/bin/sh", ["-c", "sha256sum \"$0\" | cut -d' ' -f1", dir + "/vocabulary"], environment: [:])
            .output.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect((sources["vocabulary"] as? [String: Any])?["sha256"] as? String == vocabularySHA)
    }

    @Test("a missing debtags file is refused with what to install, and nothing is written")
    func missingInput() throws {
        let dir = try Self.fixture(tags: [("use::a", "A query")], counts: ["use::a": 20])
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.removeItem(atPath: dir + "/package-tags")
        let result = Self.run(dir)
        #expect(result.status == 2)
        #expect(result.output.contains("apt-get install debtags"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir + "/out").isEmpty)
    }

    @Test("the committed set: 65 tuning queries as chosen on before, held-out disjoint from them, the union exactly both")
    func committedFiles() throws {
        let base = "Scripts/semantic/relevance/"
        let tuning = try TestModel.jsonLines(base + "debtags-tuning.jsonl"), heldOut = try TestModel.jsonLines(base + "debtags-heldout.jsonl")
        let all = try TestModel.jsonLines(base + "debtags-all.jsonl")
        let tuningTags = Set(tuning.compactMap { $0["tag"] as? String }), heldOutTags = Set(heldOut.compactMap { $0["tag"] as? String })
        #expect(tuning.count == 65 && tuningTags.count == 65)
        #expect(!heldOut.isEmpty && heldOutTags.count == heldOut.count)
        #expect(tuningTags.isDisjoint(with: heldOutTags))
        #expect(all.count == tuning.count + heldOut.count)
        #expect(Set(all.compactMap { $0["tag"] as? String }) == tuningTags.union(heldOutTags))
        for line in all {
            let tag = line["tag"] as? String ?? ""
            #expect(line["split"] as? String == (tuningTags.contains(tag) ? "tuning" : "held-out"), "\(tag)")
        }
        // Today's tuning half, as the constants were chosen on it: its first and last tags.
        #expect(tuning.first?["tag"] as? String == "admin::automation" && tuning.last?["tag"] as? String == "works-with::vcs")
        let sources = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: TestModel.repositoryFile(base + "debtags-sources.json"))))
            as! [String: Any]
        let files = sources["files"] as? [String: [String: Int]]
        #expect(files?["debtags-all.jsonl"]?["queries"] == all.count)
        #expect(files?["debtags-heldout.jsonl"]?["queries"] == heldOut.count)
    }
}
