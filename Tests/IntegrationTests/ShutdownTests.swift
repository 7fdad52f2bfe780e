#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import Testing
import TestThreads

/// Stopping the daemon (SIGTERM): gracefully, with what was in flight kept for the next start,
/// and forced when the graceful stop takes longer than `--stop-timeout`.
@Suite("Stopping the daemon", .onOwnThreads)
struct ShutdownTests {
    @Test("SIGTERM asks a running extension to exit; its request in flight stays journaled with no attempt counted, and the next start resumes it")
    func sigtermInterruptsAndResumes() async throws {
        var unit = TestUnit("org.example.test.term", bundle: "org.example.term", mode: "slow")
        unit.environment["TEST_EXTENSION_SLOW_MS"] = "60000"
        let bench = try await ExtensionBench.start([unit])
        let sent = try await bench.waitForLog("reindex request sent", "label=\(unit.label)")[0]
        let id = try #require(ExtensionBench.field("id", in: sent))
        try await bench.until("progress from the extension") {
            try await bench.requests(bundle: unit.bundle).first?["progress"] != nil
        }
        let mark = bench.mark
        try await blocking { bench.daemon.stop(signal: SIGTERM) }
        #expect(bench.lines(["reindex request interrupted; it stays journaled", "id=\(id) "], after: mark).count == 1)
        #expect(bench.lines(["reindex request failed"], after: mark).isEmpty, "an interruption is no failed attempt")
        #expect(bench.lines(["searchlightd stopped"], after: mark).count == 1)
        #expect(bench.lines(["graceful stop did not finish in time"], after: mark).isEmpty)

        try bench.control(unit.label).setMode("ok")
        let restart = bench.mark
        try await blocking { try bench.daemon.start() }
        try await bench.waitForLog("reindex request sent id=\(id) label=\(unit.label)", after: restart)
        #expect(try await bench.waitForAcknowledgement(unit.label, after: restart) == id)
    }

    @Test("a graceful stop that outlasts --stop-timeout is forced: an extension that ignores SIGTERM and extension.shutdown is killed, and the daemon exits")
    func forcedStop() async throws {
        var unit = TestUnit("org.example.test.stubborn", bundle: "org.example.stubborn", mode: "stubborn")
        // Gracefully the daemon would give it 5 s before SIGKILL; the stop timeout comes first.
        unit.exitTimeOut = 30
        let bench = try await ExtensionBench.start([unit], arguments: ["--stop-timeout", "1"])
        let control = bench.control(unit.label)
        try await bench.until("the extension to turn stubborn") { control.received.contains { $0.kind == "stubborn" } }
        let pid = try #require(control.received.first { $0.kind == "stubborn" }?.pid)
        let mark = bench.mark
        try await blocking { bench.daemon.stop(signal: SIGTERM) }
        #expect(bench.lines(["graceful stop did not finish in time; forcing it", "after_s=1"], after: mark).count == 1)
        #expect(bench.lines(["searchlightd stopped"], after: mark).count == 1)
        // Killed (a zombie until whoever inherited it reaps it).
        try await bench.until("the stubborn extension to be gone") { !processExists(pid) || Self.isZombie(pid) }
    }

    static func isZombie(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return false }
        return stat[stat.index(after: close)...].split(separator: " ").first == "Z"
    }
}
