import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// `PostingListCache`: a reader connection keeps parsed posting lists across reads, and drops
/// them when another connection commits (`PRAGMA data_version`). Segment ids are never reused
/// (`rank_next_segment`), so no write of the store itself can make an entry stale; a change by
/// another connection to a segment's postings can, and is what this test makes.
@Suite("Posting list cache", .onOwnThreads)
struct PostingListCacheTests {
    @Test("a list changed by another connection's commit is read again, not served from the cache")
    func commitDropsCache() throws {
        let f = try StoreFixture(rankedBuilds: false)
        let items = try (0..<300).map { i in
            try f.item("i\(i)", ["title": .string("alpha \(i % 3 == 0 ? "beta" : "gamma") \(i)")])
        }
        _ = try f.store.applySync([.items(items)])
        try f.store.buildRankedIndex()
        let before = try f.store.lexicalCandidates("alpha ", limit: 10)
        #expect(before.usedRankedIndex)
        #expect(try f.store.lexicalCandidates("alpha ", limit: 10).candidates == before.candidates, "the cached list answers the same")
        #expect(before.candidates.contains { ($0.rowID - 1) % 3 != 0 }, "alpha's top 10 holds items without beta")

        // Another connection gives "alpha" beta's postings: the ranked index now says only the
        // beta items hold it.
        let other = try Database(path: f.dir + "/b/_default.sqlite")
        let changed = try other.run("""
            UPDATE rank_terms SET postings = (SELECT postings FROM rank_terms AS b WHERE b.segment = rank_terms.segment AND b.term = ?)
            WHERE term = ?
            """, [.blob(Array("beta".utf8)), .blob(Array("alpha".utf8))])
        other.close()
        #expect(changed >= 1)
        let after = try f.store.lexicalCandidates("alpha ", limit: 10)
        #expect(after.usedRankedIndex)
        let betaRows = try f.store.read { db in
            Set(try db.rows("SELECT rowid FROM items WHERE title LIKE '%beta%'").compactMap { $0.int(0) })
        }
        #expect(!after.candidates.isEmpty && after.candidates.allSatisfy { betaRows.contains($0.rowID) },
                "the changed list is read: \(after.candidates.map(\.rowID))")
    }

    @Test("a whole word is walked from its second ask, but an overlong one is never recorded (its key is the caller's text)")
    func longTermsNotRecorded() {
        let cache = PostingListCache()
        let short = Array("library".utf8)
        #expect(!cache.walksWholeWord(segment: 1, key: short), "the first ask stays on FTS5")
        #expect(cache.walksWholeWord(segment: 1, key: short), "the second walks (and keeps the list)")
        let long = [UInt8](repeating: UInt8(ascii: "q"), count: PostingListCache.maxAskedTermBytes + 1)
        #expect(!cache.walksWholeWord(segment: 1, key: long))
        #expect(!cache.walksWholeWord(segment: 1, key: long), "never recorded, so never walked without its list kept")
    }
}

