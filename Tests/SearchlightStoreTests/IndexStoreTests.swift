import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// A clock the test moves by hand.
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current: Date
    init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) { current = start }
    var now: Date { lock.withLock { current } }
    func advance(_ seconds: TimeInterval) { lock.withLock { current += seconds } }
}

/// An integer set on one thread and read on another.
final class IntBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored = 0
    var value: Int { lock.withLock { stored } }
    func set(_ v: Int) { lock.withLock { stored = v } }
}

/// A store in a fresh temp directory.
final class StoreFixture: @unchecked Sendable {
    let dir: String
    let clock = TestClock()
    var store: IndexStore

    let rankedBuilds: Bool
    var vectors: Bool

    /// `rankedBuilds: false`: the ranked index is built only when the test calls `buildRankedIndex()`.
    /// `vectors`: the store has the committed static table as its encoder (semantic search).
    init(maxItems: Int? = nil, rankedBuilds: Bool = true, vectors: Bool = false) throws {
        dir = NSTemporaryDirectory() + "slstore-" + UUID().uuidString
        self.rankedBuilds = rankedBuilds
        self.vectors = vectors
        store = try IndexStore(path: dir + "/b/_default.sqlite",
            options: Self.options(clock, maxItems: maxItems, rankedBuilds: rankedBuilds, vectors: vectors))
    }

    static func options(_ clock: TestClock, maxItems: Int?, rankedBuilds: Bool = true, vectors: Bool = false) -> StoreOptions {
        var o = StoreOptions()
        o.clock = { clock.now }
        o.fullSync = false
        o.rankedIndexBuilds = rankedBuilds
        if let maxItems { o.limits.maxItemsPerIndex = maxItems }
        if vectors { o.vectorEncoder = staticEncoder }
        return o
    }

    func reopen() throws {
        store.close()
        store = try IndexStore(path: dir + "/b/_default.sqlite",
            options: Self.options(clock, maxItems: nil, rankedBuilds: rankedBuilds, vectors: vectors))
    }

    deinit {
        store.close()
        try? FileManager.default.removeItem(atPath: dir)
    }

    func item(_ id: String, domain: String? = nil, _ attributes: [String: JSONValue] = [:], update: Bool = false) throws -> SearchableItem {
        var json: [String: JSONValue] = ["uniqueIdentifier": .string(id), "attributeSet": .object(attributes)]
        if let domain { json["domainIdentifier"] = .string(domain) }
        if update { json["isUpdate"] = true }
        return try ItemValidator().validate(item: .object(json))
    }

    func donate(_ items: SearchableItem...) throws {
        _ = try store.applySync([.items(items)])
    }

    func ids(_ filter: SQLFilter = .all) throws -> [String] {
        try store.search(filter).items.compactMap { $0["uniqueIdentifier"]?.stringValue }.sorted()
    }

    func attributes(_ id: String) throws -> [String: JSONValue]? {
        try store.items(withIdentifiers: [id]).first?["attributeSet"]?.objectValue
    }

    func user(_ text: String, suggestions: Int = 0) throws -> UserQueryResult {
        var r = UserQueryRequest(text: text)
        r.maxSuggestionCount = suggestions
        return try store.userQuery(r)
    }
}

@Suite("Index store writes", .onOwnThreads)
struct IndexStoreWriteTests {
    @Test("donating an item with the same identifier replaces it")
    func replace() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("a", ["title": "one", "keywords": ["x"]]))
        try f.donate(try f.item("a", ["title": "two"]))
        #expect(try f.attributes("a") == ["title": "two"])
        #expect(f.store.count == 1)
    }

    @Test("an update merges, null removes, and an update of a missing item is dropped")
    func update() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("a", ["title": "one", "contentDescription": "d", "custom": ["n": 1, "m": 2]]))
        let r = try f.store.applySync([.items([
            try f.item("a", ["title": "new", "contentDescription": nil, "custom": ["m": nil, "k": "v"]], update: true),
            try f.item("missing", ["title": "x"], update: true),
        ])])
        #expect(r.indexed == 1 && r.updatesDropped == 1)
        #expect(try f.attributes("a") == ["title": "new", "custom": ["n": 1, "k": "v"]])
        #expect(try f.ids() == ["a"])
    }

    @Test("domain deletion is recursive on dot components")
    func domains() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("1", domain: "a"), try f.item("2", domain: "a.b"), try f.item("3", domain: "a.b.c"),
            try f.item("4", domain: "ab"), try f.item("5", domain: "b.a"), try f.item("6"))
        let r = try f.store.applySync([.deleteDomains(["a"])])
        #expect(r.deleted == 3)
        #expect(try f.ids() == ["4", "5", "6"])
    }

    @Test("deleting all items also resets the client state")
    func deleteAll() throws {
        let f = try StoreFixture()
        _ = try f.store.applySync([.items([try f.item("a", ["title": "t"])])], newClientState: [1, 2])
        #expect(try f.store.clientState() == [1, 2])
        _ = try f.store.applySync([.deleteAll])
        #expect(try f.store.clientState() == nil)
        #expect(try f.ids().isEmpty)
        #expect(try f.user("t").items.isEmpty)
        try f.donate(try f.item("b", ["title": "t"]))
        #expect(try f.user("t").items.count == 1, "full-text index works after delete-all")
    }

    @Test("a mismatched expected client state applies nothing")
    func compareAndSwap() throws {
        let f = try StoreFixture()
        _ = try f.store.applySync([.items([try f.item("a")])], expecting: .equals(nil), newClientState: [1])
        #expect(throws: SearchlightError.self) {
            try f.store.applySync([.items([try f.item("b")]), .deleteIdentifiers(["a"])], expecting: .equals([9]), newClientState: [2])
        }
        #expect(try f.ids() == ["a"])
        #expect(try f.store.clientState() == [1])
        _ = try f.store.applySync([.items([try f.item("b")])], expecting: .equals([1]), newClientState: [2])
        #expect(try f.ids() == ["a", "b"])
        #expect(try f.store.clientState() == [2])
    }

    @Test("items expire after 30 days by default and vanish from queries at once")
    func expiration() throws {
        let f = try StoreFixture()
        var soon = try f.item("soon", ["title": "alpha"])
        soon.expirationDate = f.clock.now.addingTimeInterval(60)
        try f.donate(soon, try f.item("later", ["title": "alpha"]))
        #expect(try f.ids() == ["later", "soon"])
        f.clock.advance(61)
        #expect(try f.ids() == ["later"])
        #expect(try f.user("alpha").items.count == 1)
        #expect(f.store.count == 2, "invisible but not yet purged")
        #expect(try f.store.purgeExpired() == 1)
        f.clock.advance(30 * 86400)
        #expect(try f.ids().isEmpty)
    }

    @Test("an item related to another lives and dies with it")
    func related() throws {
        let f = try StoreFixture()
        var parent = try f.item("p")
        parent.expirationDate = f.clock.now.addingTimeInterval(10)
        try f.donate(parent, try f.item("c", ["relatedUniqueIdentifier": "p"]), try f.item("g", ["relatedUniqueIdentifier": "c"]),
            try f.item("other"))
        f.clock.advance(11)
        // The direct child of an expired item is hidden at once; the purge removes all descendants.
        #expect(try !f.ids().contains("c"))
        #expect(try !f.ids().contains("p"))
        _ = try f.store.purgeExpired()
        #expect(try f.ids() == ["other"])
        try f.donate(try f.item("p2"), try f.item("c2", ["relatedUniqueIdentifier": "p2"]))
        _ = try f.store.applySync([.deleteIdentifiers(["p2"])])
        #expect(try f.ids() == ["other"])
    }

    @Test("the item limit answers quotaExceeded and applies nothing of that call")
    func quota() throws {
        let f = try StoreFixture(maxItems: 2)
        try f.donate(try f.item("a"))
        do {
            try f.donate(try f.item("b"), try f.item("c"))
            Issue.record("over quota accepted")
        } catch let e as SearchlightError {
            #expect(e.code == .quotaExceeded)
        }
        #expect(try f.ids() == ["a"])
        try f.donate(try f.item("a", ["title": "replacing does not count"]), try f.item("b"))
        #expect(f.store.count == 2)
    }

    @Test("concurrent writers are committed together and a failing call applies nothing")
    func groupCommit() async throws {
        let f = try StoreFixture()
        let store = f.store
        let items = try (0..<64).map { try f.item("i\($0)", ["title": .string("t\($0)")]) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for chunk in stride(from: 0, to: 64, by: 4) {
                let slice = Array(items[chunk..<chunk + 4])
                group.addTask { _ = try await store.apply([.items(slice)]) }
            }
            group.addTask {
                do {
                    _ = try await store.apply([.items([items[0]])], expecting: .equals([42]), newClientState: [1])
                    Issue.record("mismatched batch applied")
                } catch {}
            }
            try await group.waitForAll()
        }
        #expect(try f.ids().count == 64)
        #expect(try store.clientState() == nil)
    }

    @Test("calls queued while the writer is busy commit as one transaction", .timeLimit(.minutes(1)))
    func oneCommitForAGroup() async throws {
        let f = try StoreFixture()
        let store = f.store
        let started = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        // A plain thread holds the writer inside a call, so the calls below queue up behind it.
        Thread.detachNewThread {
            _ = try? store.writeSync { _ in
                started.signal()
                release.wait()
                return ApplyResult()
            }
            finished.signal()
        }
        await withCheckedContinuation { c in DispatchQueue.global().async { started.wait(); c.resume() } }
        let items = try (0..<16).map { try f.item("g\($0)") }
        let calls = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for item in items { group.addTask { _ = try await store.apply([.items([item])]) } }
                try await group.waitForAll()
            }
        }
        while store.pendingCount < 16 { try await Task.sleep(for: .milliseconds(1)) }
        release.signal()
        try await calls.value
        await withCheckedContinuation { c in DispatchQueue.global().async { finished.wait(); c.resume() } }
        #expect(store.writeStatistics.commits == 2, "the blocker's group, then one group of 16")
        #expect(store.writeStatistics.calls == 17)
        #expect(try f.ids().count == 16)
    }

    // Two stores on one file: the first never idles out (streamIdleSeconds one hour), so the
    // larger cache is read while the stream surely runs; the second ends its stream after 50 ms
    // idle, and the test waits for that end. (With one store at 50 ms, a test thread descheduled
    // for 50 ms beside CPU hogs read the cache after the stream had already ended.)
    @Test("a stream of large calls gets the larger page cache, and gives it back once idle")
    func streams() throws {
        let f = try StoreFixture()
        var o = StoreFixture.options(f.clock, maxItems: nil)
        o.streamGroupItems = 10
        o.streamIndexItems = 3
        o.streamIdleSeconds = 3600
        f.store.close()
        f.store = try IndexStore(path: f.dir + "/b/_default.sqlite", options: o)
        func writerCacheSize(_ store: IndexStore) throws -> Int {
            let size = IntBox()
            _ = try store.writeSync { s in
                size.set(try s.writer.intScalar("PRAGMA cache_size"))
                return ApplyResult()
            }
            return size.value
        }
        let large = try (0..<20).map { try f.item("large\($0)") }
        _ = try f.store.applySync([.items(try (0..<5).map { try f.item("small\($0)") })])
        #expect(f.store.streamStatistics.started == 0, "5 items are no stream")
        _ = try f.store.applySync([.items(large)])
        #expect(f.store.streamStatistics.started == 1)
        #expect(try writerCacheSize(f.store) == -o.streamCacheKiB)
        #expect(f.store.streamStatistics.ended == 0)

        // The idle end, on a store whose stream ends 50 ms after the last call.
        f.store.close()
        o.streamIdleSeconds = 0.05
        f.store = try IndexStore(path: f.dir + "/b/_default.sqlite", options: o)
        let store = f.store
        _ = try store.applySync([.items(large)])
        #expect(store.streamStatistics.started == 1)
        let deadline = Date(timeIntervalSinceNow: 30)
        while store.streamStatistics.ended < 1, Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(store.streamStatistics.ended == 1, "the stream ends when no call came for streamIdleSeconds")
        #expect(try writerCacheSize(store) == -o.cacheKiB)
        #expect(try f.ids().count == 25)
    }

    @Test("an acknowledged write survives closing and reopening the file")
    func durability() throws {
        let f = try StoreFixture()
        _ = try f.store.applySync([.items([try f.item("a", ["title": "kept"])])], newClientState: [7])
        try f.reopen()
        #expect(try f.attributes("a") == ["title": "kept"])
        #expect(try f.store.clientState() == [7])
        #expect(f.store.count == 1)
    }

    @Test("check finds a full-text index out of step with the items, and repair rebuilds it")
    func checkAndRepair() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("a", ["title": "original words"]), try f.item("b", ["title": "other"]))
        #expect(try f.store.check(repair: false).ok)
        // Change the text behind the index's back, as a torn write or a bug would.
        let raw = try Database(path: f.dir + "/b/_default.sqlite")
        try raw.execute("UPDATE items SET title = 'replaced text' WHERE uid = 'a'")
        let report = try f.store.check(repair: false)
        #expect(!report.ok)
        #expect(report.problems.contains { $0.hasPrefix("full-text index") })
        let repaired = try f.store.check(repair: true)
        #expect(repaired.ok && repaired.repaired.count == 1, "\(repaired)")
        #expect(try f.store.check(repair: false).ok)
        #expect(try f.user("replaced").items.count == 1)
        #expect(try f.user("original").items.isEmpty)
        try f.donate(try f.item("c", ["title": "after repair"]))
        #expect(try f.user("repair").items.count == 1)
    }

    @Test("each file records its store format; a newer format is refused")
    func formatVersion() throws {
        let f = try StoreFixture()
        f.store.close()
        let db = try Database(path: f.dir + "/b/_default.sqlite")
        #expect(try db.intScalar("PRAGMA user_version") == Schema.formatVersion)
        try db.execute("PRAGMA user_version=\(Schema.formatVersion + 1)")
        #expect(throws: SearchlightError.self) { try IndexStore(path: f.dir + "/b/_default.sqlite") }
    }

    @Test("custom attributes, dates and the derived content type tree round-trip")
    func attributesRoundTrip() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("a", [
            "contentType": "public.png", "lastUsedDate": "2026-01-02T03:04:05.678Z",
            "custom": ["when": ["$date": "2026-05-01T00:00:00.000Z"], "n": 2.5, "tags": ["x", "y"], "ok": true],
        ]))
        let a = try #require(try f.attributes("a"))
        #expect(a["lastUsedDate"] == "2026-01-02T03:04:05.678Z")
        #expect(a["custom"]?["when"] == ["$date": "2026-05-01T00:00:00.000Z"])
        #expect(a["custom"]?["tags"] == ["x", "y"])
        #expect(a["contentTypeTree"]?.arrayValue?.contains("public.image") == true)
    }

    @Test("pages follow the cursor until the results are exhausted")
    func pagination() throws {
        let f = try StoreFixture()
        _ = try f.store.applySync([.items(try (0..<25).map { try f.item("i\($0)") })])
        var seen: [String] = []
        var cursor: String?
        repeat {
            let page = try f.store.search(.all, limit: 10, cursor: cursor)
            seen += page.items.compactMap { $0["uniqueIdentifier"]?.stringValue }
            cursor = page.cursor
        } while cursor != nil
        #expect(seen.count == 25 && Set(seen).count == 25)
    }
}

@Suite("User queries", .onOwnThreads)
struct UserQueryTests {
    @Test("case and diacritics never matter")
    func folding() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("a", ["title": "Crème Brûlée"]), try f.item("b", ["title": "CREME fraiche"]))
        #expect(try f.user("creme").items.count == 2)
        #expect(try f.user("BRULEE").items.count == 1)
        #expect(try f.user("crème").items.count == 2)
    }

    @Test("a CJK substring of two or more characters finds the item", arguments: [
        ("星球大战", "星球"), ("星球大战", "球大"), ("검색엔진", "검색"), ("검색엔진", "엔진"), ("東京タワー", "タワー"),
    ])
    func cjk(text: String, query: String) throws {
        let f = try StoreFixture()
        try f.donate(try f.item("a", ["displayName": .string(text)]), try f.item("b", ["displayName": "unrelated"]))
        #expect(try f.user(query).items.compactMap { $0["uniqueIdentifier"]?.stringValue } == ["a"])
    }

    @Test("the word being typed is a prefix and is completed in suggestions")
    func completion() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("a", ["title": "json parser"]), try f.item("b", ["title": "json serializer"]),
            try f.item("c", ["title": "yaml parser"]))
        let r = try f.user("json pa", suggestions: 5)
        // Best-match (issue 37): the item with both words first, then those with one of them.
        let ids = r.items.compactMap { $0["uniqueIdentifier"]?.stringValue }
        #expect(ids.first == "a" && Set(ids) == ["a", "b", "c"], "\(ids)")
        #expect(r.suggestions.first == Suggestion(text: "json parser", highlight: [[5, 2]], kind: "completion"))
        #expect(!r.suggestions.contains { $0.text == "json pa" }, "no completion that finds nothing")
    }

    @Test("issue 37: a query of several words is best-match: every word first, then more words above fewer, stop words alone find nothing")
    func bestMatch() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("all", ["title": "chocolate lava cake", "contentDescription": "a warm dessert"]),
            try f.item("two", ["title": "chocolate cake"]), try f.item("one", ["title": "carrot cake"]),
            try f.item("none", ["title": "the tomato soup"]))
        let ids = try f.user("warm chocolate cake ").items.compactMap { $0["uniqueIdentifier"]?.stringValue }
        #expect(ids == ["all", "two", "one"], "\(ids)")
        // "the" alone is no reason to list an item: the tail leaves stop words out.
        #expect(try f.user("the chocolate ").items.compactMap { $0["uniqueIdentifier"]?.stringValue }.sorted() == ["all", "two"])
        #expect(try f.user("the of ").items.isEmpty)
    }

    @Test("a misspelt word with no match offers the nearest indexed word")
    func correction() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("a", ["title": "natural bridges"]), try f.item("b", ["title": "national park"]))
        let r = try f.user("naturel bridges ", suggestions: 3)
        // Best-match (issue 37): the misspelt word finds nothing, the other still finds its item.
        #expect(r.items.compactMap { $0["uniqueIdentifier"]?.stringValue } == ["a"])
        #expect(r.suggestions.contains(Suggestion(text: "natural bridges ", highlight: [[0, 7]], kind: "correction")))
    }

    @Test("a word in a few texts is corrected when its nearest word is a hundred times commoner; a rare word near a merely commoner one is not")
    func farRarerCorrection() throws {
        for ranked in [false, true] {
            let f = try StoreFixture()
            var items = [try f.item("typo", ["title": "recieve mail", "textContent": "natural bridges"])]
            for i in 0..<100 { items.append(try f.item("r\(i)", ["title": .string("receive mail \(i)")])) }
            for i in 0..<20 { items.append(try f.item("b\(i)", ["title": .string("bridge \(i)")])) }
            _ = try f.store.applySync([.items(items)])
            if ranked { try f.store.buildRankedIndex() }
            // In 1 text against 100: a misspelling that made it into the index.
            var on = UserQueryRequest(text: "recieve ")
            on.maxSuggestionCount = 3
            on.rareCorrections = true
            let typo = try f.store.userQuery(on)
            #expect(typo.suggestions.contains(Suggestion(text: "receive ", highlight: [[0, 7]], kind: "correction")), "ranked \(ranked): \(typo.suggestions)")
            // In 1 text against 20: a word of its own.
            on.text = "bridges "
            #expect(try f.store.userQuery(on).suggestions.isEmpty, "ranked \(ranked)")
            // Off (the default): only words the index lacks are corrected.
            #expect(try f.user("recieve ", suggestions: 3).suggestions.isEmpty, "ranked \(ranked)")
        }
    }

    @Test("rankingHint, recency and engagement raise an item among equal matches")
    func ranking() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("plain", ["title": "report"]), try f.item("hinted", ["title": "report", "rankingHint": 100]))
        #expect(try f.user("report").items.first?["uniqueIdentifier"] == "hinted")
        try f.store.recordEngagement(identifier: "plain", suggestion: nil, weight: 50)
        try f.donate(try f.item("hinted", ["title": "report", "rankingHint": 10]))
        #expect(try f.user("report").items.first?["uniqueIdentifier"] == "plain")
    }

    @Test("title matches outrank body matches")
    func fieldWeights() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("body", ["title": "misc", "textContent": "a long text that mentions kernel once among many other words"]),
            try f.item("title", ["title": "kernel"]))
        #expect(try f.user("kernel").items.first?["uniqueIdentifier"] == "title")
    }
}
