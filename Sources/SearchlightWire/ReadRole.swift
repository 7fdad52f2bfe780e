#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// Who may read a connection's socket when callers read their own answers
/// (`RPCConnection(callerReads:)`, the SDK's side): the connection's reader thread,
/// one calling thread, or nobody for a moment. Whoever holds the role reads the socket and the
/// connection's frame buffer; nobody else touches them, so frames are taken in the stream's order.
///
/// A call that finds the role free takes it and waits for its own answer on its own thread (no
/// wake-up of the reader thread, none of a pool thread to resume it). The reader thread gives the
/// role up when a caller asks (it waits in `poll` on the socket and on a wake-up pipe), and takes
/// it back once it has been free for `linger` (a notification arriving between calls waits that
/// long at most) or at once when it is needed: a caller gave up waiting, frames it must handle
/// are buffered, calls wait that no caller reads for, or the connection closes. Calls following
/// one another within `linger` therefore never wake the reader thread.
final class ReadRole: @unchecked Sendable {
    enum Holder: Equatable { case thread, caller, free, retired }

    /// Taken by a caller before the role (`RPCConnection.CallerReads.readers`): one per process
    /// in the SDK, so that one caller at a time reads, whatever the number of connections.
    let readers: CallerReaders

    /// How long the role stays free after a caller gave it back before the reader thread takes it.
    let linger: TimeInterval
    private let condition = MonotonicCondition()
    private var holder: Holder = .thread
    /// A caller waits for the reader thread to give the role up.
    private var wanted = false
    /// The reader thread must take the role as soon as it is free (not after `linger`).
    private var threadNeeded = false
    /// When a holder last gave the role up, on the monotonic clock (`DispatchTime`'s uptime in
    /// nanoseconds: a step of the wall clock neither stretches nor cuts the linger).
    private var releasedAt: UInt64 = 0
    /// The wake-up of the reader thread's `poll`, a socket pair (read end, write end).
    private var wakeRead: Int32 = -1
    private var wakeWrite: Int32 = -1

    init(linger: TimeInterval, readers: CallerReaders) {
        self.linger = linger
        self.readers = readers
        var fds: [Int32] = [-1, -1]
        // Without one (out of descriptors), the reader thread keeps the role: calls work as before.
        // A socket pair rather than a pipe: close-on-exec from the start (no `pipe2` here).
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
        if socketpair(AF_UNIX, type, 0, &fds) == 0 {
            wakeRead = fds[0]
            wakeWrite = fds[1]
        }
    }

    deinit { closePipe() }

    /// Times a caller gave the role back.
    private var releases = 0

    /// The holder now, and how many times a caller gave the role back (tests).
    var current: (holder: Holder, releases: Int) { condition.withLock { (holder, releases) } }

    // MARK: The reader thread's side

    /// Blocks until the reader thread holds the role (at once when it already does). False once
    /// the role is retired.
    func threadAcquire() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while true {
            switch holder {
            case .thread: return true
            case .retired: return false
            case .free:
                let free = Double(DispatchTime.now().uptimeNanoseconds - releasedAt) / 1e9
                if threadNeeded || wakeRead < 0 || free >= linger {
                    holder = .thread
                    threadNeeded = false
                    return true
                }
                condition.wait(seconds: linger - free)
            case .caller:
                // The caller signals when it gives the role back needing the thread; otherwise
                // the linger is counted from its release, checked at this pace.
                condition.wait(seconds: linger)
            }
        }
    }

    /// Holding the role, waits until `fd` is readable (true; the role is still held) or a caller
    /// asks for the role (false: it was given up). Without a wake-up pipe, returns true at once
    /// (the thread then blocks in `read`, and callers never get the role).
    func threadWaitReadable(_ fd: Int32) -> Bool {
        guard wakeRead >= 0 else { return true }
        while true {
            if condition.withLock({ wanted }), giveUp() { return false }
            var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
            let rc = poll(&fds, 2, -1)
            if rc < 0 {
                if errno == EINTR { continue }
                return true // the read reports the socket's error
            }
            if fds[1].revents != 0 { drainPipe() }
            if condition.withLock({ wanted }), giveUp() { return false }
            if fds[0].revents != 0 { return true }
        }
    }

    /// Gives the role up to the caller that asked (true), or keeps it (false) when that caller
    /// stopped waiting between the check and here: given up then, the role would stay free for
    /// the whole linger with nobody reading.
    private func giveUp() -> Bool {
        condition.withLock {
            guard wanted else { return false }
            wanted = false
            holder = .free
            releasedAt = DispatchTime.now().uptimeNanoseconds
            condition.broadcast()
            return true
        }
    }

    private func drainPipe() {
        var byte: UInt8 = 0
        while Glibc.read(wakeRead, &byte, 1) > 0 {}
    }

    /// The reader thread has ended: no one takes the role again; callers waiting for it give up.
    func retire() {
        condition.withLock {
            holder = .retired
            condition.broadcast()
            closePipe()
        }
    }

    private func closePipe() {
        if wakeRead >= 0 { Glibc.close(wakeRead) }
        if wakeWrite >= 0 { Glibc.close(wakeWrite) }
        wakeRead = -1
        wakeWrite = -1
    }

    // MARK: A caller's side

    /// Takes the role for a caller: at once when free, else by asking the reader thread to give
    /// it up and waiting at most `seconds` for that. False when another caller holds it, the
    /// thread did not give it up in time, or the role is retired.
    func callerAcquire(within seconds: TimeInterval) -> Bool {
        guard readers.take() else { return false }
        if acquire(within: seconds) { return true }
        readers.give()
        return false
    }

    private func acquire(within seconds: TimeInterval) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        switch holder {
        case .free:
            holder = .caller
            return true
        case .caller, .retired:
            return false
        case .thread:
            guard wakeWrite >= 0 else { return false }
            wanted = true
            var byte: UInt8 = 1
            _ = Glibc.write(wakeWrite, &byte, 1) // a full pipe already wakes the thread
            let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, seconds) * 1e9)
            while holder == .thread, wanted {
                let now = DispatchTime.now().uptimeNanoseconds
                guard now < deadline else { break }
                condition.wait(seconds: Double(deadline - now) / 1e9)
            }
            guard holder == .free else {
                // Not given up in time (or retired): the thread keeps reading, for this call too.
                wanted = false
                return false
            }
            holder = .caller
            return true
        }
    }

    /// A caller gives the role back; `threadNeeded`: the reader thread must take it now (frames
    /// or calls wait for it, or the caller met the stream's end), not after the linger.
    func callerRelease(threadNeeded needed: Bool) {
        condition.withLock {
            guard holder == .caller else { return }
            readers.give()
            holder = .free
            releases += 1
            releasedAt = DispatchTime.now().uptimeNanoseconds
            if needed || threadNeeded {
                threadNeeded = true
                condition.broadcast()
            }
        }
    }

    /// Something only the reader thread will do waits (a call no caller reads for, a close): it
    /// takes the role as soon as it is free.
    func needThread() {
        condition.withLock {
            guard holder == .free || holder == .caller else { return }
            threadNeeded = true
            condition.broadcast()
        }
    }
}

/// Callers allowed to read their own answers at once, across connections (one). A caller reading
/// holds a thread of Swift's cooperative pool (one per core) while the peer works, and several at
/// once starved it (`make test`'s in-process run: suites past their time limits); a call that
/// does not get the token waits as before, resumed by the reader thread.
public final class CallerReaders: Sendable {
    private let taken = Mutex(false)

    public init() {}

    /// The process's: every SDK connection shares it.
    public static let process = CallerReaders()

    func take() -> Bool {
        taken.withLock { taken in
            if taken { return false }
            taken = true
            return true
        }
    }

    func give() { taken.withLock { $0 = false } }
}

/// (In this file, not one of its own: the sample extensions' packages build this module
/// incrementally and have missed new files in it.) A lock and condition variable whose timed waits run on the monotonic clock
/// (`pthread_condattr_setclock(CLOCK_MONOTONIC)`): `NSCondition.wait(until:)` takes a wall-clock
/// `Date`, so a step of the wall clock during a wait stretched (or cut) it by the step.
final class MonotonicCondition: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }

    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }

    func broadcast() { pthread_cond_broadcast(cond) }

    /// Holding the lock, waits at most `seconds` (or until woken; spurious wake-ups happen, so
    /// callers re-check their condition); false when the time ran out.
    @discardableResult
    func wait(seconds: Double) -> Bool {
        var deadline = timespec()
        clock_gettime(CLOCK_MONOTONIC, &deadline)
        let whole = max(0, seconds).rounded(.down)
        var nanoseconds = deadline.tv_nsec + Int((max(0, seconds) - whole) * 1e9)
        var secondsPart = deadline.tv_sec + Int(min(whole, 1e9))
        if nanoseconds >= 1_000_000_000 {
            nanoseconds -= 1_000_000_000
            secondsPart += 1
        }
        deadline.tv_sec = secondsPart
        deadline.tv_nsec = nanoseconds
        return pthread_cond_timedwait(cond, mutex, &deadline) != ETIMEDOUT
    }
}
