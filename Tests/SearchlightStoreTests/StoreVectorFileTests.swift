import Foundation
import SearchlightSemantic
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// The loaded vector index's files (`VectorIndex`, off the heap) against the store's table, the truth.
@Suite("Vector index files beside the store", .onOwnThreads)
struct StoreVectorFileTests {
    func storeFiles(_ f: StoreFixture) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: f.dir + "/b").filter { !$0.hasPrefix("_default.sqlite") }
    }

    @Test("the loaded index keeps its vectors in files beside the store, with no name: nothing else appears in its directory")
    func besideTheStore() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        #expect(f.ids(try f.hybrid("listen to songs")).first == "music")
        #expect(f.store.vectors.isFileBacked == true)
        #expect(try storeFiles(f) == [])
        _ = try f.store.applySync([.deleteAll])  // the index is emptied: new files, same place
        try f.donateMeanings()
        #expect(f.ids(try f.hybrid("listen to songs")).first == "music")
        #expect(f.store.vectors.isFileBacked == true)
        #expect(try storeFiles(f) == [])
    }

    @Test("a table change the loaded index never saw (a crash between the commit and the index) is what the index holds after a restart")
    func crashBetweenCommitAndIndex() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        #expect(f.ids(try f.hybrid("listen to songs")).first == "music")
        // Another connection commits what the loaded index is never told: music's and chess's
        // vectors swapped. (Not a vector deleted: the reopened store's background fill embeds an
        // item without one again, which raced the checks; a fresh clone's run under load saw
        // music back, with 5 vectors.)
        let other = try Database(path: f.dir + "/b/_default.sqlite")
        try other.execute("""
            UPDATE item_vectors SET rowid = -1 WHERE rowid = (SELECT rowid FROM items WHERE uid = 'music');
            UPDATE item_vectors SET rowid = (SELECT rowid FROM items WHERE uid = 'music') WHERE rowid = (SELECT rowid FROM items WHERE uid = 'chess');
            UPDATE item_vectors SET rowid = (SELECT rowid FROM items WHERE uid = 'chess') WHERE rowid = -1;
            """)
        other.close()
        #expect(f.ids(try f.hybrid("listen to songs", weight: 1)).first == "music", "the loaded index does not know (the crash window)")
        try f.reopen()  // the restart: the index is made again from the table
        let ids = f.ids(try f.hybrid("listen to songs", weight: 1))
        #expect(ids.first == "chess", "\(ids)")
        #expect(ids.firstIndex(of: "music").map { $0 > 0 } ?? true, "\(ids)")
        #expect(try f.store.vectorCounts().vectors == 5)
        #expect(try storeFiles(f) == [])
    }
}
