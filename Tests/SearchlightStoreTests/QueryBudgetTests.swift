import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// What bounds the work of one query (issue 13): its budget (deadline, abandonment) interrupts
/// SQLite, its size is checked before it runs, and SQLite's own size refusals are the query's
/// fault, never the index's.
@Suite("Query budgets and limits", .onOwnThreads)
struct QueryBudgetTests {
    static func filled(_ n: Int = 300) throws -> StoreFixture {
        let f = try StoreFixture()
        let items = try (0..<n).map { try f.item("i\($0)", ["title": .string("library \($0)"), "textContent": "lib tools and more words"]) }
        _ = try f.store.applySync([.items(items)])
        return f
    }

    @Test("a search past its deadline is interrupted and answers cancelled; the index is untouched and answers the next query")
    func deadline() throws {
        let f = try Self.filled()
        let scan = try QueryFront.filter(query: #"* == "*zz*"cd"#, limits: Limits(), now: Date())
        let budget = QueryBudget(timeout: 0)
        #expect(throws: SearchlightError.self) { try f.store.search(scan, budget: budget) }
        do {
            _ = try f.store.search(scan, budget: QueryBudget(timeout: 0))
        } catch {
            #expect(error.code == .cancelled)
            #expect(error.data?["reason"] == "deadline")
            #expect(error.message.contains("limit of 0 s for one query"), "\(error.message)")
        }
        #expect(f.store.detectedDamage == nil)
        #expect(try f.store.search(scan, budget: QueryBudget(timeout: 60)).items.isEmpty)
        #expect(try f.ids().count == 300)
    }

    @Test("the deadline counts the query's own work: a query that waited past it is not stopped; one that works past it is")
    func deadlineCountsOwnWork() {
        // Waiting (for the CPU, a reader, the writer) is what a query does on a loaded machine:
        // the thread's CPU clock does not move while it sleeps here, the wall clock does.
        // The wall bound (3 × 0.3 s) is far enough that a late wake-up on a loaded machine does not reach it.
        let budget = QueryBudget(timeout: 0.3)
        usleep(350_000)
        #expect(budget.elapsed >= 0.3)
        #expect(!budget.shouldStop(), "350 ms of waiting and no work: worked \(budget.worked) s")
        // Working: the thread's CPU time reaches the limit (or, on a starved machine, the wall
        // clock its bound) and a check stops it.
        var spins = 0
        while !budget.shouldStop() { spins &+= 1 }
        #expect(budget.stop == .deadline(seconds: 0.3))
    }

    @Test("a query kept from working for three times its limit is stopped all the same")
    func deadlineWallBound() {
        let budget = QueryBudget(timeout: 0.02)
        usleep(70_000)  // past 3 × 20 ms of wall time, without working
        #expect(budget.shouldStop())
        #expect(budget.stop == .deadline(seconds: 0.02))
    }

    @Test("the test seam's sleeps count as work, so a small query made slow still meets its deadline")
    func stepDelayCountsAsWork() {
        let budget = QueryBudget(timeout: 0.03, stepDelay: 0.01)
        var checks = 0
        while !budget.shouldStop() { checks += 1 }
        #expect(budget.stop == .deadline(seconds: 0.03))
        #expect(checks < 6, "stopped after about 3 sleeps of 10 ms: \(checks) checks")
    }

    @Test("a query whose client is gone stops at the next check and answers cancelled (disconnected)")
    func abandoned() throws {
        let f = try Self.filled()
        let scan = try QueryFront.filter(query: #"* == "*zz*"cd"#, limits: Limits(), now: Date())
        // Asked at most every 20 ms: the step delay makes the scan last long enough to be asked.
        let budget = QueryBudget(timeout: nil, isAbandoned: { true }, stepDelay: 0.005)
        do {
            _ = try f.store.search(scan, budget: budget)
            Issue.record("the abandoned query answered")
        } catch {
            #expect(error.code == .cancelled)
            #expect(error.data?["reason"] == "disconnected")
        }
        #expect(budget.stop == .abandoned)
    }

    @Test("a user query of one word repeated is searched as one term, with the same answer")
    func repeatedWords() throws {
        let f = try Self.filled()
        let once = try f.user("lib")
        let repeated = try f.user(Array(repeating: "lib", count: 800).joined(separator: " ") + " ", suggestions: 3)
        #expect(repeated.items.count == once.items.count)
        let terms = try UserQueryTerms(Array(repeating: "lib", count: 15_000).joined(separator: " "))
        #expect(terms.words.count == 15_000)
        #expect(terms.terms == [#""lib""#, #""lib" *"#], "the words before the last, and the last one being typed (a prefix)")
    }

    @Test("more different words than maxQueryTerms is invalidQuery at the byte offset of the first one too many")
    func tooManyWords() throws {
        var limits = Limits()
        limits.maxQueryTerms = 3
        #expect(throws: Never.self) { try UserQueryRequest.check("a b c a b c c ", limits: limits) }
        do {
            try UserQueryRequest.check("aa bb cc aa dd", limits: limits)
            Issue.record("accepted four words")
        } catch {
            #expect(error.code == .invalidQuery)
            #expect(error.data?["offset"] == 12)
            #expect(error.message.contains("more than 3 different words"))
        }
    }

    @Test("a request's checked words serve the store only for the same text under a limit no higher than the store's")
    func checkedWordsReused() throws {
        let f = try Self.filled(20)
        var loose = Limits()
        loose.maxQueryTerms = 64
        // Checked under a higher limit than the store's (64): the store checks again and refuses.
        var strict = StoreOptions()
        strict.limits.maxQueryTerms = 2
        strict.rankedIndexBuilds = false
        let tight = try IndexStore(path: f.dir + "/tight/_default.sqlite", options: strict)
        defer { tight.close() }
        var request = UserQueryRequest(text: "library tools words")
        try request.check(limits: loose)
        do {
            _ = try tight.userQuery(request)
            Issue.record("a store with maxQueryTerms 2 ran three words checked under 64")
        } catch {
            #expect(error.code == .invalidQuery)
        }
        // The text changed after the check: the store searches the new text, not the checked words.
        var changed = UserQueryRequest(text: "nothing-here-at-all")
        try changed.check(limits: loose)
        changed.text = "library"
        let plain = try f.user("library").items.count
        #expect(try f.store.userQuery(changed).items.count == plain)
        #expect(plain == 20)
        // Same text, checked: the same answer as parsing it in the store.
        var same = UserQueryRequest(text: "library tools ")
        try same.check(limits: loose)
        #expect(try f.store.userQuery(same).scores == f.store.userQuery(UserQueryRequest(text: "library tools ")).scores)
    }

    @Test("comparisons past maxQueryPredicates are refused at the one that crossed it, '*' counting once per attribute")
    func predicateLimit() throws {
        var limits = Limits()
        limits.maxQueryPredicates = 20
        let ors = (0..<21).map { #"title == "*x\#($0)*"c"# }.joined(separator: " || ")
        do {
            _ = try QueryFront.filter(query: ors, limits: limits, now: Date())
            Issue.record("accepted 21 comparisons")
        } catch {
            #expect(error.code == .invalidQuery)
            #expect(error.message.contains("too many comparisons in the query: more than 20"), "\(error.message)")
            #expect(error.data?["offset"]?.intValue == ors.utf8.count - #"title == "*x20*"c"#.utf8.count)
        }
        // Two '*' and four others: 2 × 8 + 4 = 20, at the limit; one more in a filter query crosses it.
        let stars = #"* == "a"cd && * == "b"cd && rankingHint > 1 && rankingHint < 9 && title == "t" && title != "u""#
        #expect(throws: Never.self) { _ = try QueryFront.filter(query: stars, limits: limits, now: Date()) }
        do {
            _ = try QueryFront.filter(query: stars, filterQueries: ["rankingHint == 2"], limits: limits, now: Date())
            Issue.record("accepted 21 with the filter query")
        } catch {
            #expect(error.message.hasPrefix("filterQueries[0]: too many comparisons in the query and its filter queries together"), "\(error.message)")
        }
    }

    @Test("more filter queries than maxFilterQueries is invalidQuery saying what to do")
    func filterQueryLimit() throws {
        do {
            _ = try QueryFront.filter(query: "rankingHint > 1", filterQueries: Array(repeating: "rankingHint != 5", count: 1000),
                limits: Limits(), now: Date())
            Issue.record("accepted 1000 filter queries")
        } catch {
            #expect(error.code == .invalidQuery)
            #expect(error.message.contains("filterQueries has 1000 entries; at most 64"))
        }
    }

    @Test("a thousand filter queries, allowed by raised limits, compile to an AND tree SQLite accepts")
    func balancedFilters() throws {
        let f = try Self.filled(20)
        var limits = Limits()
        limits.maxFilterQueries = 1000
        limits.maxQueryPredicates = 2000
        let filter = try QueryFront.filter(query: #"title == "library*"c"#, filterQueries: Array(repeating: "rankingHint != 5", count: 1000),
            limits: limits, now: Date())
        #expect(try f.store.search(filter).items.count == 20)
    }

    @Test("one pattern text under different modifiers, and the same text in the next query, each match as written (the per-connection cache of compiled patterns)")
    func patternCache() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("b", ["title": "Bridge"]), try f.item("l", ["title": "bridge"]))
        let both = try QueryFront.filter(query: #"title == "bridge"c && title != "bridge""#, limits: Limits(), now: Date())
        #expect(try f.ids(both) == ["b"])
        let exact = try QueryFront.filter(query: #"title == "bridge""#, limits: Limits(), now: Date())
        #expect(try f.ids(exact) == ["l"])
        let folded = try QueryFront.filter(query: #"title == "bridge"c"#, limits: Limits(), now: Date())
        #expect(try f.ids(folded) == ["b", "l"])
    }

    @Test("a statement SQLite refuses for its size is invalidQuery, and the index keeps its health")
    func sqliteSizeErrors() throws {
        let f = try Self.filled(20)
        let deep = SQLFilter(sql: Array(repeating: "items.rowid > 0", count: 1200).joined(separator: " AND "), bindings: [])
        do {
            _ = try f.store.search(deep)
            Issue.record("SQLite accepted an expression 1200 deep")
        } catch {
            #expect(error.code == .invalidQuery)
            #expect(error.message.contains("Expression tree is too large"), "\(error.message)")
        }
        #expect(f.store.detectedDamage == nil)
        #expect(try f.ids().count == 20)
    }
}
