import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// `QueryFront.filter` keeps the filters of texts without `$` (which cannot read the clock) by
/// their text and limits, per cache scope (the caller's uid in the daemon); a text with `$time.…`
/// is compiled at every call, each time with its `now`.
@Suite("Query filters kept by text", .onOwnThreads)
struct QueryFrontCacheTests {
    static func describe(_ f: SQLFilter) -> String {
        "\(f.sql) | \(f.bindings.map { "\($0)" }) | \(f.ftsMatch ?? "-") | \(f.driverTerm.map { "\($0)" } ?? "-")"
    }

    @Test("a kept filter is the one compiled afresh, for the query, filter queries and drivers")
    func keptEqualsCompiled() throws {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        let texts: [(String?, [String])] = [
            ("textContent == \"library\"cdw", []), ("title == \"pars*\"cdw", []), ("title == \"pars*\"cdw", ["contentType == \"public.text\""]),
            (nil, ["keywords == \"a*\"", "rankingHint > 3"]), ("(title == \"x\" || title == \"y*\"c) && contentCreationDate > \"2024-01-01T00:00:00Z\"", []),
        ]
        for (query, filters) in texts {
            let compiled = try QueryFront.compile(query: query, filterQueries: filters, limits: Limits(), now: now)
            for _ in 0..<3 {
                let kept = try QueryFront.filter(query: query, filterQueries: filters, limits: Limits(), now: now.addingTimeInterval(86_400 * 400), cacheScope: 7)
                #expect(Self.describe(kept) == Self.describe(compiled), "\(query ?? "-") \(filters)")
            }
        }
    }

    @Test("a text with $time is compiled with each call's now, never kept")
    func timeTextsFollowTheClock() throws {
        let query = "title == \"a*\" && contentModificationDate > $time.now(-60)"
        let t1 = Date(timeIntervalSince1970: 1_700_000_000), t2 = t1.addingTimeInterval(3_600)
        let a = try QueryFront.filter(query: query, limits: Limits(), now: t1, cacheScope: 7)
        let b = try QueryFront.filter(query: query, limits: Limits(), now: t2, cacheScope: 7)
        #expect(Self.describe(a) != Self.describe(b), "the bound time moved with now")
        #expect(Self.describe(b) == Self.describe(try QueryFront.compile(query: query, filterQueries: [], limits: Limits(), now: t2)))
        let c = try QueryFront.filter(query: nil, filterQueries: ["contentModificationDate > $time.today"], limits: Limits(), now: t1, cacheScope: 7)
        let d = try QueryFront.filter(query: nil, filterQueries: ["contentModificationDate > $time.today"], limits: Limits(), now: t1.addingTimeInterval(86_400 * 3), cacheScope: 7)
        #expect(Self.describe(c) != Self.describe(d), "a filter query's $time moved with now")
    }

    @Test("a kept text is checked against the limits of each call")
    func limitsStillApply() throws {
        let query = "title == \"quokka\"cdw && textContent == \"wombat\"cdw && keywords == \"numbat*\""
        _ = try QueryFront.filter(query: query, limits: Limits(), now: Date(), cacheScope: 7)
        var small = Limits()
        small.maxQueryBytes = 20
        #expect(throws: SearchlightError.self) { try QueryFront.filter(query: query, limits: small, now: Date(), cacheScope: 7) }
        var few = Limits()
        few.maxFilterQueries = 1
        _ = try QueryFront.filter(query: query, filterQueries: ["rankingHint > 1", "rankingHint < 9"], limits: Limits(), now: Date(), cacheScope: 7)
        #expect(throws: SearchlightError.self) {
            try QueryFront.filter(query: query, filterQueries: ["rankingHint > 1", "rankingHint < 9"], limits: few, now: Date(), cacheScope: 7)
        }
        _ = try QueryFront.filter(query: query, limits: Limits(), now: Date(), cacheScope: 7)
    }

    @Test("one uid's kept texts are not another's: each scope compiles its own, and no scope keeps nothing")
    func scopesApart() throws {
        let query = "title == \"scope-\(UInt32.random(in: 1...UInt32.max))\"cdw"
        func kept(_ scope: UInt32) -> Bool {
            let key = FilterCache.Key(scope: scope, query: query, filterQueries: [], limits: Limits())!
            return QueryFront.filterCache.withLock { $0.filter(key) } != nil
        }
        _ = try QueryFront.filter(query: query, limits: Limits(), now: Date(), cacheScope: 1000)
        #expect(kept(1000))
        #expect(!kept(1001), "another uid would find the text kept: a hit times what someone else searched for")
        _ = try QueryFront.filter(query: query, limits: Limits(), now: Date())
        #expect(!kept(0), "a call without a scope keeps nothing")
        _ = try QueryFront.filter(query: query, limits: Limits(), now: Date(), cacheScope: 1001)
        #expect(kept(1001))
    }
}
