#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire
import Synchronization
import Testing
import TestThreads
@testable import SearchlightSupervisor

@Suite("systemd notifier, watchdog health, socket activation checks", .onOwnThreads)
struct SystemdNotifierTests {
    @Test("The watchdog is ours at half WATCHDOG_USEC when WATCHDOG_PID is unset or our pid, off for another pid or without NOTIFY_SOCKET")
    func watchdogEnvironment() {
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "30000000"], pid: 42).watchdogInterval == 15)
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"], pid: 42).watchdogInterval == 15)
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7"], pid: 42).watchdogInterval == nil)
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "30000000"], pid: 42).watchdogInterval == nil)
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "bad"], pid: 42).watchdogInterval == nil)
        #expect(!SystemdNotifier(environment: [:]).send("READY=1"))
    }

    @Test("Healthy while the loop turns between checks; a wedged loop is named at the next check and pings resume once it turns")
    func watchdogHealth() {
        let turns = Mutex<UInt64>(0)
        let pokes = Mutex(0)
        let health = WatchdogHealth(probes: [
            .init(name: "scheduler", turns: { turns.withLock { $0 } }, poke: { pokes.withLock { $0 += 1 } }),
        ])
        #expect(health.check() == nil)  // the first check has nothing to compare with
        #expect(pokes.withLock { $0 } == 1)
        turns.withLock { $0 += 1 }  // the loop answered the poke
        #expect(health.check() == nil)
        // Wedged: no turn since the last poke.
        #expect(health.check() == "scheduler")
        #expect(health.check() == "scheduler")
        turns.withLock { $0 += 1 }
        #expect(health.check() == nil)
    }

    @Test("Socket activation accepts only a listening AF_UNIX stream socket, with a message naming the fix")
    func activationCheck() throws {
        let (a, b) = try UnixSocket.pair()
        defer { a.close(); b.close() }
        #expect(throws: SystemError.self) { try SocketActivation.check(a.fd) }
        let dgram = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(dgram) }
        #expect(throws: SystemError.self) { try SocketActivation.check(dgram) }
        var template = Array("/tmp/sl-act-XXXXXX".utf8CString)
        let dir = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let listener = try UnixSocket.listen(path: dir + "/s.sock")
        defer { listener.close() }
        try SocketActivation.check(listener.fd)
        #expect(SocketActivation.localPath(listener.fd) == dir + "/s.sock")
        do {
            try SocketActivation.check(a.fd)
        } catch {
            #expect("\(error)".contains("ListenStream="))
        }
    }

    @Test("The agent pings while its loop turns, withholds pings while the loop is wedged and resumes after; STATUS= only when changed; STOPPING=1 at stop")
    func agentWithholdsPingsWhileWedged() throws {
        var template = Array("/tmp/sl-agent-XXXXXX".utf8CString)
        let dir = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // systemd's side: a datagram socket the test binds.
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(fd) }
        var addr = try UnixSocket.makeAddress(dir + "/notify")
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0)
        /// The next notification, or nil when none came within `seconds`.
        func next(within seconds: Double) -> String? {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, Int32(seconds * 1000)) > 0 else { return nil }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = recv(fd, &buffer, buffer.count, 0)
            return n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : nil
        }
        /// Notifications until one contains `text`; fails after 30 s.
        func until(_ text: String) throws -> [String] {
            let deadline = Date().addingTimeInterval(30)
            var seen: [String] = []
            while Date() < deadline {
                guard let m = next(within: 1) else { continue }
                seen.append(m)
                if m.contains(text) { return seen }
            }
            throw SystemError("no \(text) within 30 s; got \(seen)", errno: ETIMEDOUT)
        }

        // The probed loop: a poke makes it turn, unless it is wedged.
        let state = Mutex<(turns: UInt64, wedged: Bool, pokes: Int)>((0, false, 0))
        let health = WatchdogHealth(probes: [.init(name: "scheduler", turns: { state.withLock { $0.turns } },
            poke: { state.withLock { if !$0.wedged { $0.turns += 1 }; $0.pokes += 1 } })])
        let line = Mutex("first")
        // WATCHDOG_USEC 100 ms: a check (and a ping) every 50 ms.
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": dir + "/notify", "WATCHDOG_USEC": "100000"])
        let agent = SystemdAgent(notifier: notifier, log: Logger(label: "test", level: .error), status: { line.withLock { $0 } },
                                 health: health, minimumStatusInterval: 0.05)
        #expect(agent.ready() == "first")
        #expect(try until("READY=1").last == "READY=1\nSTATUS=first\nMAINPID=\(getpid())")
        for _ in 0..<3 { _ = try until("WATCHDOG=1") }

        // Wedged: after the check that still sees the last poke's turn, no ping for as long as
        // five more checks take (counted by their pokes, not by the clock).
        // The pings already queued are from before the wedge: read them under the probe's lock,
        // so no check turns between the drain and the wedge. (Counted with the wedged ones, a
        // test thread descheduled for a few 50 ms intervals beside CPU hogs saw 3.) From here at
        // most two pings: the one a finished check is about to send, and the next check's, which
        // still sees the last poke's turn.
        let pokesAtWedge = state.withLock { s in
            while next(within: 0) != nil {}
            s.wedged = true
            return s.pokes
        }
        let deadline = Date().addingTimeInterval(30)
        var whileWedged: [String] = []
        while state.withLock({ $0.pokes }) < pokesAtWedge + 6, Date() < deadline {
            if let m = next(within: 0.1) { whileWedged.append(m) }
        }
        #expect(state.withLock { $0.pokes } >= pokesAtWedge + 6, "the agent stopped checking")
        while let m = next(within: 0) { whileWedged.append(m) }
        #expect(whileWedged.filter { $0 == "WATCHDOG=1" }.count <= 2, "pings while wedged: \(whileWedged)")

        // Turning again: pings resume.
        state.withLock { $0.wedged = false }
        _ = try until("WATCHDOG=1")

        // A changed line is sent once; an unchanged one is not sent again.
        line.withLock { $0 = "second" }
        agent.statusChanged()
        _ = try until("STATUS=second")
        agent.statusChanged()
        agent.stopping()
        let rest = try until("STOPPING=1")
        #expect(!rest.contains("STATUS=second"), "an unchanged status was sent again: \(rest)")
    }

    @Test("LISTEN_FDS meant for another pid, or absent, adopts nothing")
    func activationForeignPID() throws {
        let log = Logger(label: "test", level: .error)
        #expect(try SocketActivation.adopt(environment: [:], pid: 5, log: log) == nil)
        #expect(try SocketActivation.adopt(environment: ["LISTEN_FDS": "1", "LISTEN_PID": "4"], pid: 5, log: log) == nil)
    }
}
