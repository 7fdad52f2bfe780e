#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit
import SearchlightFuzz
import Synchronization

/// What the soak's workers did, and what went wrong, by kind.
final class SoakStats: @unchecked Sendable {
    private let lock = NSLock()
    private var operations: [String: Int] = [:]
    private var expected: [String: Int] = [:]
    private var unexpected: [String: Int] = [:]
    private var examples: [String] = []
    func count(_ kind: String) { lock.withLock { operations[kind, default: 0] += 1 } }
    /// An error the workload provokes on purpose (a crashing extension's request).
    func expectedError(_ kind: String, _ error: any Error) { lock.withLock { expected["\(kind): \(Self.name(error))", default: 0] += 1 } }
    func unexpectedError(_ kind: String, _ error: any Error) {
        lock.withLock {
            unexpected["\(kind): \(Self.name(error))", default: 0] += 1
            if examples.count < 10 { examples.append("\(kind): \(error)") }
        }
    }
    static func name(_ error: any Error) -> String {
        (error as? SearchlightError)?.code.map { String(describing: $0) } ?? String(describing: type(of: error))
    }
    var summary: (operations: [String: Int], expected: [String: Int], unexpected: [String: Int], examples: [String]) {
        lock.withLock { (operations, expected, unexpected, examples) }
    }
}

/// The daemon's resident memory and open descriptors, from /proc.
struct ProcessSample: Sendable {
    var rssKiB: Int
    var fds: Int

    static func of(_ pid: Int32) -> ProcessSample? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
              let kib = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) }),
              let fds = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else { return nil }
        return ProcessSample(rssKiB: kib, fds: fds.count)
    }
}

/// Issue 6, "Soak": minutes of mixed load on one daemon — donations, batches and deletes from
/// two clients, queries, reindex requests (waited for, and background ones), an extension made to
/// crash again and again, and the load throttle moved by a fake `--proc-root` — reporting the
/// daemon's memory and descriptors and every error by kind. Not part of `make test`: `make soak`
/// runs it (`SOAK_SECONDS`, default 180). It fails on an unexpected error, on descriptors that
/// grow (a leak), on resident memory growing by more than `SOAK_RSS_MIB` (64) after the warm-up,
/// on a donor's index that differs from what was acknowledged, or on `admin.check`.
enum SoakSettings {
    static let seconds = ProcessInfo.processInfo.environment["SEARCHLIGHT_SOAK_SECONDS"].flatMap(Double.init)
    static let rssBoundMiB = ProcessInfo.processInfo.environment["SEARCHLIGHT_SOAK_RSS_MIB"].flatMap(Int.init) ?? 64
}

@Suite("Soak", .onOwnThreads, .serialized,
    .enabled(if: SoakSettings.seconds != nil, "runs only under `make soak` (SEARCHLIGHT_SOAK_SECONDS set)"))
struct SoakTests {
    /// Descriptors the daemon may hold at the end beyond the warm-up's (index reader pools filling up).
    static let fdSlack = 16
    static let crashy = TestUnit("soak-crashy", bundle: "com.example.soak-crashy")
    static let steady = TestUnit("soak-steady", bundle: "com.example.soak-steady")

    @Test("mixed load for SOAK_SECONDS: no unexpected error, no descriptor leak, bounded memory, nothing lost")
    func soak() async throws {
        let seconds = SoakSettings.seconds ?? 180
        let seed = UInt64(Date().timeIntervalSince1970 * 1000)
        print("soak: \(Int(seconds)) s, seed=\(seed)")
        let proc = TempDir("slproc")
        try ThrottleIntegrationTests.writePSI(proc.path, cpu: 0)
        // --backoff 0: the crashy extension is relaunched at once every time; with any base the
        // crash streak doubles the delay (only 10 healthy minutes forgive it), and a soak crashes
        // it dozens of times.
        let bench = try await ExtensionBench.start([Self.crashy, Self.steady],
            arguments: ["--proc-root", proc.path, "--load-interval", "0.2", "--resume-after", "0.5", "--backoff", "0"])
        try await bench.waitForAcknowledgement(Self.crashy.label, timeout: 60)
        try await bench.waitForAcknowledgement(Self.steady.label, timeout: 60)
        let pid = try #require(bench.daemon.process?.processIdentifier)
        let launched = try #require(ProcessSample.of(pid))

        let stats = SoakStats()
        let stop = CrashProgress()
        let started = Date()
        let warmUp = min(30, seconds / 6)
        let samples = Mutex<[ProcessSample]>([])
        let warm = Mutex<ProcessSample?>(nil)
        let socket = bench.socket
        var rng = FuzzRandom(seed: seed)
        let seeds = (0..<4).map { _ in rng.next() }

        let sampler = Task {
            while !stop.isStopped {
                if let s = ProcessSample.of(pid) {
                    samples.withLock { $0.append(s) }
                    if Date().timeIntervalSince(started) >= warmUp { warm.withLock { if $0 == nil { $0 = s } } }
                }
                try? await Task.sleep(for: .milliseconds(500))
            }
        }
        let donors = (0..<2).map { client in
            Task { () -> (CrashClientModel, CrashOperation?) in
                let index = SearchableIndex(name: "soak\(client)", bundleIdentifier: "com.example.soak", socketPath: socket)
                let outcome = await CrashDurabilityTests.runClient(client, model: CrashClientModel(), index: index, seed: seeds[client],
                    firstOperation: 0, progress: stop)
                await index.close()
                return outcome
            }
        }
        let querier = Task {
            var rng = FuzzRandom(seed: seeds[2])
            let queries = [#"title == "donation*""#, #"title == "batch*"c"#, #"textContent == "test item*""#,
                           #"uniqueIdentifier == "c0-1*""#, #"title == "*update*" || title == "batch 1*""#]
            while !stop.isStopped {
                let bundle = rng.pick(["com.example.soak", "com.example.soak-steady", "com.example.soak-crashy"])
                let name = bundle == "com.example.soak" ? "soak\(rng.below(2))" : ""
                let index = SearchableIndex(name: name, bundleIdentifier: bundle, socketPath: socket)
                do {
                    _ = try await SearchQuery(queryString: rng.pick(queries), queryContext: SearchQueryContext(fetchAttributes: ["title"]),
                        index: index).allItems()
                    stats.count("query")
                } catch {
                    stats.unexpectedError("query", error)
                }
                await index.close()
            }
        }
        let reindexer = Task {
            var rng = FuzzRandom(seed: seeds[3])
            var serial = 0
            while !stop.isStopped {
                serial += 1
                let choice = rng.below(3)
                let label = choice == 1 ? Self.crashy.label : Self.steady.label
                var params: JSONValue = ["target": .string(label), "identifiers": [.string("r\(serial)")], "wait": true, "timeout": 30]
                if choice == 2 { params = ["target": .string(label), "identifiers": [.string("bg\(serial)")], "background": true, "wait": false] }
                let kind = ["reindex steady", "reindex crashy", "reindex background"][choice]
                do {
                    _ = try await bench.admin(Method.adminReindex, params)
                    stats.count(kind)
                } catch let error as SearchlightError where choice == 1 && (error.code == .extensionFailed || error.code == .requestTimedOut) {
                    stats.expectedError(kind, error)
                } catch {
                    stats.unexpectedError(kind, error)
                }
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
        let chaos = Task {
            let control = bench.control(Self.crashy.label)
            var crashes = 0
            while !stop.isStopped {
                try? await Task.sleep(for: .seconds(2))
                let before = control.received.filter { $0.mode == "crash" }.count
                try? control.setMode("crash")
                // Until a request met the crash (the reindexer sends one every few calls).
                let deadline = Date().addingTimeInterval(20)
                while control.received.filter({ $0.mode == "crash" }).count == before, Date() < deadline, !stop.isStopped {
                    try? await Task.sleep(for: .milliseconds(20))
                }
                try? control.setMode("ok")
                crashes = control.received.filter { $0.mode == "crash" }.count
            }
            return crashes
        }
        let throttle = Task {
            var rng = FuzzRandom(seed: seed ^ 0x7)
            var changes = 0
            while !stop.isStopped {
                try? await Task.sleep(for: .milliseconds(1500))
                try? ThrottleIntegrationTests.writePSI(proc.path, cpu: rng.pick([0, 0, 30, 70]))
                changes += 1
            }
            return changes
        }

        try await bench.until("the soak's \(Int(seconds)) s", timeout: seconds + 30) { Date().timeIntervalSince(started) >= seconds }
        stop.stop()
        var outcomes: [(CrashClientModel, CrashOperation?)] = []
        for donor in donors { outcomes.append(await donor.value) }
        await querier.value
        await reindexer.value
        let crashes = await chaos.value
        let pressureWrites = await throttle.value
        await sampler.value

        // Quiet again: normal load, the journal drained (failed-for-good requests aside), then the last sample.
        try ThrottleIntegrationTests.writePSI(proc.path, cpu: 0)
        try bench.control(Self.crashy.label).setMode("ok")
        try await bench.until("the journal to drain", timeout: 120) {
            (try await bench.admin(Method.adminRequests)["requests"]?.arrayValue ?? []).allSatisfy { $0["state"]?.stringValue == "failed" }
        }
        for (client, (model, inFlight)) in outcomes.enumerated() {
            #expect(inFlight == nil, "donor \(client) failed a call: \(stop.errorKinds)")
            let actual = try await CrashDurabilityTests.read(bench.daemon.index("com.example.soak", name: "soak\(client)"))
            #expect(actual == model, "donor \(client): \(actual.items.count) items, acknowledged \(model.items.count)")
        }
        let check = try await bench.admin(Method.adminCheck)
        #expect(check["ok"]?.boolValue == true, "\(check)")
        // Let connections closed by the clients be reaped before the last count.
        var end = try #require(ProcessSample.of(pid))
        let warmSample = warm.withLock { $0 } ?? launched
        try await bench.until("descriptors back near the warm-up's", timeout: 20) {
            end = ProcessSample.of(pid) ?? end
            return end.fds <= warmSample.fds + Self.fdSlack
        }
        let all = samples.withLock { $0 } + [end]
        let maxRSS = all.map(\.rssKiB).max() ?? 0, maxFDs = all.map(\.fds).max() ?? 0
        let summary = stats.summary
        let throttleChanges = bench.lines("load throttle changed").count
        // Whether growth levels off: RSS once a minute (samples are 0.5 s apart), beside the data
        // the daemon's page caches can hold (every index's file).
        let perMinute = stride(from: 0, to: all.count, by: 120).map { all[$0].rssKiB / 1024 }
        let indexFiles = FileManager.default.enumerator(atPath: bench.daemon.stateDir + "/indexes")?.compactMap { $0 as? String }
            .filter { $0.hasSuffix(".sqlite") }
            .compactMap { try? FileManager.default.attributesOfItem(atPath: bench.daemon.stateDir + "/indexes/" + $0)[.size] as? Int } ?? []
        print("""
            soak: \(Int(seconds)) s seed=\(seed); operations \(summary.operations.sorted { $0.key < $1.key }) \
            acknowledgedDonorCalls=\(stop.count); extension crashes injected=\(crashes), pressure writes=\(pressureWrites), \
            throttle changes=\(throttleChanges); RSS KiB launched=\(launched.rssKiB) warm=\(warmSample.rssKiB) end=\(end.rssKiB) max=\(maxRSS); \
            RSS MiB by minute=\(perMinute); index files \(indexFiles.count), \(indexFiles.reduce(0, +) >> 20) MiB; \
            fds launched=\(launched.fds) warm=\(warmSample.fds) end=\(end.fds) max=\(maxFDs); expected errors \(summary.expected); \
            unexpected errors \(summary.unexpected) \(summary.examples)
            """)
        #expect(summary.unexpected.isEmpty, "\(summary.examples)")
        #expect(end.rssKiB - warmSample.rssKiB < SoakSettings.rssBoundMiB * 1024,
            "RSS grew from \(warmSample.rssKiB) KiB to \(end.rssKiB) KiB, beyond \(SoakSettings.rssBoundMiB) MiB")
        #expect(crashes > 0 && throttleChanges > 0, "the soak injected no crash or no throttle change")
    }
}
