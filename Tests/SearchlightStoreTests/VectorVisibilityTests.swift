import Foundation
import SearchlightSemantic
import SearchlightWire
import Testing
import TestThreads
@testable import SearchlightStore

/// Issue 35 as a property: random donations, re-donations with past and future expiration
/// dates, updates, deletes (identifiers, domains, all), batches that roll back, refinement and
/// time passing, with the vector side of a user query checked after every step against a
/// brute-force scan of the vectors stored in the file.
@Suite("The vector side follows the visible items", .serialized, .onOwnThreads)
struct VectorVisibilityTests {
    /// What the test expects of one item: its text, expiration and domain, and its stored vector
    /// (none, the static table's of `vectorText`, or the refined one).
    struct Expected {
        var title: String
        var expires: Double
        var domain: String?
        var vector: (text: String, refined: Bool)?
    }

    static let titles = ["a puppy playing fetch in the park", "young dog running on the grass", "automobile engine repair manual",
                         "a kitten sleeping on the sofa", "guide to baking sourdough bread", "puppy training for beginners"]
    static let queries = ["young dog", "car repair", "pets at home"]
    static let domains: [String?] = [nil, "a", "a.b", "c"]
    /// Identifiers donated: as many as the store holds (`maxItems`), so only the rollback's batch exceeds it.
    static let pool = (0..<10).map { "item\($0)" }

    static func blob(_ v: (text: String, refined: Bool)) -> [UInt8] { QuantizedVector(staticEncoder.embed(v.text), refined: v.refined).blob }

    /// The rule of `IndexStore.storeVector` for a write of `title` expiring at `expires` over `old`.
    static func vector(after old: Expected?, title: String, expires: Double, now: Double) -> (text: String, refined: Bool)? {
        let visible = expires > now
        guard let old, old.title == title else { return visible ? (title, false) : nil }
        return old.vector ?? (visible ? (title, false) : nil)
    }

    @Test("after every step the vector side returns exactly the visible items a brute-force scan of the stored vectors finds, best first",
          arguments: [UInt64(35), 3535, 20261128])
    func followsVisibleItems(seed: UInt64) throws {
        let f = try StoreFixture(maxItems: Self.pool.count, rankedBuilds: false, vectors: true)
        var random = SeededRandom(state: seed)
        var model: [String: Expected] = [:]
        var now: Double { f.clock.now.timeIntervalSince1970 }
        func expiration() -> Double? {
            switch Int.random(in: 0..<4, using: &random) {
            case 0: now - Double.random(in: 1...1000, using: &random)  // already expired
            case 1: now + Double.random(in: 1...300, using: &random)  // expires while the test runs
            default: nil  // the default, 30 days
            }
        }
        for step in 0..<150 {
            var action = ""
            switch Int.random(in: 0..<100, using: &random) {
            case 0..<35:
                let id = Self.pool.randomElement(using: &random)!, title = Self.titles.randomElement(using: &random)!
                let domain = Self.domains.randomElement(using: &random)!, e = expiration()
                var item = try f.item(id, domain: domain, ["title": .string(title)])
                item.expirationDate = e.map { Date(timeIntervalSince1970: $0) }
                try f.donate(item)
                let expires = e ?? now + 30 * 86400
                model[id] = Expected(title: title, expires: expires, domain: domain,
                                     vector: Self.vector(after: model[id], title: title, expires: expires, now: now))
                action = "donate \(id) \(title.debugDescription) expires \(expires - now)"
            case 35..<50:
                let id = Self.pool.randomElement(using: &random)!
                let title = Bool.random(using: &random) ? Self.titles.randomElement(using: &random)! : nil
                let e = now + (Bool.random(using: &random) ? -1 : 1) * Double.random(in: 1...300, using: &random)
                var item = try f.item(id, title.map { ["title": .string($0)] } ?? ["keywords": ["pet"]], update: true)
                item.expirationDate = Date(timeIntervalSince1970: e)
                try f.donate(item)
                if var old = model[id] {
                    old.vector = Self.vector(after: old, title: title ?? old.title, expires: e, now: now)
                    old.title = title ?? old.title
                    old.expires = e
                    model[id] = old
                }
                action = "update \(id) \(title?.debugDescription ?? "-") expires \(e - now)"
            case 50..<60:
                let ids = Array(Self.pool.shuffled(using: &random).prefix(Int.random(in: 1...2, using: &random)))
                _ = try f.store.applySync([.deleteIdentifiers(ids)])
                for id in ids { model[id] = nil }
                action = "delete \(ids)"
            case 60..<68:
                let d = ["a", "a.b", "c", "ab"].randomElement(using: &random)!
                _ = try f.store.applySync([.deleteDomains([d])])
                model = model.filter { _, e in !(e.domain.map { $0 == d || $0.hasPrefix(d + ".") } ?? false) }
                action = "delete domain \(d)"
            case 68..<70:
                _ = try f.store.applySync([.deleteAll])
                model = [:]
                action = "delete all"
            case 70..<78:
                // A delete that runs, then donations past the item limit: the whole call rolls back.
                let id = Self.pool.randomElement(using: &random)!
                let overflow = try (0...Self.pool.count).map { try f.item("overflow\($0)", ["title": "a puppy"]) }
                #expect(throws: SearchlightError.self) { try f.store.applySync([.deleteIdentifiers([id]), .items(overflow)]) }
                action = "batch rolled back (delete \(id))"
            case 78..<88:
                _ = try f.store.refineVectors(batch: 4, embed: { $0.map(staticEncoder.embed) }, yieldNow: { false })
                for (id, e) in model where e.vector != nil { model[id]!.vector!.refined = true }
                action = "refine"
            default:
                let seconds = Double.random(in: 0...200, using: &random)
                f.clock.advance(seconds)
                action = "time passes \(seconds) s"
            }
            try check(f, model, step: step, action, query: Self.queries.randomElement(using: &random)!)
        }
    }

    @Test("the background fill of an older file gives its expired items no vector")
    func fillSkipsExpired() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        var expired = try f.item("radio", ["title": "Radio tray", "contentDescription": "streaming audio player"])
        expired.expirationDate = f.clock.now.addingTimeInterval(-60)
        try f.donate(expired)
        f.store.close()
        try rewriteFormat(f.dir + "/b/_default.sqlite", to: 4)
        try f.reopen()
        #expect(try f.storedVectors() == 0)
        try f.store.loadVectors()
        let deadline = Date().addingTimeInterval(30)
        while f.store.isFillingVectors && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(!f.store.isFillingVectors)
        #expect(try f.storedVectors() == 5, "the five unexpired items, not the expired one")
    }

    /// The stored vectors are the model's, and the vector side equals a brute-force scan of them.
    func check(_ f: StoreFixture, _ model: [String: Expected], step: Int, _ action: String, query: String) throws {
        let now = f.clock.now.timeIntervalSince1970
        let (stored, uids, visible) = try f.store.read { db in
            let (index, unreadable) = try VectorTable().load(dimension: staticEncoder.dimension, from: db)
            #expect(unreadable.isEmpty)
            var uids: [Int64: String] = [:], visible: Set<Int64> = []
            for row in try db.rows("SELECT rowid, uid, expires FROM items") {
                uids[row.int(0)!] = row.string(1)!
                if row.double(2)! > now { visible.insert(row.int(0)!) }
            }
            return (index, uids, visible)
        }
        let where_ = "step \(step) (\(action))"
        #expect(Set(uids.values) == Set(model.keys), "\(where_): the items")
        for (rowid, uid) in uids {
            let expected = model[uid]?.vector.map(Self.blob)
            #expect(stored.vector(for: rowid)?.blob == expected, "\(where_): the vector of \(uid)")
        }
        for encoder in [QueryEncoder.staticTable, .transformer] {
            var request = UserQueryRequest(text: query)
            request.maxResultCount = 100
            request.explain = true
            var semantic = SemanticRequest(vector: staticEncoder.embed(query), weight: 1, encoder: encoder)
            // Floors apart, so that a change of the constants shows in the set of hits.
            semantic.staticTuning.minimumSimilarity = 0.3
            semantic.refinedTuning.minimumSimilarity = -1
            request.semantic = semantic
            let result = try f.store.userQuery(request)
            let hits = (result.explanations ?? []).filter { $0.vectorRank != nil }.sorted { $0.vectorRank! < $1.vectorRank! }
            #expect(hits.count == result.items.count, "\(where_): every item found by the vector side")
            // The constants of the refined share the model expects (what a write nobody can see,
            // or that changes no text, must not move: issue 35).
            let vectors = model.values.compactMap(\.vector)
            let tuning = semantic.tuning { (vectors.count, vectors.filter(\.refined).count) }
            var floor = tuning.minimumSimilarity
            // The floor relative to the best hit (issue 37): the nearest item of the index, visible or not.
            if let relative = tuning.relativeFloor,
               let best = stored.search(semantic.vector, k: 1, mode: .exact).first?.similarity {
                floor = relative.floor(best: best, absolute: floor)
            }
            let brute = stored.search(semantic.vector, k: max(stored.count, 1), mode: .exact, allowed: { visible.contains($0) })
                .filter { $0.similarity >= floor }
            #expect(Set(hits.map(\.rowID)) == Set(brute.map(\.rowid)), "\(where_), \(encoder) \(query.debugDescription): the hits")
            let similarity = Dictionary(uniqueKeysWithValues: brute.map { ($0.rowid, $0.similarity) })
            for (i, h) in hits.enumerated() {
                #expect(h.vectorRank == i + 1 && h.similarity == similarity[h.rowID], "\(where_): \(uids[h.rowID] ?? "?")")
                if i > 0 { #expect(h.similarity! <= hits[i - 1].similarity!, "\(where_): best first") }
            }
        }
    }
}
