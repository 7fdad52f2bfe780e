#if canImport(Glibc)
import Glibc
#endif
import CDesktopBus
import CSystemd
import Foundation
import Synchronization

/// The provider's connection to the session bus, over sd-bus (libsystemd), the platform's D-Bus
/// library. sd-bus objects belong to one thread: `run()` is the loop of that thread, and method
/// calls are handled on it. A handler that answers later keeps its `BusCall` and gives the reply
/// to `post`, which wakes the loop (an eventfd beside the bus's descriptor) to send it there. So a
/// slow query never holds the bus: GNOME Shell and KRunner may send the next call meanwhile.
final class SessionBus: @unchecked Sendable {
    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ what: String, _ code: Int32) { description = "\(what): \(String(cString: strerror(-code)))" }
    }

    private let bus: OpaquePointer
    private let wakeFD: Int32
    private let jobs = Mutex<[@Sendable (SessionBus) -> Void]>([])
    // Touched by the loop's thread only.
    private var outstanding = 0
    private var lastActivity = ContinuousClock.now
    private var names: [String] = []
    /// Why the loop was asked to end (SIGTERM, SIGINT, SIGHUP), once it was.
    private var stopReason: String?

    /// Connects to the session bus of `$DBUS_SESSION_BUS_ADDRESS` (else `$XDG_RUNTIME_DIR/bus`).
    init() throws {
        var b: OpaquePointer?
        let r = sd_bus_open_user(&b)
        guard r >= 0, let b else { throw Failure("cannot connect to the session bus", r) }
        bus = b
        wakeFD = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        guard wakeFD >= 0 else { throw Failure("eventfd", -errno) }
    }

    /// Takes a well-known name; fails when another process owns it.
    func requestName(_ name: String) throws {
        let r = sd_bus_request_name(bus, name, 0)
        guard r >= 0 else { throw Failure("cannot own the bus name \(name) (is another searchlight-desktop running?)", r) }
        names.append(name)
    }

    /// Exports an object whose every method call goes to `handler` (on the loop's thread).
    func export(path: String, interface: Interface, handler: BusHandler) throws {
        let object = UnsafeMutablePointer<sl_bus_object>.allocate(capacity: 1)  // lives as long as the process
        object.initialize(to: sl_bus_object(handler: { m, context, error in
            guard let m, let context else { return -EINVAL }
            return Unmanaged<BusHandler>.fromOpaque(context).takeUnretainedValue().handle(BusCall(m, retained: false), error)
        }, context: Unmanaged.passRetained(handler).toOpaque()))
        let r = switch interface {
        case .searchProvider: sl_bus_add_search_provider(bus, path, object)
        case .krunner: sl_bus_add_krunner(bus, path, object)
        }
        guard r >= 0 else { throw Failure("cannot export \(path)", r) }
    }

    enum Interface { case searchProvider, krunner }

    /// Keeps a call to answer later (from any thread, through `post`).
    func keep(_ call: BusCall) -> BusCall {
        outstanding += 1
        lastActivity = .now
        return BusCall(sd_bus_message_ref(call.message), retained: true)
    }

    /// Asks the loop to end as an idle exit does (names released, what is in flight finished),
    /// from any thread: SIGTERM, SIGINT and SIGHUP.
    func stop(reason: String) {
        post { bus in bus.stopReason = bus.stopReason ?? reason }
    }

    /// Runs `job` on the loop's thread, soon.
    func post(_ job: @escaping @Sendable (SessionBus) -> Void) {
        jobs.withLock { $0.append(job) }
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Answers a deferred call (loop's thread). `build` appends the reply's arguments; a failure
    /// to build it answers with an error instead.
    func reply(_ call: BusCall, _ build: (inout BusWriter) -> Void) {
        defer { finish(call) }
        var reply: OpaquePointer?
        guard sd_bus_message_new_method_return(call.message, &reply) >= 0, let reply else { return }
        defer { sd_bus_message_unref(reply) }
        var writer = BusWriter(reply)
        build(&writer)
        if writer.failure != 0 {
            replyError(call.message, name: "org.freedesktop.DBus.Error.Failed", "cannot encode the answer: \(String(cString: strerror(-writer.failure)))")
            return
        }
        _ = sd_bus_send(bus, reply, nil)
    }

    /// Answers a deferred call with a D-Bus error (loop's thread).
    func replyError(_ call: BusCall, name: String, _ message: String) {
        defer { finish(call) }
        replyError(call.message, name: name, message)
    }

    private func replyError(_ message: OpaquePointer, name: String, _ text: String) {
        var error = sd_bus_error(name: nil, message: nil, _need_free: 0)
        _ = sd_bus_error_set(&error, name, text)
        _ = sd_bus_reply_method_error(message, &error)
        sd_bus_error_free(&error)
    }

    private func finish(_ call: BusCall) {
        if call.retained {
            sd_bus_message_unref(call.message)
            outstanding -= 1
        }
        lastActivity = .now
    }

    /// Calls a method of another service without waiting for its answer (loop's thread); an error
    /// answer, or none within 5 s, is logged with `what`. The name is activated if need be.
    func callAsync(destination: String, path: String, interface: String, member: String, what: String,
                   _ build: (inout BusWriter) -> Void) {
        var call: OpaquePointer?
        guard sd_bus_message_new_method_call(bus, &call, destination, path, interface, member) >= 0, let call else { return }
        defer { sd_bus_message_unref(call) }
        var writer = BusWriter(call)
        build(&writer)
        guard writer.failure == 0 else {
            Log.warning("call not sent", ["what": what, "error": String(cString: strerror(-writer.failure))])
            return
        }
        // The context is the `what`, kept until the answer (a floating slot: the bus owns it).
        let context = Unmanaged.passRetained(what as NSString).toOpaque()
        let r = sd_bus_call_async(bus, nil, call, { reply, context, _ in
            let what = context.map { Unmanaged<NSString>.fromOpaque($0).takeRetainedValue() as String } ?? "call"
            if let reply, let error = sd_bus_message_get_error(reply), sd_bus_error_is_set(error) != 0 {
                Log.warning("call failed", ["what": what, "error": error.pointee.name.map { String(cString: $0) } ?? "",
                                            "message": error.pointee.message.map { String(cString: $0) } ?? ""])
            }
            return 0
        }, context, 5_000_000)
        if r < 0 {
            Unmanaged<NSString>.fromOpaque(context).release()
            Log.warning("call not sent", ["what": what, "error": String(cString: strerror(-r))])
        }
        lastActivity = .now
    }

    /// Marks activity for the idle exit (a call answered at once).
    func noteActivity() { lastActivity = .now }

    /// The loop: handles calls and posted jobs until the bus disconnects, or, with `idleExit`,
    /// until nothing came and nothing was outstanding for that long; then the names are released
    /// (D-Bus activation starts a new copy for the next call) and what is in flight is finished.
    func run(idleExit: Duration?) {
        while true {
            guard pump() else { return }
            let idle = idleExit.map { outstanding == 0 && ContinuousClock.now - lastActivity >= $0 } ?? false
            if idle || stopReason != nil {
                if let stopReason {
                    Log.info("stopping", ["by": stopReason, "outstanding": outstanding])
                } else if let idleExit {
                    Log.info("idle; exiting", ["idle_s": Int(idleExit.components.seconds)])
                }
                for name in names { _ = sd_bus_release_name(bus, name) }
                let deadline = ContinuousClock.now + .seconds(3)
                while ContinuousClock.now < deadline, pump(), outstanding > 0 || jobs.withLock({ !$0.isEmpty }) {
                    wait(until: min(deadline, ContinuousClock.now + .milliseconds(100)))
                }
                _ = sd_bus_flush(bus)
                return
            }
            var until: ContinuousClock.Instant? = idleExit.map { lastActivity + $0 }
            var timeout: UInt64 = 0
            if sd_bus_get_timeout(bus, &timeout) >= 0, timeout != UInt64.max {
                // An absolute CLOCK_MONOTONIC time in µs (0: now).
                var now = timespec()
                clock_gettime(CLOCK_MONOTONIC, &now)
                let nowUS = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
                let busDeadline = ContinuousClock.now + .microseconds(timeout > nowUS ? Int64(timeout - nowUS) : 0)
                until = until.map { min($0, busDeadline) } ?? busDeadline
            }
            wait(until: until)
        }
    }

    /// Processes what sd-bus has and runs the posted jobs; false once the bus is gone.
    private func pump() -> Bool {
        while true {
            let r = sd_bus_process(bus, nil)
            if r < 0 {
                Log.notice("session bus connection lost; exiting", ["error": String(cString: strerror(-r))])
                return false
            }
            if r == 0 { break }
        }
        let pending = jobs.withLock { jobs in
            defer { jobs.removeAll() }
            return jobs
        }
        for job in pending { job(self) }
        return true
    }

    private func wait(until deadline: ContinuousClock.Instant?) {
        var fds = [pollfd(fd: sd_bus_get_fd(bus), events: Int16(sd_bus_get_events(bus)), revents: 0),
                   pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
        var ms: Int32 = -1
        if let deadline {
            let left = deadline - ContinuousClock.now
            ms = left <= .zero ? 0 : Int32(min(Double(left.components.seconds) * 1000 + Double(left.components.attoseconds) / 1e15 + 1, 60_000))
        }
        _ = poll(&fds, 2, ms)
        if fds[1].revents != 0 {
            var value: UInt64 = 0
            _ = read(wakeFD, &value, 8)
        }
    }
}

/// A method call received on the bus; `retained` once kept to answer later.
struct BusCall: @unchecked Sendable {
    let message: OpaquePointer
    let retained: Bool

    init(_ message: OpaquePointer, retained: Bool) {
        self.message = message
        self.retained = retained
    }

    var member: String { sd_bus_message_get_member(message).map { String(cString: $0) } ?? "" }

    /// Reads an `as` argument.
    func readStrings() throws(BusReadError) -> [String] {
        var list: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let r = sd_bus_message_read_strv(message, &list)
        guard r >= 0 else { throw BusReadError(code: r) }
        // An empty array is no list at all (found by ActivateResult with no terms, which hung:
        // a handler that returns 0 without replying leaves the caller waiting).
        guard let list else { return [] }
        defer { free(list) }
        var out: [String] = []
        var i = 0
        while let s = list[i] {
            out.append(String(cString: s))
            free(s)
            i += 1
        }
        return out
    }

    /// Reads an `s` argument.
    func readString() throws(BusReadError) -> String {
        var p: UnsafePointer<CChar>?
        let r = sd_bus_message_read_basic(message, CChar(UInt8(ascii: "s")), &p)
        guard r > 0, let p else { throw BusReadError(code: r < 0 ? r : -EINVAL) }
        return String(cString: p)
    }

    /// Reads a `u` argument.
    func readUInt32() throws(BusReadError) -> UInt32 {
        var v: UInt32 = 0
        let r = sd_bus_message_read_basic(message, CChar(UInt8(ascii: "u")), &v)
        guard r > 0 else { throw BusReadError(code: r < 0 ? r : -EINVAL) }
        return v
    }
}

/// A malformed argument; `code` is a negative errno, never 0 (which would leave the call unanswered).
struct BusReadError: Error {
    var code: Int32
    init(code: Int32) { self.code = code < 0 ? code : -EINVAL }
}

/// Receives the method calls of one exported object, on the loop's thread. Returns what sd-bus
/// expects of a method handler: >= 0 when the call was answered or kept for later, a negative
/// errno to answer with an error.
class BusHandler: @unchecked Sendable {
    func handle(_ call: BusCall, _ error: UnsafeMutablePointer<sd_bus_error>?) -> Int32 { -ENOSYS }
}

/// Appends arguments to a message; the first failure is kept in `failure` (a negative errno) and
/// everything after it is skipped.
struct BusWriter {
    let message: OpaquePointer
    private(set) var failure: Int32 = 0

    init(_ message: OpaquePointer) { self.message = message }

    private mutating func check(_ r: Int32) { if r < 0, failure == 0 { failure = r } }

    mutating func string(_ s: String) {
        guard failure == 0 else { return }
        // D-Bus strings are UTF-8 without NUL: a NUL from the data cuts the string there.
        check(s.withCString { sd_bus_message_append_basic(message, CChar(UInt8(ascii: "s")), $0) })
    }

    mutating func int32(_ v: Int32) {
        guard failure == 0 else { return }
        var v = v
        check(sd_bus_message_append_basic(message, CChar(UInt8(ascii: "i")), &v))
    }

    mutating func uint32(_ v: UInt32) {
        guard failure == 0 else { return }
        var v = v
        check(sd_bus_message_append_basic(message, CChar(UInt8(ascii: "u")), &v))
    }

    mutating func double(_ v: Double) {
        guard failure == 0 else { return }
        var v = v
        check(sd_bus_message_append_basic(message, CChar(UInt8(ascii: "d")), &v))
    }

    mutating func bool(_ v: Bool) {
        guard failure == 0 else { return }
        var v: Int32 = v ? 1 : 0
        check(sd_bus_message_append_basic(message, CChar(UInt8(ascii: "b")), &v))
    }

    /// `as`.
    mutating func strings(_ list: [String]) {
        container("a", "s") { w in for s in list { w.string(s) } }
    }

    /// `ay`.
    mutating func bytes(_ data: [UInt8]) {
        guard failure == 0 else { return }
        check(data.withUnsafeBytes { sd_bus_message_append_array(message, CChar(UInt8(ascii: "y")), $0.baseAddress, $0.count) })
    }

    /// A container: `a` (array of `contents`), `r` (struct), `e` (dict entry), `v` (variant of `contents`).
    mutating func container(_ type: Character, _ contents: String, _ body: (inout BusWriter) -> Void) {
        guard failure == 0 else { return }
        check(sd_bus_message_open_container(message, CChar(type.asciiValue!), contents))
        guard failure == 0 else { return }
        body(&self)
        guard failure == 0 else { return }
        check(sd_bus_message_close_container(message))
    }

    /// One `{sv}` entry of an `a{sv}` dictionary.
    mutating func entry(_ key: String, _ signature: String, _ value: (inout BusWriter) -> Void) {
        container("e", "sv") { w in
            w.string(key)
            w.container("v", signature, value)
        }
    }
}
