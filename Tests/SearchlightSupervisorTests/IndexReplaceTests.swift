import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
@testable import SearchlightSupervisor
import SearchlightWire

/// Replacing an index file while a read still holds a connection to the old file or to the shadow
/// (issue 30 item 3's loose ends): real index files in a temporary directory, a read held open by a
/// thread of the test. A SQLite connection closed last checkpoints its WAL and then deletes
/// `<file>-wal` and `-shm` by name; once another file sits at that name, those are its own.
@Suite("Index replacement with reads in progress", .onOwnThreads)
struct IndexReplaceTests {
    final class Fixture: @unchecked Sendable {
        let dir = NSTemporaryDirectory() + "sl-replace-\(getpid())-\(UUID().uuidString.prefix(8))"
        private(set) var registry: IndexRegistry
        let bundle = "org.example.replace"

        init() throws {
            registry = try Self.registry(dir)
        }

        static func registry(_ dir: String) throws -> IndexRegistry {
            var options = StoreOptions()
            options.fullSync = false
            let registry = try IndexRegistry(stateDirectory: dir, options: options, log: Logger(label: "test", level: .error))
            // A read held by the test never ends by itself: do not wait the daemon's 10 s for it.
            registry.shutDownTimeout = 0.2
            return registry
        }

        /// The registry closed and a new one opened on the same files (a daemon restart).
        func reopen() throws {
            registry.closeAll()
            registry = try Self.registry(dir)
        }

        deinit {
            registry.closeAll()
            try? FileManager.default.removeItem(atPath: dir)
        }

        var path: String { registry.path(bundle: bundle, index: "") }

        static func items(_ prefix: String, _ count: Int, expires: Date? = nil) throws -> [SearchableItem] {
            try (0..<count).map { i in
                var o: [String: JSONValue] = ["uniqueIdentifier": .string("\(prefix)-\(i)"), "attributeSet": ["title": .string("item \(prefix) \(i)")]]
                if let expires { o["expirationDate"] = .string(ISO8601.format(expires)) }
                return try ItemValidator().validate(item: .object(o))
            }
        }

        func donate(_ items: [SearchableItem], to bundle: String? = nil) throws {
            try registry.withStore(bundle: bundle ?? self.bundle, index: "", create: true) { (store) throws(SearchlightError) in
                _ = try store?.applySync([.items(items)])
            }
        }

        /// Every visible item of the index, by a query on the store served now.
        func served(_ bundle: String? = nil) throws -> Int {
            try registry.withStore(bundle: bundle ?? self.bundle, index: "", create: false) { (store) throws(SearchlightError) in
                guard let store else { return -1 }
                return try store.search(QueryFront.filter(query: #"uniqueIdentifier == "*""#, filterQueries: [], limits: Limits(), now: Date()),
                    fetch: nil, limit: 10_000, cursor: nil).items.count
            }
        }
    }

    /// A read on `store` held open (its connection checked out, a statement run) until `release` is called.
    final class HeldRead: @unchecked Sendable {
        private let started = DispatchSemaphore(value: 0), released = DispatchSemaphore(value: 0), ended = DispatchSemaphore(value: 0)

        init(on store: IndexStore) {
            Thread.detachNewThread { [started, released, ended] in
                _ = try? store.read { db in
                    // A read under way, as a query's: its connection has the WAL open.
                    _ = try db.rows("SELECT count(*) FROM items")
                    started.signal()
                    released.wait()
                }
                ended.signal()
            }
        }

        /// Once the connection is checked out.
        func begun() async { await offPool { self.started.wait() } }

        /// Lets the read end and waits until its connection is given back (closed, for a shut-down store).
        func release() async {
            released.signal()
            await offPool { self.ended.wait() }
        }
    }

    @Test("a shadow swap refuses while the shadow is still being read: the old index and its WAL stay in service with every item")
    func shadowReadRefusesSwap() async throws {
        let f = try Fixture()
        try f.donate(Fixture.items("old", 50))
        let shadow = try f.registry.beginShadow(bundle: f.bundle, index: "", resume: false)
        _ = try shadow.applySync([.items(try Fixture.items("new", 60))])
        let read = HeldRead(on: shadow)
        await read.begun()

        let error = await offPool { () -> SearchlightError? in
            do {
                try f.registry.swapInShadow(bundle: f.bundle, index: "", shadow: shadow)
                return nil
            } catch let e as SearchlightError {
                return e
            } catch {
                return SearchlightError(.internalError, "\(error)")
            }
        }
        #expect(error?.code == .indexUnavailable && error?.message.contains("was still being read") == true, "\(String(describing: error))")
        #expect(try f.served() == 50, "the old index answers, every item")
        #expect(FileManager.default.fileExists(atPath: f.path + "-wal"), "the old index's WAL is still in place")

        await read.release()
        // The shadow's last connection closed: nothing of the served index went with it.
        #expect(FileManager.default.fileExists(atPath: f.path + "-wal"))
        try f.donate([try Fixture.items("later", 1)[0]])
        #expect(try f.served() == 51)
        try f.reopen()
        #expect(try f.served() == 51, "durable: every item after a restart")
    }

    @Test("a long statement still reading the shadow at the swap is interrupted, and the swap goes ahead with every item")
    func shadowStatementInterrupted() async throws {
        let f = try Fixture()
        f.registry.shutDownTimeout = 60  // bounded; the interrupt ends the read long before
        try f.donate(Fixture.items("old", 50))
        let shadow = try f.registry.beginShadow(bundle: f.bundle, index: "", resume: false)
        _ = try shadow.applySync([.items(try Fixture.items("new", 60))])
        // A background read on the shadow (as a ranked-index build's): one statement of minutes.
        let started = DispatchSemaphore(value: 0), ended = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var readError: (any Error)?
        Thread.detachNewThread {
            do {
                _ = try shadow.read { db in
                    _ = try db.rows("SELECT count(*) FROM items")
                    started.signal()
                    return try db.rows("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000000) SELECT count(*) FROM c")
                }
            } catch {
                readError = error
            }
            ended.signal()
        }
        await offPool { started.wait() }
        // Without the interrupt the swap waits out its 60 s for the read, then refuses.
        let swapped = await offPool { (try? f.registry.swapInShadow(bundle: f.bundle, index: "", shadow: shadow)) != nil }
        // Refused: the statement would run for hours; end it for the test to finish.
        if !swapped { shadow.shutDown(timeout: 0, interruptingReads: true) }
        await offPool { ended.wait() }
        #expect(swapped, "the swap waited out the read and refused")
        #expect("\(readError.map { "\($0)" } ?? "none")".contains("interrupt"), "the read ended some other way: \(String(describing: readError))")
        #expect(try f.served() == 60)
        try f.reopen()
        #expect(try f.served() == 60, "durable: every item after a restart")
    }

    @Test("a swap goes ahead while the old store is still being read, and that read's last close leaves the new file and its WAL alone")
    func oldStoreReadDoesNotHarmSwap() async throws {
        let f = try Fixture()
        try f.donate(Fixture.items("old", 50))
        let old = try #require(f.registry.servedStore(bundle: f.bundle, index: ""))
        let shadow = try f.registry.beginShadow(bundle: f.bundle, index: "", resume: false)
        _ = try shadow.applySync([.items(try Fixture.items("new", 60))])
        let read = HeldRead(on: old)
        await read.begun()
        let swapped = await offPool { (try? f.registry.swapInShadow(bundle: f.bundle, index: "", shadow: shadow)) != nil }
        #expect(swapped)
        // Committed to the new file while the old connection is still open: in its WAL.
        try f.donate([try Fixture.items("during", 1)[0]])
        await read.release()
        // The old file's last connection closed. Had it checkpointed and deleted `-wal`/`-shm` by
        // name, the new file's commit above would be gone and its readers on a fresh WAL index.
        #expect(FileManager.default.fileExists(atPath: f.path + "-wal"), "the served index lost its WAL to the old file's last close")
        #expect(try f.served() == 61)
        try f.donate([try Fixture.items("later", 1)[0]])
        try f.reopen()
        #expect(try f.served() == 62, "durable: every item after a restart")
    }

    @Test("recovery's replace: the damaged file is moved aside while a read still holds it; that read's last close leaves the fresh file alone")
    func replaceWhileReadLeavesFreshFile() async throws {
        let f = try Fixture()
        try f.donate(Fixture.items("old", 20))
        let old = try #require(f.registry.servedStore(bundle: f.bundle, index: ""))
        let read = HeldRead(on: old)
        await read.begun()
        let aside = f.dir + "/aside.sqlite"
        let replaced = await offPool { () -> Bool in
            (try? f.registry.replace(bundle: f.bundle, index: "") { (path) throws(SearchlightError) in
                // What the quarantine does (Quarantine.finishSetAside): every piece moved, the main file last.
                for suffix in ["-wal", "-shm", ""] { _ = rename(path + suffix, aside + suffix) }
            }) != nil
        }
        #expect(replaced)
        try f.donate(Fixture.items("fresh", 3))
        await read.release()
        #expect(FileManager.default.fileExists(atPath: f.path + "-wal"), "the fresh index lost its WAL to the damaged file's last close")
        #expect(try f.served() == 3)
        try f.reopen()
        #expect(try f.served() == 3, "durable: every item after a restart")
        // And the file set aside kept every item, for the salvage.
        let salvaged = try IndexStore(path: aside, options: StoreOptions())
        #expect(salvaged.count == 20)
        salvaged.close()
    }

    @Test("the saved vector partition follows the file: a swap removes the old one and moves the shadow's, dropShadow, recovery's quarantine and erase leave no -partition or -partition.tmp; the saved vector index (-vectors) goes with every one of them")
    func partitionFilesFollowTheIndex() throws {
        let f = try Fixture()
        try f.donate(Fixture.items("old", 5))
        let fm = FileManager.default
        func plant(_ file: String, _ text: String) throws {
            for suffix in IndexStore.vectorSideFileSuffixes { try Data((text + suffix).utf8).write(to: URL(fileURLWithPath: file + suffix)) }
        }
        func leftovers(_ file: String) -> [String] { IndexStore.vectorSideFileSuffixes.filter { fm.fileExists(atPath: file + $0) } }
        #expect(Set(IndexStore.vectorSideFileSuffixes) == ["-partition", "-partition.tmp", "-vectors", "-vectors.tmp"])

        // A swap: the old index's partition (and a .tmp) go, the shadow's moves beside the file.
        try plant(f.path, "old")
        let shadow = try f.registry.beginShadow(bundle: f.bundle, index: "", resume: false)
        _ = try shadow.applySync([.items(try Fixture.items("new", 3))])
        try plant(shadow.path, "new")
        _ = try f.registry.swapInShadow(bundle: f.bundle, index: "", shadow: shadow)
        #expect(fm.contents(atPath: f.path + IndexStore.partitionFileSuffix) == Data("new-partition".utf8))
        #expect(!fm.fileExists(atPath: f.path + IndexStore.partitionFileSuffixes[1]))
        // The saved index is of a file that is gone (a shadow never saves one): neither kept nor moved.
        #expect(leftovers(f.path) == [IndexStore.partitionFileSuffix])
        #expect(leftovers(shadow.path).isEmpty)

        // A rebuild that ends without a swap.
        let dropped = try f.registry.beginShadow(bundle: f.bundle, index: "", resume: false)
        try plant(dropped.path, "dropped")
        f.registry.dropShadow(bundle: f.bundle, index: "")
        #expect(leftovers(dropped.path).isEmpty)

        // Recovery: the damaged file set aside; its partition neither beside the fresh file nor in the quarantine.
        try plant(f.path, "damaged")
        let quarantine = Quarantine(stateDirectory: f.dir, limit: 5)
        let name = quarantine.newName(bundle: f.bundle, index: "")
        _ = try f.registry.replace(bundle: f.bundle, index: "") { (path) throws(SearchlightError) in
            try quarantine.setAside(path: path, as: name, bundle: f.bundle, index: "", reason: "test")
        }
        #expect(leftovers(f.path).isEmpty)
        #expect(leftovers(quarantine.directory + "/" + name).isEmpty)
        #expect(quarantine.contains(name))

        // Erase: the bundle's directory goes whole.
        try plant(f.path, "erased")
        _ = f.registry.erase(bundle: f.bundle)
        #expect(!fm.fileExists(atPath: (f.path as NSString).deletingLastPathComponent))
    }

    @Test("opening an index purges its expired items without holding other bundles' calls")
    func purgeOnOpenDoesNotBlockOthers() async throws {
        let f = try Fixture()
        let other = "org.example.other"
        try f.donate(Fixture.items("live", 5))
        try f.donate(Fixture.items("gone", 2000, expires: Date().addingTimeInterval(-3600)))
        try f.donate(Fixture.items("b", 3), to: other)
        try f.reopen()
        // The purge of the first bundle, when its index opens, is held until the other bundle answered.
        let entered = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        f.registry.willPurgeOnOpen = { [bundle = f.bundle] key in
            guard key.bundle == bundle else { return }
            entered.signal()
            release.wait()
        }
        let opening = Task.detached { await offPool { try? f.served() } }
        await offPool { entered.wait() }
        // On a thread of its own, with a bound: with the purge under the registry's lock this waits
        // for the held purge (forever).
        let answered = await offPool { () -> Int? in
            let done = DispatchSemaphore(value: 0)
            nonisolated(unsafe) var count: Int?
            Thread.detachNewThread {
                count = try? f.served(other)
                done.signal()
            }
            return done.wait(timeout: .now() + 60) == .success ? count : nil
        }
        release.signal()
        #expect(answered == 3, "the other bundle's query waited for the purge")
        #expect(await opening.value == 5)
        let remaining = try f.registry.withStore(bundle: f.bundle, index: "", create: false) { $0?.count }
        #expect(remaining == 5, "the expired items were purged")
    }
}

/// Runs blocking work (semaphore waits, SQLite calls) on a thread of its own, never on one of the
/// cooperative pool's (two on this machine).
private func offPool<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: work()) }
    }
}
