#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import SearchlightKit
import SearchlightWire

/// Background refinement (Docs/SemanticSearch.md, "Refinement") against the real daemon and the
/// real model: started by the idle trigger on a fake `--proc-root`, stopped by pressure written
/// there, resumed when the machine is idle again. Every bound is read from the daemon's own
/// counters (the throttle's sample count in `status` and in its log lines), never from a clock.
@Suite("Semantic refinement and the load", .serialized)
struct RefinementIntegrationTests {
    /// Some hundreds, short: the debug daemon refines them on every core for tens of seconds
    /// while other integration suites run beside this one.
    static let itemCount = 200

    /// Items of a couple of dozen words each, all different.
    static func items() -> [String] {
        let subjects = ["music player", "chess engine", "mail server", "image editor", "text editor", "web browser", "backup tool",
                        "network monitor", "spreadsheet", "photo manager", "video converter", "password manager"]
        let verbs = ["plays", "organizes", "edits", "converts", "checks", "archives", "shares", "renders", "filters", "indexes"]
        let objects = ["audio files and playlists", "games against the computer", "electronic mail between servers", "pictures and drawings",
                       "source code with syntax highlighting", "pages on the internet", "files to remote disks", "traffic on the local network"]
        return (0..<itemCount).map { i in
            let s = subjects[i % subjects.count], v = verbs[(i / 3) % verbs.count], o = objects[(i / 7) % objects.count]
            let text = "A \(s) that \(v) \(o), item \(i)."
            return #"{"uniqueIdentifier":"r\#(i)","attributeSet":{"title":"\#(s.capitalized) \#(i)","contentDescription":"\#(s) \#(i)","textContent":"\#(text)"}}"#
        }
    }

    static func status(_ daemon: DaemonProcess) async throws -> JSONValue {
        try JSONValue.parse(Array(try await runCLI(["status", "--json"], socket: daemon.socket).stdout.utf8))
    }

    static func refined(_ daemon: DaemonProcess) async throws -> (vectors: Int, refined: Int) {
        let index = try await status(daemon)["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first
        return (index?["vectors"]?.intValue ?? -1, index?["refined"]?.intValue ?? -1)
    }

    /// Polls `status` until `condition` holds (the daemon's state is the event waited on).
    static func until(_ what: String, timeout: TimeInterval, _ condition: () async throws -> Bool) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while try await !condition() {
            guard Date() < deadline else { throw HarnessError("not within \(Int(timeout)) s: \(what)") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// `name=123` in a log line (`name` preceded by a space, so `sample` is not `last_batch_sample`).
    static func field(_ line: String, _ name: String) -> Int? {
        guard let r = line.range(of: " \(name)=") else { return nil }
        return Int(line[r.upperBound...].prefix { $0.isNumber || $0 == "-" })
    }

    @Test("refinement stops with the batch in flight when the sampler sees pressure, refines nothing while paused, and resumes when idle")
    func yieldsAndResumes() async throws {
        guard let model = SemanticSearchTests.transformerModel else { return }
        let dir = TempDir()
        let proc = dir.path + "/proc"
        // Paused from the start: no maintenance while the items come in.
        try ThrottleIntegrationTests.writePSI(proc, cpu: 70)
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model, "--proc-root", proc, "--load-interval", "0.5",
            "--resume-after", "0.5", "--idle-after", "0.5", "--maintenance-interval", "1"], dir: dir)
        try await SemanticSearchTests.importItems(Self.items(), bundle: "com.example.refine", daemon: daemon, dir: dir) {
            try await runCLI($0, socket: daemon.socket)
        }
        let start = try await Self.refined(daemon)
        #expect(start.vectors == Self.itemCount && start.refined == 0, "\(start)")

        // Idle: the idle trigger starts maintenance, which refines.
        try ThrottleIntegrationTests.writePSI(proc, cpu: 0)
        try await Self.until("refinement under way", timeout: 120) { try await Self.refined(daemon).refined > 0 }
        let mark = daemon.log.count
        try ThrottleIntegrationTests.writePSI(proc, cpu: 70)
        // Samples counted after the write: every sample after these began after it. (Counted
        // before the write, the test's own delay between the count and the write — a second and
        // more on a loaded machine — let samples with the old figures pass, and a correct daemon
        // failed the bound.)
        let written = try await #require(try Self.status(daemon)["throttle"]?["samples"]?.intValue)

        // The throttle sees it at the next sample (one taken while the file was being written may
        // have read the old figures: at most the one after).
        let paused = try await daemon.waitForLog("to=paused", after: mark)
        #expect(paused.contains("load throttle changed") && paused.contains("cpu=70.0"), "\(paused)")
        let pressureSample = try #require(Self.field(paused, "sample"), "\(paused)")
        #expect(pressureSample <= written + 2, "paused at sample \(pressureSample), the pressure written before sample \(written + 1)")
        // The batch in flight when pressure was sampled is the last one: the last batch began
        // before that sample.
        let stopped = try await daemon.waitForLog("vectors refined", after: mark, timeout: 120)
        #expect(stopped.contains("yielded=true"), "\(stopped)")
        let lastBatch = try #require(Self.field(stopped, "last_batch_sample"), "\(stopped)")
        #expect(lastBatch >= 0 && lastBatch < pressureSample, "last batch began at sample \(lastBatch); pressure seen at \(pressureSample)")
        try await daemon.waitForLog("maintenance yielded to load", after: mark)
        let atPause = try await Self.refined(daemon).refined
        #expect(atPause > 0 && atPause < Self.itemCount, "\(atPause) refined when it yielded")

        // Still paused two samples later: nothing refined meanwhile.
        try await Self.until("two more samples", timeout: 30) { try await Self.status(daemon)["throttle"]?["samples"]?.intValue ?? 0 >= pressureSample + 2 }
        await #expect(try Self.status(daemon)["throttle"]?["state"]?.stringValue == "paused")
        await #expect(try Self.refined(daemon).refined == atPause)

        // Idle again: a new run resumes where the unrefined vectors are, and finishes.
        let resumed = daemon.log.count
        try ThrottleIntegrationTests.writePSI(proc, cpu: 0)
        try await daemon.waitForLog("from=throttled to=normal", after: resumed)
        try await Self.until("every item refined", timeout: 300) { try await Self.refined(daemon).refined == Self.itemCount }
        let finished = try await daemon.waitForLog("vectors refined", after: resumed, timeout: 60)
        #expect(finished.contains("yielded=false") && Self.field(finished, "items") == Self.itemCount - atPause, "\(finished)")
        let search = try await runCLI(["search", "com.example.refine", "listen to songs", "--json"], socket: daemon.socket)
        #expect(search.status == 0, "\(search.stderr)")
    }
}
