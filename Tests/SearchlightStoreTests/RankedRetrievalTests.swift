import Foundation
import Testing
@testable import SearchlightStore
import SearchlightWire

/// The shared Debian corpus (DESIGN §9) as validated items, for the store's own tests.
enum StoreCorpus {
    static let path: String? = {
        [ProcessInfo.processInfo.environment["SEARCHLIGHT_CORPUS"], "../shared/corpus/debian-packages.jsonl.gz"]
            .compactMap { $0 }.first { FileManager.default.fileExists(atPath: $0) }
    }()

    static func load(limit: Int) throws -> [SearchableItem] {
        guard let path else { return [] }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", "gzip -dc \"$0\"", path]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        var items: [SearchableItem] = []
        let validator = ItemValidator()
        for line in data.split(separator: 0x0A) where items.count < limit {
            let o = try JSONValue.parse(Array(line))
            guard let id = o["id"]?.stringValue else { continue }
            var a: [String: JSONValue] = ["contentType": "org.debian.deb-archive"]
            for key in ["title", "contentDescription", "textContent", "keywords"] { a[key] = o[key] }
            var item: [String: JSONValue] = ["uniqueIdentifier": .string(id), "attributeSet": .object(a)]
            if let d = o["domain"]?.stringValue { item["domainIdentifier"] = .string(d.replacingOccurrences(of: "/", with: ".")) }
            items.append(try validator.validate(item: .object(item)))
        }
        return items
    }
}

@Suite("Ranked retrieval")
struct RankedRetrievalTests {
    static func fixture() throws -> StoreFixture {
        try StoreFixture(rankedBuilds: false)
    }

    func ids(_ f: StoreFixture, _ c: [ScoredCandidate]) throws -> [String] {
        try f.store.read { db in
            try c.map { try db.rows("SELECT uid FROM items WHERE rowid = ?", [.integer($0.rowID)]).first?.string(0) ?? "?" }
        }
    }

    @Test("the ranked index answers with the exhaustive ranking's scores and order")
    func smallEquivalence() throws {
        let f = try Self.fixture()
        try f.donate(
            try f.item("a", ["title": "json parser", "textContent": "a fast json parser for the shell"]),
            try f.item("b", ["title": "yaml parser", "textContent": "parses yaml and json documents"]),
            try f.item("c", ["title": "json", "keywords": ["devel", "json"], "rankingHint": 50]),
            try f.item("d", ["title": "parsnip soup", "textContent": "not about json at all, json json"]))
        try f.store.buildRankedIndex()
        for text in ["json", "json pa", "pars", "json parser", "j", "soup", "nothing"] {
            let ranked = try f.store.lexicalCandidates(text, limit: 10)
            let exhaustive = try f.store.lexicalCandidates(text, limit: 10, path: .exhaustive)
            #expect(ranked.usedRankedIndex, "\(text)")
            let described = "\(text): \(try ids(f, ranked.candidates)) vs \(try ids(f, exhaustive.candidates))"
            #expect(ranked.candidates == exhaustive.candidates, "\(described)")
        }
    }
}
