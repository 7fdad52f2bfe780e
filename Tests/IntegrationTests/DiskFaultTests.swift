#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit
import Synchronization

/// A small tmpfs mounted on a directory, for disk-full tests (needs root).
enum SmallFileSystem {
    /// Whether this machine lets us mount one: root, and `mount -t tmpfs` works here (a container
    /// without CAP_SYS_ADMIN refuses it).
    static let available: Bool = {
        guard getuid() == 0 else { return false }
        let probe = TempDir("slmnt")
        guard (try? mount(probe.path, megabytes: 1)) != nil else { return false }
        unmount(probe.path)
        return true
    }()

    static func mount(_ path: String, megabytes: Int) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let status = run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m,mode=0700", "tmpfs", path])
        guard status == 0 else { throw HarnessError("mount -t tmpfs on \(path) failed with status \(status)") }
    }

    /// Unmounts; lazily if something still holds a file open there.
    static func unmount(_ path: String) {
        if run("/bin/umount", [path]) != 0 { _ = run("/bin/umount", ["-l", path]) }
    }

    @discardableResult
    static func run(_ program: String, _ arguments: [String]) -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: program)
        p.arguments = arguments
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return -1 }
        p.waitUntilExit()
        return p.terminationStatus
    }

    /// Writes a file until the file system is full; returns the bytes written.
    @discardableResult
    static func fill(_ path: String) -> Int {
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var total = 0
        var chunk = [UInt8](repeating: 0x5A, count: 16_384)
        while true {
            let n = chunk.withUnsafeMutableBytes { write(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            total += n
        }
        // The last pages: a few bytes at a time.
        var byte: UInt8 = 0x5A
        while write(fd, &byte, 1) == 1 { total += 1 }
        return total
    }
}

/// Issue 6, "Disk faults": the state directory on a small tmpfs (a real file system running out
/// of space, not an injected error), filled up while a client donates.
@Suite("Disk faults", .onOwnThreads, .serialized,
    .enabled(if: SmallFileSystem.available, "needs root and `mount -t tmpfs` to put the state directory on a small file system"))
struct DiskFaultTests {
    static let bundle = "com.example.disk"
    static let label = "disk-ext"

    func donation(_ prefix: String, _ n: Int, bytes: Int) -> [SearchableItem] {
        let text = String(repeating: "filler words for a full disk ", count: bytes / 29)
        return (0..<n).map { item("\(prefix)-\($0)", title: "\(prefix) \($0)", text: "\(prefix) \($0) " + text) }
    }

    func identifiers(_ index: SearchableIndex) async throws -> Set<String> {
        Set(try await SearchQuery(queryString: #"uniqueIdentifier == "*""#, index: index).allItems().map(\.uniqueIdentifier))
    }

    @Test("disk full while committing: the call fails with a clear error, nothing acknowledged is lost, reads go on, writes work again once space returns")
    func diskFull() async throws {
        let mounted = Mutex<String?>(nil)
        let bench: ExtensionBench
        do {
            bench = try await ExtensionBench.start([TestUnit(Self.label, bundle: "com.example.disk-ext")], prepare: { dir in
                try SmallFileSystem.mount(dir.path + "/state", megabytes: 8)
                mounted.withLock { $0 = dir.path + "/state" }
            })
        } catch {
            if let path = mounted.withLock({ $0 }) { SmallFileSystem.unmount(path) }
            throw error
        }
        let state = bench.daemon.stateDir
        // The daemon's graceful stop and the unmount wait off the test pool, whatever the outcome.
        let outcome: Result<Void, any Error>
        do {
            try await fillAndRecover(bench)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        try await blocking {
            bench.daemon.stop(signal: SIGTERM)
            SmallFileSystem.unmount(state)
        }
        try outcome.get()
    }

    func fillAndRecover(_ bench: ExtensionBench) async throws {
        let state = bench.daemon.stateDir
        try await bench.waitForAcknowledgement(Self.label, timeout: 60)

        // Acknowledged before the disk fills.
        let index = bench.daemon.index(Self.bundle)
        var acknowledged = Set<String>()
        for call in 0..<10 {
            let items = donation("before\(call)", 20, bytes: 200)
            try await index.indexSearchableItems(items)
            acknowledged.formUnion(items.map(\.uniqueIdentifier))
        }

        try await index.beginBatch()
        try await index.indexSearchableItems(donation("batch-before", 5, bytes: 200))
        try await index.endBatch(newClientState: Data("before".utf8))
        acknowledged.formUnion((0..<5).map { "batch-before-\($0)" })

        // Fill the file system, then donate until a commit finds no space.
        let filler = state + "/filler"
        let filled = SmallFileSystem.fill(filler)
        var failure: SearchlightError?
        var failed: [SearchableItem] = []
        var callsAfterFill = 0
        for call in 0..<400 {
            let items = donation("full\(call)", 20, bytes: 4000)
            callsAfterFill += 1
            do {
                try await index.indexSearchableItems(items)
                acknowledged.formUnion(items.map(\.uniqueIdentifier))
            } catch let error as SearchlightError {
                failure = error
                failed = items
                break
            }
        }
        print("disk full: filler \(filled) bytes, \(callsAfterFill) calls after the fill, error: \(failure.map { "\($0)" } ?? "none")")
        let error = try #require(failure, "400 donations of 80 kB each fit on an 8 MB file system")
        #expect(error.code == .indexUnavailable)
        #expect(error.message.contains("disk full") && error.message.contains("nothing was applied") && error.message.contains("free space and retry"),
            "\(error.message)")

        // The operator sees it in the log (one line per 10 s however many calls fail).
        let logged = try await bench.waitForLog("call failed: index unavailable", "disk full while writing")[0]
        #expect(logged.contains("method=index.items"), "\(logged)")

        // Reads go on while the disk is full; nothing acknowledged is lost, nothing of the failed call applied.
        var present = try await identifiers(index)
        #expect(acknowledged.isSubset(of: present), "acknowledged but missing: \(acknowledged.subtracting(present).sorted().prefix(5))")
        #expect(present.isDisjoint(with: failed.map(\.uniqueIdentifier)), "the failed call was applied in part")
        let found = try await SearchQuery(queryString: #"title == "before3*""#, index: index).allItems()
        #expect(found.count == 20)
        let status = try await bench.admin(Method.adminStatus)
        #expect(status["pid"]?.intValue == Int(bench.daemon.process?.processIdentifier ?? -1))

        // A batch ending on the full disk: refused whole, the client state unchanged.
        SmallFileSystem.fill(filler)
        let batch = donation("batch-full", 20, bytes: 4000)
        try await index.beginBatch()
        try await index.indexSearchableItems(batch)
        await #expect(throws: SearchlightError.self) { try await index.endBatch(newClientState: Data("full".utf8)) }
        #expect(try await index.fetchLastClientState() == Data("before".utf8))
        #expect(try await identifiers(index).isDisjoint(with: batch.map(\.uniqueIdentifier)))

        // The request journal (supervisor.sqlite) on the full disk: journaled, or refused clearly.
        SmallFileSystem.fill(filler)
        var journaledWhileFull = false
        do {
            _ = try await bench.admin(Method.adminReindex, ["target": .string(Self.label), "identifiers": ["while-full"], "wait": false])
            journaledWhileFull = true
        } catch let error as SearchlightError {
            print("disk full: admin.reindex refused: \(error)")
            #expect(error.code == .indexUnavailable, "\(error)")
            #expect(error.message.contains("disk full while journaling") && error.message.contains("nothing was queued: free space and retry"), "\(error)")
        }

        // Space returns: the same call succeeds without a restart, and so does the journal.
        try FileManager.default.removeItem(atPath: filler)
        try await index.indexSearchableItems(failed)
        acknowledged.formUnion(failed.map(\.uniqueIdentifier))
        try await index.beginBatch()
        try await index.indexSearchableItems(batch)
        try await index.endBatch(expectedClientState: Data("before".utf8), newClientState: Data("after".utf8))
        acknowledged.formUnion(batch.map(\.uniqueIdentifier))
        let mark = bench.mark
        let answer = try await bench.admin(Method.adminReindex, ["target": .string(Self.label), "identifiers": ["after-full"], "wait": false])
        #expect(answer["requestId"] != nil)
        try await bench.waitForAcknowledgement(Self.label, after: mark, timeout: 60)
        let extensionItems = try await identifiers(bench.daemon.index("com.example.disk-ext"))
        #expect(extensionItems.contains("after-full"))
        if journaledWhileFull {
            try await bench.until("the request journaled on the full disk to be done", timeout: 60) {
                try await identifiers(bench.daemon.index("com.example.disk-ext")).contains("while-full")
            }
        }
        present = try await identifiers(index)
        #expect(acknowledged.isSubset(of: present))
        let check = try await bench.admin(Method.adminCheck)
        #expect(check["ok"]?.boolValue == true, "\(check)")

        // And it all survives a crash right after.
        try await blocking {
            bench.daemon.stop(signal: SIGKILL)
            try bench.daemon.start()
        }
        present = try await identifiers(bench.daemon.index(Self.bundle))
        #expect(acknowledged.isSubset(of: present), "after the restart: \(acknowledged.subtracting(present).count) missing")
        #expect(try await bench.daemon.index(Self.bundle).fetchLastClientState() == Data("after".utf8))
        print("disk full: \(acknowledged.count) acknowledged items checked, journaled while full: \(journaledWhileFull)")
    }
}
