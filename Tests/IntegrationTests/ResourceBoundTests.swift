#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import Testing
import TestThreads

/// What the daemon holds, read from /proc.
struct DaemonFigures: CustomStringConvertible {
    var descriptors: Int
    var threads: Int
    var residentKiB: Int

    init(pid: Int32) throws {
        descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8).split(separator: "\n")
        func field(_ name: String) -> Int {
            status.first { $0.hasPrefix(name + ":") }.flatMap { $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first }
                .flatMap { Int($0) } ?? -1
        }
        threads = field("Threads")
        residentKiB = field("VmRSS")
    }

    var description: String { "fds=\(descriptors) threads=\(threads) rss_kib=\(residentKiB)" }
}

/// The test client (`Tests/TestClient`) run as `uid` (nil: as the test's own user, root), to its end.
func runTestClient(as uid: UInt32?, _ arguments: [String]) throws -> CLIResult {
    let client = [Products.path("searchlight-test-client")] + arguments
    guard let uid else { return try runCLI(Array(client.dropFirst()), socket: nil, executable: client[0]) }
    return try runCLI(["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--"] + client, socket: nil, executable: "/usr/bin/setpriv")
}

/// Issue 13 item 5: one uid cannot exhaust the daemon by creating bundles. Open index stores are
/// bounded (`--max-open-indexes`), bundles per uid are capped (`--max-bundles-per-user`), and a
/// closed index reopens with its data. Real uids through `setpriv`, a real daemon.
@Suite("Resource bounds against many bundles", .onOwnThreads, .serialized,
    .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
struct ResourceBoundTests {
    static let alice: UInt32 = 64_101
    static let bob: UInt32 = 64_102

    /// Bundles created by the many-bundles test (`SEARCHLIGHT_MANY_BUNDLES`, default 2 000), with
    /// `SEARCHLIGHT_MANY_BUNDLES_OPEN` (default 32) as the daemon's open-index bound.
    static let manyBundles = Int(ProcessInfo.processInfo.environment["SEARCHLIGHT_MANY_BUNDLES"] ?? "") ?? 2_000
    static let manyBundlesOpen = Int(ProcessInfo.processInfo.environment["SEARCHLIGHT_MANY_BUNDLES_OPEN"] ?? "") ?? 32

    @Test("thousands of one-item bundles from several real uids keep the daemon's descriptors and threads under the open-index bound, and a graceful stop stays fast")
    func manyBundlesStayBounded() async throws {
        // Every wait of a minute or more is on a thread of its own (`blocking`), never on the
        // task pool the other suites' tests run on (a blocked pool stalls them all).
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let total = Self.manyBundles, maxOpen = Self.manyBundlesOpen
        let daemon = try await blocking {
            try DaemonProcess(arguments: ["--system", "--no-full-sync", "--log-level", "info", "--max-open-indexes", String(maxOpen),
                "--max-bundles-per-user", String(total)], dir: dir)
        }
        let pid = try #require(daemon.process?.processIdentifier)
        let baseline = try DaemonFigures(pid: pid)

        // Three clients at once (four connections each): alice and bob 40 % each, root the rest.
        let shares: [(UInt32?, String, Int)] = [(Self.alice, "com.alice.app", total * 2 / 5), (Self.bob, "com.bob.app", total * 2 / 5),
            (nil, "com.root.app", total - 2 * (total * 2 / 5))]
        let peak = Locked((descriptors: 0, threads: 0))
        let sampling = Locked(true)
        let sampler = Thread {
            while sampling.withLock({ $0 }) {
                if let f = try? DaemonFigures(pid: pid) {
                    peak.withLock { $0 = (max($0.descriptors, f.descriptors), max($0.threads, f.threads)) }
                }
                usleep(20_000)
            }
        }
        sampler.start()
        let started = Date()
        let results = Locked<[String: CLIResult]>([:])
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (uid, prefix, count) in shares {
                group.addTask {
                    let r = try await blocking { try runTestClient(as: uid, ["bundles", daemon.socket, String(count), prefix]) }
                    results.withLock { $0[prefix] = r }
                }
            }
            try await group.waitForAll()
        }
        let elapsed = Date().timeIntervalSince(started)
        sampling.withLock { $0 = false }
        for (uid, prefix, count) in shares {
            let r = try #require(results.withLock { $0[prefix] } as CLIResult?)
            #expect(r.status == 0 && r.stdout.contains("created=\(count) failed=0"), "uid \(uid.map(String.init) ?? "0"): \(r.stdout) \(r.stderr)")
        }
        let after = try DaemonFigures(pid: pid)
        let (maxDescriptors, maxThreads) = peak.withLock { $0 }

        // The bound: every store open at once may exceed it only by those the calls in flight
        // hold (twelve connections), each with a writer thread and the descriptors of a store.
        let inFlight = 12
        let descriptorBound = baseline.descriptors + (maxOpen + inFlight) * 11 + inFlight + 16
        let threadBound = baseline.threads + (maxOpen + inFlight) + inFlight + 16
        #expect(maxDescriptors <= descriptorBound, "descriptors peaked at \(maxDescriptors), bound \(descriptorBound)")
        #expect(maxThreads <= threadBound, "threads peaked at \(maxThreads), bound \(threadBound)")

        // Status over every bundle opens none of them (closed ones show recorded figures).
        let statusStarted = Date()
        let status = try await runCLI(["status", "--json"], socket: daemon.socket)
        let statusTook = Date().timeIntervalSince(statusStarted)
        let answer = try JSONValue.parse(status.stdout)
        #expect(answer["bundles"]?.arrayValue?.count == total)
        #expect((answer["openIndexes"]?.intValue ?? .max) <= maxOpen)

        // A bundle closed long ago answers its owner with its item.
        let old = try await OwnershipTests.cli(as: Self.alice, ["query", "com.alice.app.3", #"uniqueIdentifier == "*""#], socket: daemon.socket)
        #expect(old.status == 0 && old.stdout.contains("item-3"), "\(old.stderr)")

        let stopStarted = Date()
        try await blocking { daemon.stop(signal: SIGTERM) }
        let stopTook = Date().timeIntervalSince(stopStarted)
        print("many-bundles: bundles=\(total) max_open=\(maxOpen) created_in_s=\(String(format: "%.1f", elapsed)) baseline: \(baseline) after: \(after) peak_fds=\(maxDescriptors) peak_threads=\(maxThreads) status_s=\(String(format: "%.2f", statusTook)) stop_s=\(String(format: "%.2f", stopTook))")
        #expect(stopTook < 20, "a graceful stop took \(stopTook) s")
        // Thousands of directories: removed off the task pool too, not by TempDir's deinit.
        try await blocking { try? FileManager.default.removeItem(atPath: daemon.stateDir) }
    }

    @Test("the per-user bundle limit refuses the next bundle with quotaExceeded while other users, and administrators, still create theirs")
    func perUserBundleLimit() async throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try await DaemonProcess(arguments: ["--system", "--max-bundles-per-user", "3", "--max-indexes-per-bundle", "2"], dir: dir)
        let items = dir.path + "/more.jsonl"
        try #"{"uniqueIdentifier":"more"}"#.write(toFile: items, atomically: false, encoding: .utf8)
        chmod(items, 0o644)
        await #expect(try OwnershipTests.cli(as: Self.alice, ["import", "com.alice.first", items], socket: daemon.socket).status == 0)
        // Three more at once (four connections): two are created, whichever claims last is refused.
        let alice = try await blocking { [socket = daemon.socket] in try runTestClient(as: Self.alice, ["bundles", socket, "3", "com.alice.app"]) }
        #expect(alice.stdout.contains("created=2 failed=1"), "\(alice.stdout) \(alice.stderr)")
        #expect(alice.stdout.contains("already owns 3 bundles") && alice.stdout.contains("--max-bundles-per-user"), "\(alice.stdout)")
        let bob = try await blocking { [socket = daemon.socket] in try runTestClient(as: Self.bob, ["bundles", socket, "3", "com.bob.app"]) }
        #expect(bob.stdout.contains("created=3 failed=0"), "\(bob.stdout) \(bob.stderr)")
        let root = try await blocking { [socket = daemon.socket] in try runTestClient(as: nil, ["bundles", socket, "5", "com.root.app"]) }
        #expect(root.stdout.contains("created=5 failed=0"), "administrators are not limited: \(root.stdout)")

        // Alice's own bundles still take donations, and she may create up to two indexes in one.
        let more = try await OwnershipTests.cli(as: Self.alice, ["import", "com.alice.first", items], socket: daemon.socket)
        #expect(more.status == 0, "\(more.stderr)")
        await #expect(try OwnershipTests.cli(as: Self.alice, ["import", "com.alice.first", items, "--index", "second"], socket: daemon.socket).status == 0)
        let third = try await OwnershipTests.cli(as: Self.alice, ["import", "com.alice.first", items, "--index", "third"], socket: daemon.socket)
        #expect(third.status == 1 && third.stderr.contains("quotaExceeded") && third.stderr.contains("--max-indexes-per-bundle"), "\(third.stderr)")
        let refused = try await OwnershipTests.cli(as: Self.alice, ["import", "com.alice.other", items], socket: daemon.socket)
        #expect(refused.status == 1 && refused.stderr.contains("(quotaExceeded)"), "\(refused.stderr)")
    }

    @Test("an index closed by the open-index bound reopens transparently with its data, and a batch open across its close commits")
    func closedIndexReopens() async throws {
        let daemon = try await DaemonProcess(arguments: ["--max-open-indexes", "2"])
        let a = daemon.index("com.example.a")
        try await a.indexSearchableItems((1...3).map { SearchableItem(uniqueIdentifier: "a-\($0)", attributeSet: AttributeSet(contentType: "public.text")) })
        try await a.beginBatch()
        try await a.indexSearchableItems([SearchableItem(uniqueIdentifier: "a-batched", attributeSet: AttributeSet())])
        for name in ["com.example.b", "com.example.c", "com.example.d"] {
            try await daemon.index(name).indexSearchableItems([SearchableItem(uniqueIdentifier: "x", attributeSet: AttributeSet())])
        }
        try await daemon.waitForLog("index closed bundle=com.example.a")
        let status = try await daemon.admin().call(Method.adminStatus, ["bundle": "com.example.a"])
        #expect(status["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first?["open"] == false, "\(status)")
        // The same connection goes on: its batch (kept in the daemon's session, not the store) commits.
        try await a.endBatch(newClientState: Data("s1".utf8))
        let all = try await SearchQuery(queryString: #"uniqueIdentifier == "a-*""#, index: a).allItems().map(\.uniqueIdentifier).sorted()
        #expect(all == ["a-1", "a-2", "a-3", "a-batched"])
        #expect(try await a.fetchLastClientState() == Data("s1".utf8))
        try await daemon.waitForLog("index opened bundle=com.example.a")
    }
}

/// A value shared between a test and the threads it starts.
final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let lock = NSLock()
    init(_ value: Value) { self.value = value }
    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
