#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import SearchlightKit

/// 5. Throttle reaction: a daemon reading a fake `--proc-root`, a stream of background
/// reindex-identifiers requests going through the test extension, then the cpu pressure file
/// rewritten past the pause mark. Measured from that write to the `throttle.changed` paused
/// event, and to the last background request dispatched (`request.sent`) after it. The daemon
/// samples the load every `--load-interval` (default 2 s), so both are expected between 0 and 2 s.
final class ThrottleBench: @unchecked Sendable {
    static let label = "org.searchlight.bench.throttle"
    let dir: String
    let runs: Int
    private let events = Mutex<[(name: String, state: String?, time: Double)]>([])

    init(runs: Int) {
        self.runs = runs
        dir = "/tmp/slbench-\(getpid())-throttle"
    }

    var procRoot: String { dir + "/proc" }

    static var extensionPath: String { Daemon.executableDirectory + "/searchlight-test-extension" }

    func writePressure(cpu: Double) throws { try writeFakePressure(procRoot: procRoot, cpu: cpu) }

    private func writeUnit() throws {
        let control = dir + "/control"
        try FileManager.default.createDirectory(atPath: control, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir + "/units", withIntermediateDirectories: true)
        try Data("ok".utf8).write(to: URL(fileURLWithPath: control + "/mode"))
        let unit = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
                <key>Label</key><string>\(Self.label)</string>
                <key>BundleIdentifier</key><string>\(Self.label)</string>
                <key>Program</key><string>\(Self.extensionPath)</string>
                <key>ProcessType</key><string>Standard</string>
                <key>ThrottleInterval</key><integer>0</integer>
                <key>TimeOut</key><integer>600</integer>
                <key>EnvironmentVariables</key>
                <dict><key>TEST_EXTENSION_CONTROL</key><string>\(control)</string><key>TEST_EXTENSION_ITEMS</key><string>10</string></dict>
            </dict>
            </plist>
            """
        try Data(unit.utf8).write(to: URL(fileURLWithPath: dir + "/units/\(Self.label).plist"))
    }

    private func record(_ method: String, _ params: JSONValue) {
        guard method == "admin.event", let name = params["event"]?.stringValue,
              name == "request.sent" || name == "throttle.changed" else { return }
        let t = now()
        events.withLock { $0.append((name, params["state"]?.stringValue, t)) }
    }

    private func firstEvent(_ name: String, state: String? = nil, after t0: Double, timeout: Double) async throws -> Double? {
        let deadline = now() + timeout
        while now() < deadline {
            if let hit = events.withLock({ $0.first { $0.name == name && $0.time >= t0 && (state == nil || $0.state == state) } }) {
                return hit.time
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        return nil
    }

    private func drained(_ admin: SearchlightConnection) async throws {
        let deadline = now() + 60
        while now() < deadline {
            if try await admin.call("admin.requests")["requests"]?.arrayValue?.isEmpty == true { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        fatal("throttle bench: background requests did not drain within 60 s")
    }

    /// Seconds from the pressure write to the paused event, and to the last dispatch after it (0: none).
    func run() async throws -> (paused: [Double], stopped: [Double]) {
        try? FileManager.default.removeItem(atPath: dir)
        try writePressure(cpu: 0)
        try writeUnit()
        let daemon = try Daemon(dir: dir, arguments: ["--proc-root", procRoot, "--resume-after", "0.5"])
        defer { daemon.stop() }
        let monitor = SearchlightConnection(role: .admin, socketPath: daemon.socket, onNotification: { [self] in record($0, $1) })
        _ = try await monitor.call("admin.monitor")
        let admin = SearchlightConnection(role: .admin, socketPath: daemon.socket)
        try await drained(admin)  // the initial reindex-all
        var paused: [Double] = [], stopped: [Double] = []
        var next = 0
        for run in 1...runs {
            // A stream of background requests: each is dispatched as soon as the previous one is
            // acknowledged (the ones queued meanwhile coalesce into one).
            let streaming = StreamFlag()
            let submitter = Task { [next] in
                var k = next
                while streaming.on {
                    _ = try? await admin.call("admin.reindex", ["target": .string(Self.label), "identifiers": [.string("bench-\(k)")],
                        "background": true, "wait": false])
                    k += 1
                    try? await Task.sleep(for: .milliseconds(10))
                }
                return k
            }
            // 1 s of stream, then a random part of a sampling period: the write lands at any
            // phase of the daemon's 2 s sampling, as real pressure would.
            try await Task.sleep(for: .seconds(1 + Double.random(in: 0..<2)))
            let t0 = now()
            try writePressure(cpu: 70)
            guard let pausedAt = try await firstEvent("throttle.changed", state: "paused", after: t0, timeout: 10) else {
                fatal("throttle bench: no paused event within 10 s of the pressure write; last lines:\n"
                    + daemon.lastLines(20).joined(separator: "\n"))
            }
            // Keep asking for a while: any dispatch after the pause would show here.
            try await Task.sleep(for: .seconds(2.5))
            streaming.stop()
            next = await submitter.value
            let lastSent = events.withLock { $0.filter { $0.name == "request.sent" && $0.time >= t0 }.map(\.time).max() }
            paused.append(pausedAt - t0)
            stopped.append(max(0, (lastSent ?? t0) - t0))
            progress(String(format: "throttle reaction run %d: paused event after %.3f s, last background dispatch %.3f s after the write",
                run, paused.last!, stopped.last!))
            try writePressure(cpu: 0)
            guard try await firstEvent("throttle.changed", state: "normal", after: pausedAt, timeout: 30) != nil else {
                fatal("throttle bench: the throttle did not come back to normal within 30 s")
            }
            try await drained(admin)
        }
        await monitor.close()
        await admin.close()
        return (paused, stopped)
    }
}

/// Whether the request stream goes on (set off by the measuring task).
private final class StreamFlag: Sendable {
    private let value = Mutex(true)
    var on: Bool { value.withLock { $0 } }
    func stop() { value.withLock { $0 = false } }
}

extension BenchRun {
    // MARK: - 5. Throttle reaction

    func throttleReaction() async throws {
        guard FileManager.default.isExecutableFile(atPath: ThrottleBench.extensionPath) else {
            progress("throttle: skipped, no test extension at \(ThrottleBench.extensionPath) (built by `swift build -c release`)")
            return
        }
        let bench = ThrottleBench(runs: max(3, options.runs))
        let (paused, stopped) = try await bench.run()
        rows.append(Row(scenario: "throttle reaction: pressure over the pause mark to the paused event (--load-interval 2 s)",
            figure: Figure(paused), unit: "s", higherIsBetter: false, target: "≤ 2 s", met: Figure(paused).max <= 2))
        rows.append(Row(scenario: "throttle reaction: pressure over the pause mark to the last background dispatch",
            figure: Figure(stopped), unit: "s", higherIsBetter: false, target: "≤ 2 s", met: Figure(stopped).max <= 2))
    }
}

/// Writes a fake `--proc-root`'s PSI files (cpu at `cpu`, io and memory quiet), each replaced by a
/// rename so the daemon's sampler never reads half a file.
func writeFakePressure(procRoot: String, cpu: Double) throws {
    try FileManager.default.createDirectory(atPath: procRoot + "/pressure", withIntermediateDirectories: true)
    for (name, v) in [("cpu", cpu), ("io", 0.0), ("memory", 0.0)] {
        let path = procRoot + "/pressure/" + name
        try Data("some avg10=\(v) avg60=0.00 avg300=0.00 total=1\n".utf8).write(to: URL(fileURLWithPath: path + ".new"))
        rename(path + ".new", path)
    }
}
