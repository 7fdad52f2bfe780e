import Foundation
import SearchlightSemantic
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// The committed static table (Models/, checksum in the Makefile): the tests need no download.
let staticEncoder: StaticEncoder = {
    var url = URL(fileURLWithPath: #filePath)
    for _ in 0..<3 { url.deleteLastPathComponent() }
    return try! StaticEncoder(file: url.appendingPathComponent("Models/all-MiniLM-L6-v2-static.bin").path)
}()

extension StoreFixture {
    /// A user query with the vector side (the query embedded with the static table).
    func hybrid(_ text: String, weight: Double = 0.5, filter: SQLFilter? = nil, explain: Bool = false) throws -> UserQueryResult {
        var r = UserQueryRequest(text: text)
        r.semantic = SemanticRequest(vector: staticEncoder.embed(text), weight: weight)
        r.filter = filter
        r.explain = explain
        return try store.userQuery(r)
    }

    func storedVectors() throws -> Int { try store.read { db in try db.intScalar("SELECT count(*) FROM item_vectors") } }

    /// Items about different things; none shares a word with "listen to songs".
    func donateMeanings() throws {
        try donate(
            try item("music", ["title": "Rhythmbox", "contentDescription": "music player and audio library organizer",
                               "textContent": "Play your MP3 and Ogg Vorbis collection, internet radio and podcasts."]),
            try item("chess", ["title": "GNU Chess", "contentDescription": "chess engine",
                               "textContent": "A program that plays chess against you on the board."]),
            try item("mail", ["title": "Postfix", "contentDescription": "mail transport agent",
                              "textContent": "Delivers electronic mail between servers with SMTP."]),
            try item("compiler", ["title": "GCC", "contentDescription": "GNU C compiler",
                                  "textContent": "Translates C source code into machine code."]),
            try item("images", ["title": "GIMP", "contentDescription": "image manipulation program",
                                "textContent": "Edit photographs, retouch pictures and paint."]))
    }

    func ids(_ r: UserQueryResult) -> [String] { r.items.compactMap { $0["uniqueIdentifier"]?.stringValue } }
}

@Suite("Semantic vectors in the store", .onOwnThreads)
struct StoreVectorTests {
    @Test("every donated item gets its vector in the same commit; a replacement rewrites it, deletions remove it")
    func vectorsFollowItems() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        #expect(try f.storedVectors() == 5)
        let before = try f.store.read { db in try db.rows("SELECT vector FROM item_vectors WHERE rowid = 1").first?.values[0] }
        try f.donate(try f.item("music", ["title": "Rhythmbox", "textContent": "something else entirely"]))
        let after = try f.store.read { db in try db.rows("SELECT vector FROM item_vectors WHERE rowid = 1").first?.values[0] }
        #expect(before != nil && after != nil && before != after)
        _ = try f.store.applySync([.deleteIdentifiers(["chess"])])
        #expect(try f.storedVectors() == 4)
        _ = try f.store.applySync([.deleteDomains(["none"]), .deleteAll])
        #expect(try f.storedVectors() == 0)
    }

    @Test("the stored BLOB of a donated item is exactly the quantised static vector of its title, description and text")
    func storedBytes() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        // A second donation on the same writer: every row is bound afresh, none keeps the last one's bytes.
        try f.donate(try f.item("empty", ["title": "", "textContent": ""]), try f.item("short", ["title": "ab"]))
        let rows = try f.store.read { db in
            try db.rows("SELECT i.title, i.contentDescription, i.textContent, v.vector FROM items i JOIN item_vectors v ON v.rowid = i.rowid")
        }
        #expect(rows.count == 6)
        for row in rows {
            let text = [row.string(0), row.string(1), row.string(2)].compactMap { $0?.isEmpty == false ? $0 : nil }.joined(separator: ". ")
            let expected = QuantizedVector(staticEncoder.embed(text)).blob
            guard case .blob(let stored) = row.values[3] else {
                Issue.record("no BLOB for \(text)")
                continue
            }
            #expect(stored == expected, "\(text.prefix(40))")
        }
    }

    @Test("a store without an encoder writes no vectors and answers lexically")
    func noEncoder() throws {
        let f = try StoreFixture()
        try f.donateMeanings()
        #expect(try f.storedVectors() == 0)
        #expect(f.ids(try f.hybrid("listen to songs")).isEmpty)
    }

    @Test("the vector side finds an item by meaning with no shared word; the lexical side alone does not")
    func findsByMeaning() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        #expect(f.ids(try f.user("listen to songs")).isEmpty)
        let hybrid = try f.hybrid("listen to songs", explain: true)
        #expect(f.ids(hybrid).first == "music", "\(f.ids(hybrid))")
        let e = try #require(hybrid.explanations?.first)
        #expect(e.lexicalRank == nil && e.vectorRank == 1 && (e.similarity ?? 0) > 0 && e.score < 0)
    }

    @Test("deleted and expired items never come back through the vector side, whether the index was loaded before or after")
    func deletedAndExpired() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        #expect(f.ids(try f.hybrid("listen to songs")).first == "music")  // loads the in-memory index
        _ = try f.store.applySync([.deleteIdentifiers(["music"])])
        #expect(!f.ids(try f.hybrid("listen to songs")).contains("music"))
        var expiring = try f.item("radio", ["title": "Radio tray", "contentDescription": "streaming audio player",
                                             "textContent": "Plays music streams from online stations."])
        expiring.expirationDate = f.clock.now.addingTimeInterval(60)
        try f.donate(expiring)
        #expect(f.ids(try f.hybrid("listen to songs")).contains("radio"))
        f.clock.advance(120)
        #expect(!f.ids(try f.hybrid("listen to songs")).contains("radio"))
        try f.reopen()  // loaded afresh from the table
        #expect(!f.ids(try f.hybrid("listen to songs")).contains("radio"))
        #expect(!f.ids(try f.hybrid("listen to songs")).contains("music"))
    }

    @Test("a filter query applies to the vector side")
    func filterApplies() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        try f.donate(try f.item("radio", ["title": "Radio tray", "contentDescription": "streaming audio player",
                                          "textContent": "Plays music streams from online stations."]))
        #expect(Set(f.ids(try f.hybrid("listen to songs"))) == ["music", "radio"])
        let filter = try QueryFront.filter(query: nil, filterQueries: [#"title == "Radio*""#], limits: Limits(), now: f.clock.now)
        #expect(f.ids(try f.hybrid("listen to songs", filter: filter)) == ["radio"])
    }

    @Test("vector hits below the similarity floor are left out: a query about nothing in the index finds nothing")
    func similarityFloor() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        #expect(f.ids(try f.hybrid("xyzzy")).isEmpty)
        var r = UserQueryRequest(text: "xyzzy")
        r.semantic = SemanticRequest(vector: staticEncoder.embed("xyzzy"), weight: 0.5, minimumSimilarity: -1)
        #expect(try f.store.userQuery(r).items.count == 5, "without a floor the vector side ranks every item")
    }

    @Test("an item with only displayName and keywords (a store delegate's) has a vector, on donation and from the background fill, and is found by meaning")
    func displayNameOnlyItemHasVector() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        try f.donate(try f.item("tag-park", ["displayName": "Natural Bridges State Park", "keywords": ["Utah", "sandstone"]]))
        #expect(try f.storedVectors() == 6)
        let query = "rock arches"
        #expect(f.ids(try f.user(query)).isEmpty)
        let found = f.ids(try f.hybrid(query))
        #expect(found.first == "tag-park", "\(found)")
        // An older file's item without a vector gets one from the fill, from the same text.
        let donated = try f.store.read { db in try db.rows("SELECT vector FROM item_vectors v JOIN items i ON i.rowid = v.rowid WHERE i.uid = 'tag-park'").first?.values[0] }
        f.store.close()
        try rewriteFormat(f.dir + "/b/_default.sqlite", to: 4)
        try f.reopen()
        try f.store.loadVectors()
        let deadline = Date().addingTimeInterval(30)
        while f.store.isFillingVectors && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(try f.storedVectors() == 6)
        let filled = try f.store.read { db in try db.rows("SELECT vector FROM item_vectors v JOIN items i ON i.rowid = v.rowid WHERE i.uid = 'tag-park'").first?.values[0] }
        #expect(donated != nil && filled == donated)
    }

    @Test("a file of format 4 gets the vector table when opened and its items' vectors in the background")
    func upgradeFillsVectors() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        f.store.close()
        try rewriteFormat(f.dir + "/b/_default.sqlite", to: 4)
        try f.reopen()
        #expect(f.store.formatVersion == Schema.formatVersion)
        #expect(try f.storedVectors() == 0)
        try f.store.loadVectors()
        let deadline = Date().addingTimeInterval(30)
        while f.store.isFillingVectors && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(try f.storedVectors() == 5)
        #expect(try f.store.vectorCounts().vectors == 5)
        #expect(f.ids(try f.hybrid("listen to songs")).first == "music")
    }
}

extension StoreVectorTests {
    @Test("an index closed under a running refinement keeps its committed batches, and a run on the reopened store resumes")
    func refinementSurvivesClose() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        var batches = 0
        var committedCounts: [Int] = []
        // Closed while the second batch is being embedded (the open-index bound, a replace).
        let store = f.store
        let n = try store.refineVectors(batch: 2, embed: { texts in
            batches += 1
            if batches == 2 { store.close() }
            return texts.map(staticEncoder.embed)
        }, yieldNow: { false }, committed: { committedCounts.append($0) })
        #expect(n == 2, "the first batch's count, not an error")
        #expect(committedCounts == [2])
        #expect(store.isClosed)
        try f.reopen()
        #expect(try f.store.vectorCounts() == (vectors: 5, refined: 2), "the committed batch stayed")
        #expect(try f.store.refineVectors(batch: 2, embed: { $0.map(staticEncoder.embed) }, yieldNow: { false }) == 3)
        #expect(try f.store.vectorCounts() == (vectors: 5, refined: 5))
    }

    @Test("refinement replaces each static vector once, counts it as refined, and stops when told to yield")
    func refinement() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        #expect(try f.store.refineVectors(embed: { $0.map(staticEncoder.embed) }, yieldNow: { true }) == 0)
        #expect(try f.store.vectorCounts().refined == 0)
        var batches = 0
        #expect(try f.store.refineVectors(batch: 2, embed: { batches += 1; return $0.map(staticEncoder.embed) }, yieldNow: { false }) == 5)
        #expect(batches == 3)
        #expect(try f.store.vectorCounts() == (vectors: 5, refined: 5))
        #expect(try f.store.refineVectors(embed: { $0.map(staticEncoder.embed) }, yieldNow: { false }) == 0)
        // A donation writes a static vector again: the next run refines it.
        try f.donate(try f.item("chess", ["title": "GNU Chess", "textContent": "plays chess"]))
        #expect(try f.store.vectorCounts().refined == 4)
        #expect(try f.store.refineVectors(embed: { $0.map(staticEncoder.embed) }, yieldNow: { false }) == 1)
        #expect(f.ids(try f.hybrid("listen to songs")).first == "music")
    }
}

@Suite("Hybrid fusion", .onOwnThreads)
struct HybridFusionTests {
    func m(_ rowid: Int64, _ s: Float = 0.5) -> VectorMatch { VectorMatch(rowid: rowid, similarity: s) }

    @Test("weighted reciprocal rank fusion: an item both sides rank comes first, each side's ranks reported")
    func fusesBoth() {
        let fused = HybridFusion.fuse(lexical: [1, 2, 3], vector: [m(3, 0.9), m(4, 0.8), m(1, 0.7)], weight: 0.5, limit: 10)
        #expect(fused.map(\.rowID) == [1, 3, 2, 4])
        #expect(fused[0].lexicalRank == 1 && fused[0].vectorRank == 3 && fused[0].similarity == 0.7)
        #expect(abs(fused[0].score - (0.5 / 61 + 0.5 / 63)) < 1e-12)
        #expect(fused[3].lexicalRank == nil && fused[3].vectorRank == 2)
    }

    @Test("at equal weight an exact lexical hit is not outranked by a vector hit of the same rank")
    func lexicalWinsTies() {
        let fused = HybridFusion.fuse(lexical: [7], vector: [m(9)], weight: 0.5, limit: 10)
        #expect(fused.map(\.rowID) == [7, 9])
    }

    @Test("weight 0 is the lexical ranking alone (vector ranks still reported), weight 1 the vector ranking alone")
    func extremes() {
        let lexicalOnly = HybridFusion.fuse(lexical: [1, 2], vector: [m(2), m(5)], weight: 0, limit: 10)
        #expect(lexicalOnly.map(\.rowID) == [1, 2])
        #expect(lexicalOnly[1].vectorRank == 1)
        let vectorOnly = HybridFusion.fuse(lexical: [1, 2], vector: [m(2), m(5)], weight: 1, limit: 10)
        #expect(vectorOnly.map(\.rowID) == [2, 5])
    }

    @Test("a heavier vector weight moves vector hits up; the limit cuts the list")
    func weightMoves() {
        let light = HybridFusion.fuse(lexical: [1, 2, 3], vector: [m(9)], weight: 0.2, limit: 10).map(\.rowID)
        let heavy = HybridFusion.fuse(lexical: [1, 2, 3], vector: [m(9)], weight: 0.8, limit: 2).map(\.rowID)
        #expect(light == [1, 2, 3, 9])
        #expect(heavy == [9, 1])
    }
}

/// Issue 18's hybrid rules in the store: exact hits before near misses, the boosts on both
/// sides, filters and expiration on both sides.
@Suite("Hybrid ranking rules", .onOwnThreads)
struct HybridRuleTests {
    /// An item whose title is exactly the query, whose text is about something else (so the
    /// vector side ranks it low or not at all), and items about editing text that share no word
    /// with the query: near misses the vector side ranks high.
    func donateEditors(_ f: StoreFixture) throws {
        try f.donate(
            try f.item("exact", ["title": "Text Editor", "textContent": "Recipes for bread, soups and cakes from the countryside."]),
            try f.item("phrase", ["title": "Kitchen notes", "textContent": "Keeps a list of groceries; it is not a text editor at all."]),
            try f.item("vim", ["title": "Vim", "contentDescription": "Vi IMproved, a programmer's editing tool",
                               "textContent": "Edit source code and documents with modal keystrokes."]),
            try f.item("emacs", ["title": "Emacs", "contentDescription": "extensible editing environment",
                                 "textContent": "Edit files, write documents and programs."]),
            try f.item("nano", ["title": "Nano", "contentDescription": "small friendly editing program for the terminal",
                                "textContent": "Write and change plain files in a console."]),
            try f.item("kate", ["title": "Kate", "contentDescription": "advanced editing application for writing code"]),
            try f.item("gedit", ["title": "gedit", "contentDescription": "simple editing program for the desktop",
                                 "textContent": "Write notes, change configuration files and source code."]),
            try f.item("joe", ["title": "Joe", "contentDescription": "Joe's own editing program", "textContent": "Modify files in a terminal."]),
            try f.item("mousepad", ["title": "Mousepad", "contentDescription": "lightweight editing program", "textContent": "Write and edit documents."]),
            try f.item("jed", ["title": "Jed", "contentDescription": "programmer's editing tool", "textContent": "Edit programs with syntax colouring."]),
            try f.item("pluma", ["title": "Pluma", "contentDescription": "editing program for MATE", "textContent": "Edit documents and source files."]),
            try f.item("leafpad", ["title": "Leafpad", "contentDescription": "simple GTK editing program", "textContent": "Write notes and edit files."]))
    }

    @Test("an exact title or phrase hit is never outranked by a semantic near miss, even at a vector weight of 0.9")
    func exactHitsFirst() throws {
        let f = try StoreFixture(vectors: true)
        try donateEditors(f)
        let r = try f.hybrid("text editor", weight: 0.9, explain: true)
        let ids = f.ids(r)
        #expect(Set(ids.prefix(2)) == ["exact", "phrase"], "\(ids)")
        let e = try #require(r.explanations)
        // Without the rule a near miss would come first: its reciprocal rank alone beats the exact hits' fused score.
        let k = HybridFusion.k
        let nearMiss = try #require(e.first { $0.lexicalRank == nil })
        let byID = Dictionary(uniqueKeysWithValues: zip(ids, e))
        let exactRRF = ["exact", "phrase"].compactMap { byID[$0] }.map { c in
            (c.lexicalRank.map { 0.1 / (k + Double($0)) } ?? 0) + (c.vectorRank.map { 0.9 / (k + Double($0)) } ?? 0)
        }
        #expect(exactRRF.count == 2)
        #expect(0.9 / (k + Double(nearMiss.vectorRank ?? 1000)) > exactRRF.min() ?? 1, "\(e)")
        // Scores stay ordered (lower is better across indexes).
        #expect(r.scores == r.scores.sorted(), "\(r.scores)")
    }

    @Test("a one-word query's plain lexical hit is fused as usual; only the title equal to the query is an exact hit")
    func oneWordIsNoPhrase() throws {
        let f = try StoreFixture(vectors: true)
        try f.donate(
            try f.item("exact", ["title": "Editor", "textContent": "Recipes for bread, soups and cakes from the countryside."]),
            try f.item("mention", ["title": "Kitchen notes", "textContent": "Groceries; the editor of this list is my aunt."]),
            try f.item("vim", ["title": "Vim", "contentDescription": "Vi IMproved, a programmer's editing tool",
                               "textContent": "Edit source code and documents with modal keystrokes."]))
        var r = UserQueryRequest(text: "editor ")
        r.semantic = SemanticRequest(vector: staticEncoder.embed("editor"), weight: 0.9)
        let ids = f.ids(try f.store.userQuery(r))
        // The near miss comes after the exact title hit; the plain lexical hit is ranked as fused.
        #expect(ids.contains("vim") && ids.firstIndex(of: "exact")! < ids.firstIndex(of: "vim")!, "\(ids)")
        let exact = try f.store.read { db in
            try f.store.exactHits(db, terms: try UserQueryTerms("editor "), among: [1, 2, 3])
        }
        #expect(exact == [1])
    }

    @Test("rankingHint and engagement raise an item the vector side alone finds, as they raise lexical hits")
    func boostsApplyToVectorHits() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        let text: JSONValue = "Plays music streams from online stations."
        try f.donate(try f.item("radio1", ["title": "Radio tray", "textContent": text]),
                     try f.item("radio2", ["title": "Radio tray", "textContent": text]))
        func order() throws -> [String] { f.ids(try f.hybrid("listen to songs")).filter { $0.hasPrefix("radio") } }
        // Equal vectors, equal similarity: the boost alone decides, whichever item has it.
        for (boosted, other) in [("radio2", "radio1"), ("radio1", "radio2")] {
            try f.donate(try f.item(boosted, ["title": "Radio tray", "textContent": text, "rankingHint": 100]),
                         try f.item(other, ["title": "Radio tray", "textContent": text]))
            #expect(try order() == [boosted, other])
        }
        try f.donate(try f.item("radio1", ["title": "Radio tray", "textContent": text]))
        for (engaged, other, weight) in [("radio2", "radio1", 10.0), ("radio1", "radio2", 30.0)] {
            try f.store.recordEngagement(identifier: engaged, suggestion: nil, weight: weight)
            #expect(try order() == [engaged, other])
        }
        let r = try f.hybrid("listen to songs", explain: true)
        #expect(r.explanations?.first { $0.rowID == 7 }?.lexicalRank == nil)
    }

    @Test("a filter query and expiration apply to the lexical and the vector side of a hybrid query")
    func filterAndExpirationBothSides() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        var radio = try f.item("radio", ["title": "Radio tray", "contentDescription": "streaming music player",
                                         "textContent": "Plays music streams from online stations."])
        radio.expirationDate = f.clock.now.addingTimeInterval(60)
        try f.donate(radio)
        let r = try f.hybrid("music player", explain: true)
        #expect(Set(f.ids(r)).isSuperset(of: ["music", "radio"]))
        // Both sides found both items, so the filter must hold on each side.
        #expect(r.explanations?.filter { $0.lexicalRank != nil && $0.vectorRank != nil }.count ?? 0 >= 2, "\(r.explanations ?? [])")
        let filter = try QueryFront.filter(query: nil, filterQueries: [#"title == "Radio*""#], limits: Limits(), now: f.clock.now)
        #expect(f.ids(try f.hybrid("music player", filter: filter)) == ["radio"])
        #expect(f.ids(try f.hybrid("music player", weight: 1, filter: filter)) == ["radio"])
        #expect(f.ids(try f.hybrid("music player", weight: 0, filter: filter)) == ["radio"])
        f.clock.advance(120)
        for w in [0.0, 0.5, 1.0] { #expect(!f.ids(try f.hybrid("music player", weight: w)).contains("radio")) }
    }
}

extension HybridFusionTests {
    @Test("near misses (vector-only items) move below the last exact hit; items both sides found and the exact hits keep their order")
    func demotion() {
        let fused = HybridFusion.fuse(lexical: [1, 2], vector: [m(9), m(1), m(8)], weight: 0.9, limit: 10)
        #expect(fused.map(\.rowID) == [1, 9, 8, 2])
        let kept = HybridFusion.demoteNearMisses(fused, exact: [2])
        #expect(kept.map(\.rowID) == [1, 2, 9, 8])
        #expect(zip(kept, kept.dropFirst()).allSatisfy { $0.score >= $1.score })
        #expect(HybridFusion.demoteNearMisses(fused, exact: []) == fused)
        #expect(HybridFusion.demoteNearMisses(fused, exact: [1]) == fused)
        #expect(HybridFusion.demoteNearMisses(fused, exact: [2], exactFirst: true).map(\.rowID) == [2, 1, 9, 8])
    }

    @Test("the rrf k changes how much a rank difference weighs")
    func rrfK() {
        let small = HybridFusion.fuse(lexical: [1, 2], vector: [m(2)], weight: 0.5, limit: 10, k: 1)
        #expect(small.first?.rowID == 2)
        #expect(abs(small[0].score - (0.5 / 3 + 0.5 / 2)) < 1e-12)
    }
}

extension StoreVectorTests {
    @Test("refinement told to yield in the middle stops after the batch under way: no further batch is embedded or written")
    func refinementStopsWithinOneBatch() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        var embedded = 0
        var pressure = false
        let n = try f.store.refineVectors(batch: 2, embed: { texts in
            embedded += 1
            if embedded == 2 { pressure = true }  // the throttle sees pressure during the second batch
            return texts.map(staticEncoder.embed)
        }, yieldNow: { pressure })
        #expect(embedded == 2)
        #expect(n == 4)
        #expect(try f.store.vectorCounts().refined == 4)
        // The next run resumes with what is left.
        #expect(try f.store.refineVectors(batch: 2, embed: { $0.map(staticEncoder.embed) }, yieldNow: { false }) == 1)
    }
}
