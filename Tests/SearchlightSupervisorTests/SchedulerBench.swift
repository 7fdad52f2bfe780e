#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import SearchlightUnits
import SearchlightWire
@testable import SearchlightSupervisor

/// The request scheduler and its extension hosts in this process, as the daemon runs them, with
/// a manual clock and fake extensions: a real journal, real sessions and real indexes in a temp
/// directory, a fake `/proc` for the load. Every wait is for an event (a log line, a request
/// received, a state), bounded in real time so that a broken test fails instead of hanging.
final class SchedulerBench: Sendable {
    /// One extension unit as its unit file says (the defaults of DESIGN §5 unless set).
    struct Unit: Sendable {
        var label: String
        var bundle: String
        var throttleInterval: Double = 10
        var exitTimeOut: Double = 20
        var timeOut: Double = 60
        var acknowledgementTimeout: Double = 60
        var maximumIdentifiersPerRequest = 1000

        init(_ label: String, bundle: String) {
            self.label = label
            self.bundle = bundle
        }

        var plist: String {
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
                <key>Label</key><string>\(label)</string>
                <key>BundleIdentifier</key><string>\(bundle)</string>
                <key>Program</key><string>/bin/true</string>
                <key>ThrottleInterval</key><real>\(throttleInterval)</real>
                <key>ExitTimeOut</key><real>\(exitTimeOut)</real>
                <key>TimeOut</key><real>\(timeOut)</real>
                <key>IndexExtension</key><dict>
                    <key>AcknowledgementTimeout</key><real>\(acknowledgementTimeout)</real>
                    <key>MaximumIdentifiersPerRequest</key><integer>\(maximumIdentifiersPerRequest)</integer>
                </dict>
            </dict>
            </plist>
            """
        }
    }

    struct Timeout: Error, CustomStringConvertible {
        var description: String
    }

    let directory: String
    let clock = ManualClock()
    let launcher: FakeLauncher
    let proc: FakeProc
    let context: ServiceContext
    let scheduler: RequestScheduler
    private let logLines = Locked<[String]>([])
    private let eventLog = Locked<[(name: String, fields: [String: JSONValue])]>([])
    private let loop = Mutex<Task<Void, Never>?>(nil)

    init(_ units: [Unit], backoff: TimeInterval = 10, configure: (inout Configuration) -> Void = { _ in }) throws {
        var template = Array("/tmp/sl-sched-XXXXXX".utf8CString)
        directory = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        let unitsDirectory = directory + "/units"
        try FileManager.default.createDirectory(atPath: unitsDirectory, withIntermediateDirectories: true)
        for unit in units {
            try unit.plist.write(toFile: unitsDirectory + "/\(unit.label).plist", atomically: true, encoding: .utf8)
        }
        proc = try FakeProc()
        try proc.psi(cpu: 0, io: 0, memory: 0)
        var config = Configuration(system: false)
        config.stateDirectory = directory + "/state"
        config.socketPath = directory + "/d.sock"
        config.unitDirectories = [unitsDirectory]
        config.backoffBase = backoff
        config.procRoot = proc.path
        config.fullSync = false
        config.modelDirectory = directory + "/no-model"  // not this machine's model folder
        configure(&config)
        launcher = FakeLauncher(clock: clock)
        let lines = logLines, events = eventLog
        context = try ServiceContext(config: config, log: Logger(label: "test", level: .debug, sink: { line in lines.withLock { $0.append(line) } }))
        context.events.observe { name, fields in events.withLock { $0.append((name, fields)) } }
        scheduler = RequestScheduler(context: context, journal: context.journal, catalog: context.catalog, clock: clock, launcher: launcher)
        context.scheduler = scheduler
    }

    deinit {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Loads the units and starts the loop. `initialFill: false`: the indexes count as filled
    /// already, so that no initial reindex-all is queued.
    func start(initialFill: Bool = false, loop: Bool = true) throws {
        if !initialFill {
            for unit in context.catalog.reloadAndList() {
                for index in unit.indexExtension.indexNames {
                    try context.journal.recordVersion(bundle: unit.bundleIdentifier, index: index, version: unit.indexExtension.indexVersion)
                }
            }
        }
        scheduler.reloadUnits()
        if loop { startLoop() }
    }

    /// Starts the scheduler's loop (requests journaled before it are then dispatched).
    func startLoop() {
        let scheduler = self.scheduler
        self.loop.withLock { $0 = Task { await scheduler.run() } }
    }

    /// Moves the clock on and waits until the scheduler's loop has gone round at least once after.
    func step(by seconds: TimeInterval) async throws {
        let turns = scheduler.turns
        clock.advance(by: seconds)
        scheduler.wake()
        try await until("the loop to go round") { scheduler.turns > turns }
        // The turn's dispatching is one synchronous step of the actor: this read comes after it.
        _ = await scheduler.slotsNow
    }

    /// The graceful stop: extensions asked to exit (killed after `deadline` on the clock).
    func stop(deadline: TimeInterval = 5) async {
        await scheduler.beginShutdown(extensionDeadline: deadline)
        await loop.withLock { $0 }?.value
    }

    var logs: [String] { logLines.withLock { $0 } }
    func logs(_ message: String, _ fields: String...) -> [String] {
        logs.filter { line in line.contains(message) && fields.allSatisfy { line.contains($0) } }
    }
    var events: [(name: String, fields: [String: JSONValue])] { eventLog.withLock { $0 } }
    func events(_ name: String) -> [[String: JSONValue]] { events.filter { $0.name == name }.map(\.fields) }

    func host(_ label: String) throws -> ExtensionHost {
        guard let host = scheduler.host(label: label) else { throw Timeout(description: "no host \(label)") }
        return host
    }

    /// Waits (at most `timeout` seconds of real time) until `condition` holds.
    func until(_ what: String, timeout: TimeInterval = 90, _ condition: () async throws -> Bool) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while try await !condition() {
            guard Date() < deadline else { throw Timeout(description: "timed out waiting for \(what); log:\n" + logs.suffix(40).joined()) }
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// Waits for `count` log lines with `message` (and `fields`); returns them.
    @discardableResult
    func waitForLog(_ message: String, _ fields: String..., count: Int = 1) async throws -> [String] {
        try await until("\(count) × \(message) \(fields)") { logs.filter { l in l.contains(message) && fields.allSatisfy { l.contains($0) } }.count >= count }
        return logs.filter { l in l.contains(message) && fields.allSatisfy { l.contains($0) } }
    }

    /// Moves the clock to `date`, and a millisecond on: a time the journal stored (as seconds
    /// since 1970, a Double) comes back a few hundred nanoseconds off. Safe before the daemon
    /// has armed that deadline: it sleeps until absolute times, and a time past returns at once.
    func advance(to date: Date) {
        clock.advance(by: max(0, date.timeIntervalSince(clock.now) + 0.001))
    }

    /// Journals a request as `admin.reindex` does.
    @discardableResult
    func enqueue(_ bundle: String, all: Bool = true, identifiers: [String] = [], reason: String = "manual", background: Bool = false,
                 waiter: RequestScheduler.Waiter? = nil) throws -> RequestJournal.Enqueued {
        try scheduler.enqueue(bundle: bundle, index: "", kind: all ? .all : .identifiers, identifiers: identifiers,
            reason: reason, background: background, waiter: waiter)
    }

    /// A waiter that records the outcome of its request.
    final class Outcome: Sendable {
        private let result = Locked<Result<JSONValue, SearchlightError>?>(nil)
        var waiter: RequestScheduler.Waiter {
            RequestScheduler.Waiter(owner: nil, progress: { _, _, _ in }, done: { [result] r in result.withLock { $0 = r } })
        }
        var value: Result<JSONValue, SearchlightError>? { result.withLock { $0 } }
    }
}

/// A value behind a lock that closures can capture (a `Mutex` cannot be copied into them).
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<R>(_ body: (inout Value) -> R) -> R { mutex.withLock { body(&$0) } }
    var value: Value { mutex.withLock { $0 } }
}

extension UnitCatalog {
    /// Reads the directories and returns the enabled units (the bench records their index versions first).
    func reloadAndList() -> [ExtensionUnit] {
        _ = reload()
        return units.filter { !$0.disabled }
    }
}
