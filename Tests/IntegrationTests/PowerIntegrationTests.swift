#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import SearchlightWire
import Testing
import TestThreads

/// Power-aware background work against the real daemon, with a fake `--power-supply-root` the
/// test rewrites (as the load tests rewrite a fake /proc): on battery at a low charge the
/// daemon's own background work waits; work asked for by hand does not; on AC it resumes.
@Suite("Power-aware background work", .onOwnThreads)
struct PowerIntegrationTests {
    /// A laptop's tree: `AC` (Mains) and `BAT0`, each attribute replaced by a rename.
    static func writePower(_ root: String, online: Bool, capacity: Int) throws {
        for (name, attributes) in [("AC", ["type": "Mains", "online": online ? "1" : "0"]),
                                   ("BAT0", ["type": "Battery", "status": online ? "Charging" : "Discharging", "capacity": String(capacity)])] {
            try FileManager.default.createDirectory(atPath: root + "/" + name, withIntermediateDirectories: true)
            for (key, value) in attributes {
                try (value + "\n").write(toFile: root + "/\(name)/\(key)", atomically: true, encoding: .utf8)
            }
        }
    }

    @Test("on battery below the threshold the initial reindex and idle maintenance wait, status says why, manual work runs; on AC both resume")
    func defersOnBatteryResumesOnAC() async throws {
        let proc = TempDir("slproc")
        try ThrottleIntegrationTests.writePSI(proc.path, cpu: 0)
        let power = TempDir("slpower")
        try Self.writePower(power.path, online: false, capacity: 20)
        let unit = TestUnit("org.example.test.power", bundle: "org.example.power")
        let bench = try await ExtensionBench.start([unit], arguments: ["--proc-root", proc.path, "--power-supply-root", power.path,
            "--battery-threshold", "50", "--load-interval", "0.1", "--resume-after", "0.3", "--idle-after", "0.3",
            "--maintenance-interval", "1"])
        let control = bench.control(unit.label)
        let deferred = try await bench.waitForLog("power gate changed", "to=deferred")[0]
        #expect(deferred.contains("on battery at 20 % (below 50 %)"), "\(deferred)")
        // An app's donation goes in; maintenance falls due one interval after the start.
        let index = bench.daemon.index("org.example.power.app")
        try await index.indexSearchableItems([item("a", title: "donated on battery")])
        let due = try #require(try await bench.admin("admin.status")["maintenance"]?["nextDue"]?.stringValue.flatMap(ISO8601.parse))
        try await bench.until("maintenance due") { Date() > due }
        try await threeMoreReads(bench)
        #expect(bench.lines("maintenance started").isEmpty, "no idle maintenance on battery at 20 %")
        #expect(bench.lines("reindex request sent").isEmpty, "the initial reindex waits")
        #expect(control.received.isEmpty)
        #expect(bench.lines("load throttle changed").isEmpty, "the load is not sampled for work that cannot start")

        let status = try await bench.admin("admin.status")
        #expect(status["power"]?["state"]?.stringValue == "deferred")
        #expect(status["power"]?["onBattery"]?.boolValue == true)
        #expect(status["power"]?["percent"]?.doubleValue == 20)
        #expect(status["power"]?["threshold"]?.doubleValue == 50)
        #expect(status["power"]?["lastRead"]?.stringValue != nil)
        let shown = try await bench.cli(["status"])
        #expect(shown.stdout.contains("power on battery at 20 % (below 50 %): background work deferred"), "\(shown.stdout)")

        // By hand: a manual reindex (it joins the initial request and runs it now) and `simulate idle`.
        let manual = try await bench.cli(["reindex", unit.bundle, "--identifiers", "manual-1"])
        #expect(manual.status == 0, "\(manual.stderr)")
        let note = bench.lines("manual reindex request")
        #expect(note.count == 1 && note[0].contains("held back as background work (on battery at 20 % (below 50 %))"), "\(note)")
        try await bench.waitForAcknowledgement(unit.label)
        #expect(!control.received.isEmpty)
        let simulated = try await bench.cli(["simulate", "idle", "org.example.power.app"])
        #expect(simulated.status == 0, "\(simulated.stderr)")
        #expect(bench.lines("maintenance finished", "trigger=simulate").count == 1)

        // A background request queued now waits too.
        let queued = try await bench.cli(["reindex", unit.bundle, "--identifiers", "bg-1", "--background", "--no-wait"])
        #expect(queued.status == 0, "\(queued.stderr)")
        try await threeMoreReads(bench)
        #expect(!control.received.contains { $0.identifiers.contains("bg-1") })
        #expect(bench.lines("maintenance started", "trigger=idle").isEmpty)

        let plugged = bench.mark
        try Self.writePower(power.path, online: true, capacity: 20)
        try await bench.waitForLog("power gate changed", "from=deferred", "to=allowed", "on AC power", after: plugged)
        try await bench.waitForLog("maintenance finished", "trigger=idle", after: plugged)
        try await bench.until("the background request reached the extension") { control.received.contains { $0.identifiers == ["bg-1"] } }
        let after = try await bench.admin("admin.status")
        #expect(after["power"]?["state"]?.stringValue == "allowed")
        #expect(after["power"]?["reason"]?.stringValue == "on AC power")
        let line = try await bench.cli(["status"])
        #expect(line.stdout.contains("power on AC power\n"), "\(line.stdout)")
    }

    @Test("the refinement share pauses on battery before its first batch, says why in status, and refines everything once on AC")
    func refinementShareWaitsForAC() async throws {
        guard let model = SemanticSearchTests.transformerModel else { return }
        let dir = TempDir()
        let power = dir.path + "/power"
        try Self.writePower(power, online: false, capacity: 30)
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model, "--power-supply-root", power, "--load-interval", "0.1",
            "--refine-share-items", "10000", "--refine-share-after", "0.5"], dir: dir)
        let count = 40
        try await SemanticSearchTests.importItems(RefinementIntegrationTests.items(count: count), bundle: "com.example.power.refine",
                                                  daemon: daemon, dir: dir) { try await runCLI($0, socket: daemon.socket) }
        try await RefinementIntegrationTests.until("the share paused for the battery", timeout: 60) {
            let share = try await RefinementIntegrationTests.status(daemon)["refinementShare"]
            return share?["state"]?.stringValue == "paused" && share?["reason"]?.stringValue == "on battery at 30 % (below 50 %)"
        }
        let reads = try await RefinementIntegrationTests.status(daemon)["power"]?["reads"]?.intValue ?? 0
        try await RefinementIntegrationTests.until("three more power reads", timeout: 60) {
            (try await RefinementIntegrationTests.status(daemon)["power"]?["reads"]?.intValue ?? 0) >= reads + 3
        }
        #expect(try await RefinementIntegrationTests.refined(daemon) == (count, 0))
        #expect(!daemon.log.contains { $0.contains("vectors refined by the share") })

        try Self.writePower(power, online: true, capacity: 30)
        try await RefinementIntegrationTests.until("every vector refined on AC", timeout: 300) {
            try await RefinementIntegrationTests.refined(daemon).refined == count
        }
        #expect(try await RefinementIntegrationTests.status(daemon)["refinementShare"]?["state"]?.stringValue != "paused")
    }

    @Test("idle maintenance refining vectors on AC gives way at its next batch when the machine goes on battery, and finishes on AC")
    func maintenanceYieldsWhenUnplugged() async throws {
        guard let model = SemanticSearchTests.transformerModel else { return }
        let dir = TempDir()
        let power = dir.path + "/power"
        try Self.writePower(power, online: true, capacity: 20)
        let proc = dir.path + "/proc"
        try ThrottleIntegrationTests.writePSI(proc, cpu: 0)
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model, "--power-supply-root", power, "--proc-root", proc,
            "--load-interval", "0.1", "--idle-after", "0.3", "--maintenance-interval", "1"], dir: dir)
        let count = 400
        try await SemanticSearchTests.importItems(RefinementIntegrationTests.items(count: count), bundle: "com.example.power.maint",
                                                  daemon: daemon, dir: dir) { try await runCLI($0, socket: daemon.socket) }
        try await RefinementIntegrationTests.until("idle maintenance refining", timeout: 300) {
            try await RefinementIntegrationTests.refined(daemon).refined > 0
        }
        try Self.writePower(power, online: false, capacity: 20)
        try await RefinementIntegrationTests.until("maintenance gave way", timeout: 60) {
            daemon.log.contains { $0.contains("maintenance yielded to load") }
        }
        let atYield = try await RefinementIntegrationTests.refined(daemon).refined
        // Runs before the items came in may have started already (one interval after the start).
        let startsAtYield = daemon.log.filter { $0.contains("maintenance started") && $0.contains("trigger=idle") }.count
        #expect(atYield < count, "unplugged before the end")
        let reads = try await RefinementIntegrationTests.status(daemon)["power"]?["reads"]?.intValue ?? 0
        try await RefinementIntegrationTests.until("three more power reads", timeout: 60) {
            (try await RefinementIntegrationTests.status(daemon)["power"]?["reads"]?.intValue ?? 0) >= reads + 3
        }
        #expect(try await RefinementIntegrationTests.refined(daemon).refined == atYield, "nothing refined on battery")
        #expect(daemon.log.filter { $0.contains("maintenance started") && $0.contains("trigger=idle") }.count == startsAtYield,
                "no idle run starts on battery")

        try Self.writePower(power, online: true, capacity: 20)
        try await RefinementIntegrationTests.until("every vector refined on AC", timeout: 300) {
            try await RefinementIntegrationTests.refined(daemon).refined == count
        }
    }

    @Test("a bad --battery-threshold is refused at start with the fix; --help lists both power flags")
    func badThreshold() async throws {
        for bad in ["101", "-1", "abc", "nan", "50%", ""] {
            let r = try await runCLI(["--battery-threshold", bad], socket: nil, executable: "searchlightd")
            #expect(r.status == 2, "\(bad.debugDescription): \(r.stderr)")
            #expect(r.stderr.contains("--battery-threshold must be a percentage from 0 to 100, or off, got \"\(bad)\""), "\(r.stderr)")
        }
        let help = try await runCLI(["--help"], socket: nil, executable: "searchlightd")
        #expect(help.stdout.contains("--battery-threshold PERCENT|off (50)") && help.stdout.contains("--power-supply-root DIR"))
    }

    /// The power is re-read every 5 load intervals while background work waits: three more
    /// reads prove the scheduler's loop went round at least twice with that work waiting.
    func threeMoreReads(_ bench: ExtensionBench) async throws {
        let reads = try #require(try await bench.admin("admin.status")["power"]?["reads"]?.intValue)
        try await bench.until("three more power reads") {
            (try await bench.admin("admin.status")["power"]?["reads"]?.intValue ?? 0) >= reads + 3
        }
    }

    @Test("on battery above the threshold, or with the rule off, the initial reindex is sent at once")
    func runsAboveThresholdOrWhenOff() async throws {
        let power = TempDir("slpower")
        try Self.writePower(power.path, online: false, capacity: 80)
        let unit = TestUnit("org.example.test.power80", bundle: "org.example.power80")
        let bench = try await ExtensionBench.start([unit], arguments: ["--power-supply-root", power.path, "--load-interval", "0.1"])
        try await bench.waitForAcknowledgement(unit.label)
        let status = try await bench.admin("admin.status")
        #expect(status["power"]?["reason"]?.stringValue == "on battery at 80 % (above 50 %)")

        let low = TempDir("slpower")
        try Self.writePower(low.path, online: false, capacity: 5)
        let off = TestUnit("org.example.test.poweroff", bundle: "org.example.poweroff")
        let second = try await ExtensionBench.start([off], arguments: ["--power-supply-root", low.path, "--battery-threshold", "off"])
        try await second.waitForAcknowledgement(off.label)
        let gate = try await second.admin("admin.status")["power"]
        #expect(gate?["reason"]?.stringValue == "battery rule off")
        #expect(gate?["reads"]?.intValue == 0, "the rule off reads nothing")
    }
}
