import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// `PostingListCache`: a reader connection keeps parsed posting lists across reads and across
/// commits, for as long as their segment is in the index: a segment's rows never change while it
/// is active, and segment ids are never given twice within a file (`rank_next_segment`).
@Suite("Posting list cache", .onOwnThreads)
struct PostingListCacheTests {
    @Test("lists are kept across commits that leave their segment active; after deleteAll the new segments have new ids and the old lists go")
    func keptAcrossCommits() throws {
        let f = try StoreFixture(rankedBuilds: false)
        let items = try (0..<300).map { i in
            try f.item("i\(i)", ["title": .string("alpha \(i % 3 == 0 ? "beta" : "gamma") \(i)")])
        }
        _ = try f.store.applySync([.items(items)])
        try f.store.buildRankedIndex()
        // One reader in a single-threaded test: the pool lends the last one given back.
        let cache = try f.store.read { db in try #require(db.postingCache) }
        let before = try f.store.lexicalCandidates("alpha ", limit: 10)
        #expect(before.usedRankedIndex)
        let read = cache.listsRead
        #expect(read > 0)
        #expect(try f.store.lexicalCandidates("alpha ", limit: 10).candidates == before.candidates)
        #expect(cache.listsRead == read, "the second query is served from the cache")

        // A donation commits (the item waits in the delta): the segment is untouched, its lists stay.
        try f.donate(try f.item("new", ["title": .string("alpha zeta")]))
        let withNew = try f.store.lexicalCandidates("zeta ", limit: 10)
        #expect(withNew.usedRankedIndex)
        #expect(withNew.candidates.count == 1, "the delta's item is found")
        #expect(try f.store.lexicalCandidates("alpha ", limit: 10).usedRankedIndex)
        #expect(cache.listsRead == read, "a commit elsewhere left the lists: \(cache.listsRead) reads against \(read)")

        let active = try f.store.read { db in Set(try RankSnapshot.read(db).segments.map(\.id)) }
        #expect(cache.segmentsHeld == active)

        // deleteAll, then other items: the new segments have new ids, so no list read before
        // answers for them. "alpha" is now only in the odd items.
        _ = try f.store.applySync([.deleteAll])
        let again = try (0..<300).map { i in
            try f.item("j\(i)", ["title": .string("\(i % 2 == 1 ? "alpha" : "delta") word \(i)")])
        }
        _ = try f.store.applySync([.items(again)])
        try f.store.buildRankedIndex()
        let newIDs = try f.store.read { db in try RankSnapshot.read(db).segments.map(\.id) }
        #expect(newIDs.allSatisfy { id in active.allSatisfy { id > $0 } }, "ids \(newIDs) after \(active)")
        let after = try f.store.lexicalCandidates("alpha ", limit: 10)
        #expect(after.usedRankedIndex)
        let odd = try f.store.read { db in
            Set(try db.rows("SELECT rowid FROM items WHERE title LIKE 'alpha%'").compactMap { $0.int(0) })
        }
        #expect(!after.candidates.isEmpty && after.candidates.allSatisfy { odd.contains($0.rowID) },
                "the new segment's lists answer: \(after.candidates.map(\.rowID))")
        #expect(cache.segmentsHeld == Set(newIDs), "the retired segments' lists went: held \(cache.segmentsHeld)")
    }

    @Test("a list is served only for the segment it was read from, and dropped with it")
    func stampedBySegment() throws {
        let cache = PostingListCache()
        var r = SeededRandom(state: 0xCAC4E)
        let list = try RankedBoundTests.list(RankedBoundTests.postings(50, among: 100, &r))
        let key = Array("alpha".utf8)
        let segment = RankSnapshot.Segment(id: 7, lo: 1, hi: 100, docs: 100, tokens: 1000, safeUntil: .infinity, maxStatic: 1, latestUse: nil)
        cache.store(list, segment: segment, key: key)
        #expect(cache.list(segment: segment, key: key) != nil)
        #expect(cache.bytes > 0)
        var other = segment
        other.hi = 120
        other.docs = 120
        #expect(cache.list(segment: other, key: key) == nil, "same id, other rows: not served")
        cache.retain([segment])
        #expect(cache.list(segment: segment, key: key) != nil, "kept while its segment is active")
        cache.retain([other])
        #expect(cache.segmentsHeld.isEmpty && cache.bytes == 0, "dropped once the snapshot holds another segment under its id")
        cache.store(list, segment: segment, key: key)
        cache.store(list, segment: segment, key: key)
        let once = cache.bytes
        cache.store(list, segment: other, key: key)
        #expect(cache.bytes == once, "a list stored again replaces its bytes, not adds them")
        #expect(cache.list(segment: segment, key: key) == nil && cache.list(segment: other, key: key) != nil)
        cache.retain([])
        #expect(cache.segmentsHeld.isEmpty && cache.bytes == 0)
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

