import Foundation
import SearchlightSemantic
import Testing
import TestThreads
@testable import SearchlightStore
@testable import SearchlightSupervisor
import SearchlightWire

/// The open-index bound of `IndexRegistry` (issue 13 item 5): real index files in a temporary
/// directory, a bound of 2, and what must never be closed under a caller.
@Suite("Open-index bound", .onOwnThreads)
struct IndexRegistryBoundTests {
    final class Fixture: @unchecked Sendable {
        let dir = NSTemporaryDirectory() + "sl-bound-\(getpid())-\(UUID().uuidString.prefix(8))"
        let registry: IndexRegistry

        init(maxOpen: Int = 2, vectors: Bool = false) throws {
            var options = StoreOptions()
            options.fullSync = false
            if vectors {
                // The committed static table (Models/): the tests need no download.
                var url = URL(fileURLWithPath: #filePath)
                for _ in 0..<3 { url.deleteLastPathComponent() }
                options.vectorEncoder = try StaticEncoder(file: url.appendingPathComponent("Models/all-MiniLM-L6-v2-static.bin").path)
            }
            registry = try IndexRegistry(stateDirectory: dir, options: options, maxOpen: maxOpen, log: Logger(label: "test", level: .error))
        }

        deinit {
            registry.closeAll()
            try? FileManager.default.removeItem(atPath: dir)
        }

        func donate(_ bundle: String, _ ids: [String]) throws {
            let items = try ids.map { try ItemValidator().validate(item: ["uniqueIdentifier": .string($0), "attributeSet": ["title": .string("item \($0)")]]) }
            try registry.withStore(bundle: bundle, index: "", create: true) { (store) throws(SearchlightError) in
                _ = try store?.applySync([.items(items)])
            }
        }

        func isOpen(_ bundle: String) -> Bool { registry.servedStore(bundle: bundle, index: "") != nil }
    }

    @Test("past the bound the least recently used idle store is closed, and reopens with its data")
    func leastRecentlyUsedCloses() throws {
        let f = try Fixture()
        try f.donate("org.example.a", ["a-1", "a-2"])
        try f.donate("org.example.b", ["b-1"])
        try f.donate("org.example.c", ["c-1"])
        #expect(f.registry.openCount == 2)
        #expect(!f.isOpen("org.example.a") && f.isOpen("org.example.b") && f.isOpen("org.example.c"))
        let count = try f.registry.withStore(bundle: "org.example.a", index: "", create: false) { $0?.count }
        #expect(count == 2, "reopened with its items")
        #expect(f.isOpen("org.example.a") && !f.isOpen("org.example.b"), "b was now the least recently used")
        #expect(f.registry.openCount == 2)
    }

    @Test("a leased store is never closed: the bound is exceeded until the lease is given back")
    func leasedStaysOpen() throws {
        let f = try Fixture()
        try f.donate("org.example.a", ["a-1"])
        let lease = IndexLeases(f.registry)
        let held = try #require(try f.registry.store(bundle: "org.example.a", index: "", create: false, lease: lease))
        let others = IndexLeases(f.registry)
        for b in ["org.example.b", "org.example.c", "org.example.d"] {
            _ = try f.registry.store(bundle: b, index: "", create: true, lease: others)
        }
        #expect(f.registry.openCount == 4, "every store is held: the bound gives way")
        #expect(f.registry.servedStore(bundle: "org.example.a", index: "") === held)
        others.release()
        #expect(f.registry.openCount == 2)
        #expect(f.isOpen("org.example.a"), "still leased")
        // Usable all along: nobody closed it under the holder.
        #expect(try held.search(QueryFront.filter(query: #"uniqueIdentifier == "*""#, filterQueries: [], limits: Limits(), now: Date()),
            fetch: nil, limit: 10, cursor: nil).items.count == 1)
        lease.release()
        try f.donate("org.example.e", ["e-1"])
        #expect(!f.isOpen("org.example.a"), "closed once given back and least recently used")
    }

    @Test("an index being rebuilt, one with a shadow, and one whose store found damage are never closed")
    func rebuiltStaysOpen() throws {
        let f = try Fixture()
        try f.donate("org.example.recovering", ["r-1"])
        try f.donate("org.example.migrating", ["m-1"])
        f.registry.setCondition(IndexCondition(.recovering, reason: "test"), bundle: "org.example.recovering", index: "")
        _ = try f.registry.beginShadow(bundle: "org.example.migrating", index: "", resume: false)
        for b in ["org.example.b", "org.example.c"] { try f.donate(b, ["x"]) }
        #expect(f.isOpen("org.example.recovering") && f.isOpen("org.example.migrating"))
        f.registry.setCondition(nil, bundle: "org.example.recovering", index: "")
        f.registry.dropShadow(bundle: "org.example.migrating", index: "")
        try f.donate("org.example.d", ["x"])
        let damaged = try #require(f.registry.servedStore(bundle: "org.example.d", index: ""))
        damaged.markDamaged(DatabaseError(code: 11, extendedCode: 11, message: "test damage", sql: nil))
        for b in ["org.example.e", "org.example.f", "org.example.g"] { try f.donate(b, ["x"]) }
        #expect(!f.isOpen("org.example.recovering") && !f.isOpen("org.example.migrating"), "closable once rebuilt")
        #expect(f.registry.servedStore(bundle: "org.example.d", index: "") === damaged, "recovery's business")
    }

    @Test("a store with a write running is not closed until the write is answered")
    func busyWriterStaysOpen() throws {
        let f = try Fixture()
        try f.donate("org.example.a", ["a-1"])
        let store = try #require(f.registry.servedStore(bundle: "org.example.a", index: ""))
        let release = DispatchSemaphore(value: 0), started = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
        // Queued straight to the store (as the registry's own maintenance does): no lease holds it.
        Thread.detachNewThread {
            _ = try? store.writeSync { _ in
                started.signal()
                release.wait()
                return ApplyResult()
            }
            done.signal()
        }
        started.wait()
        #expect(!store.isIdle)
        for b in ["org.example.b", "org.example.c", "org.example.d"] { try f.donate(b, ["x"]) }
        #expect(f.isOpen("org.example.a"), "its write is still running")
        release.signal()
        done.wait()
        try f.donate("org.example.e", ["x"])
        #expect(!f.isOpen("org.example.a"))
    }

    @Test("status figures of a closed index come without opening it")
    func summaryOfClosedIndex() throws {
        let f = try Fixture()
        try f.donate("org.example.a", ["a-1", "a-2", "a-3"])
        try f.donate("org.example.b", ["b-1"])
        try f.donate("org.example.c", ["c-1"])
        let (summary, store) = try f.registry.summary(bundle: "org.example.a", index: "")
        #expect(store == nil && summary.itemCount == 3)
        #expect(!f.isOpen("org.example.a") && f.registry.openCount == 2)
        // A fresh registry (a restarted daemon) reads the figures from the file itself.
        f.registry.closeAll()
        let again = try IndexRegistry(stateDirectory: f.dir, options: f.registry.options, maxOpen: 2, log: f.registry.log)
        let read = try again.summary(bundle: "org.example.a", index: "")
        #expect(read.store == nil && read.summary.itemCount == 3 && again.openCount == 0)
    }

    @Test("an eviction closes a store without saving its loaded vectors (the request path would pay for it); the daemon's stop saves them")
    func evictionDoesNotSave() throws {
        let f = try Fixture(vectors: true)
        try f.donate("org.example.a", (0..<40).map { "a-\($0)" })
        let store = try #require(f.registry.servedStore(bundle: "org.example.a", index: ""))
        try store.loadVectors()
        #expect(store.vectors.isLoaded)
        // The load's background fill reads once: a reader out makes the store not idle, and the
        // bound would evict another. Its end is waited for (an event).
        let deadline = Date(timeIntervalSinceNow: 60)
        while store.vectors.isFilling {
            try #require(Date() < deadline, "the fill did not end")
            Thread.sleep(forTimeInterval: 0.01)
        }
        let saved = store.path + IndexStore.vectorIndexFileSuffix
        try f.donate("org.example.b", ["b-1"])
        try f.donate("org.example.c", ["c-1"])
        #expect(!f.isOpen("org.example.a"), "evicted past the bound of 2")
        #expect(!FileManager.default.fileExists(atPath: saved), "an eviction saved the vectors")
        // Reopened and loaded again, then the stop: saved.
        let again = try #require(try f.registry.withStore(bundle: "org.example.a", index: "", create: false) { $0 })
        try again.loadVectors()
        f.registry.closeAll()
        #expect(FileManager.default.fileExists(atPath: saved), "the stop saves the loaded vectors")
    }

    @Test("the summary of an open index for the refinement share reads nothing: the share counts its vectors once, from the store")
    func closedSummaryOfOpenIndex() throws {
        let f = try Fixture()
        try f.donate("org.example.a", ["a-1", "a-2"])
        let store = try #require(f.registry.servedStore(bundle: "org.example.a", index: ""))
        let before = store.vectorCountScans.value
        #expect(try f.registry.closedSummary(bundle: "org.example.a", index: "") == nil)
        #expect(store.vectorCountScans.value == before, "no scan of item_vectors for an open index")
        // admin.status's summary of an open store counts them once.
        _ = try f.registry.summary(bundle: "org.example.a", index: "")
        #expect(store.vectorCountScans.value == before + 1)
        // Closed (past the bound of 2), its figures come without opening it.
        try f.donate("org.example.b", ["b-1"])
        try f.donate("org.example.c", ["c-1"])
        #expect(!f.isOpen("org.example.a"))
        #expect(try f.registry.closedSummary(bundle: "org.example.a", index: "")?.itemCount == 2)
        #expect(!f.isOpen("org.example.a"))
    }
}
