#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire
import Synchronization
import Testing
@testable import SearchlightSupervisor

@Suite("systemd notifier, watchdog health, socket activation checks")
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

    @Test("LISTEN_FDS meant for another pid, or absent, adopts nothing")
    func activationForeignPID() throws {
        let log = Logger(label: "test", level: .error)
        #expect(try SocketActivation.adopt(environment: [:], pid: 5, log: log) == nil)
        #expect(try SocketActivation.adopt(environment: ["LISTEN_FDS": "1", "LISTEN_PID": "4"], pid: 5, log: log) == nil)
    }
}
