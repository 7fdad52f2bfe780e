#if canImport(Glibc)
import Glibc
#endif
import CSystemd
import Foundation
import Synchronization

/// `org.freedesktop.Notifications` on a test's session bus: a fake notification server (GNOME
/// Shell's or Plasma's stand-in) that records every `Notify` call and answers it with a new id, so
/// a test can assert what the user was told. It owns the name before `init` returns; its own
/// thread serves the bus until `stop()` (`SessionBusHarness.stop()` calls it).
final class FakeNotificationServer: @unchecked Sendable {
    struct Notification: Sendable, Equatable, CustomStringConvertible {
        var appName: String
        var icon: String
        var summary: String
        var body: String
        var description: String { "[\(appName)] \(summary) | \(body)" }
    }

    private let recorded = Mutex<[Notification]>([])
    private let running = Atomic<Bool>(true)
    private let stopped = DispatchSemaphore(value: 0)
    private let bus: OpaquePointer
    private var stopping = false

    /// Connects to the bus at `address` (`unix:path=…`) and takes the name.
    init(address: String) throws {
        var b: OpaquePointer?
        guard sd_bus_new(&b) >= 0, let b else { throw HarnessError("sd_bus_new failed") }
        bus = b
        var r = sd_bus_set_address(b, address)
        if r >= 0 { r = sd_bus_set_bus_client(b, 1) }
        if r >= 0 { r = sd_bus_start(b) }
        if r >= 0 {
            r = sd_bus_add_object(b, nil, "/org/freedesktop/Notifications", { m, context, _ in
                guard let m, let context else { return 0 }
                return Unmanaged<FakeNotificationServer>.fromOpaque(context).takeUnretainedValue().handle(m)
            }, Unmanaged.passUnretained(self).toOpaque())
        }
        if r >= 0 { r = sd_bus_request_name(b, "org.freedesktop.Notifications", 0) }
        guard r >= 0 else {
            sd_bus_flush_close_unref(b)
            throw HarnessError("the fake notification server could not serve on \(address): \(String(cString: strerror(-r)))")
        }
        let thread = Thread { [self] in
            while running.load(ordering: .acquiring) {
                var r: Int32
                repeat { r = sd_bus_process(bus, nil) } while r > 0
                if r < 0 { break }
                _ = sd_bus_wait(bus, 50_000)  // wakes on a message, or to see `stop`
            }
            stopped.signal()
        }
        thread.start()
    }

    func stop() {
        guard !stopping else { return }
        stopping = true
        running.store(false, ordering: .releasing)
        stopped.wait()
        sd_bus_flush_close_unref(bus)
    }

    var notifications: [Notification] { recorded.withLock { $0 } }

    /// Waits until `count` notifications came (or throws after `timeout`, listing what came).
    func wait(count: Int = 1, timeout: TimeInterval = 15) throws -> [Notification] {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let now = notifications
            if now.count >= count { return now }
            if Date() >= deadline { throw HarnessError("\(now.count) notifications, not \(count), after \(timeout)s: \(now)") }
            usleep(20_000)
        }
    }

    /// A method call on the object (the bus's thread). 0: not ours (sd-bus answers UnknownMethod).
    private func handle(_ m: OpaquePointer) -> Int32 {
        let interface = "org.freedesktop.Notifications"
        if sd_bus_message_is_method_call(m, interface, "Notify") > 0 {
            // Notify(app_name s, replaces_id u, app_icon s, summary s, body s, actions as, hints a{sv}, expire_timeout i) -> u
            func string() -> String {
                var p: UnsafePointer<CChar>?
                return sd_bus_message_read_basic(m, CChar(UInt8(ascii: "s")), &p) > 0 ? p.map { String(cString: $0) } ?? "" : ""
            }
            let appName = string()
            var replaces: UInt32 = 0
            _ = sd_bus_message_read_basic(m, CChar(UInt8(ascii: "u")), &replaces)
            let icon = string(), summary = string(), body = string()
            guard sd_bus_message_skip(m, "asa{sv}i") >= 0 else { return -EINVAL }
            let id = recorded.withLock { list in
                list.append(Notification(appName: appName, icon: icon, summary: summary, body: body))
                return UInt32(list.count)
            }
            return reply(m) { var id = id; return sd_bus_message_append_basic($0, CChar(UInt8(ascii: "u")), &id) }
        }
        if sd_bus_message_is_method_call(m, interface, "GetCapabilities") > 0 {
            return reply(m) { reply in
                var r = sd_bus_message_open_container(reply, CChar(UInt8(ascii: "a")), "s")
                for capability in ["body", "body-markup"] where r >= 0 {
                    r = capability.withCString { sd_bus_message_append_basic(reply, CChar(UInt8(ascii: "s")), $0) }
                }
                return r >= 0 ? sd_bus_message_close_container(reply) : r
            }
        }
        return 0
    }

    private func reply(_ call: OpaquePointer, _ build: (OpaquePointer) -> Int32) -> Int32 {
        var reply: OpaquePointer?
        var r = sd_bus_message_new_method_return(call, &reply)
        guard r >= 0, let reply else { return r }
        defer { sd_bus_message_unref(reply) }
        r = build(reply)
        guard r >= 0 else { return r }
        r = sd_bus_send(bus, reply, nil)
        return r < 0 ? r : 1
    }
}
