#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// Tells the delegate when the database may have changed, from any process: inotify on the
/// database's folder, for writes to the file, its `-wal` and its `-journal`. An idle database
/// costs nothing (the thread sleeps in `poll` with no timeout).
///
/// A WAL commit becomes visible when the writer updates the WAL index in shared memory, which
/// inotify does not see, after its last `write` to the `-wal` and, with `synchronous=FULL`, an
/// fsync: a look at the moment of the event usually finds nothing yet. So an event is followed
/// by checks at growing delays (`settle`): every millisecond or two at first (an fsync takes a
/// few), then sparser, up to 5 s for a slow disk. Each check is one `PRAGMA data_version`; the
/// checks stop when the writes do. Without inotify (limit reached, or a network file system, where other hosts'
/// writes raise no event), the delegate checks every `fallbackInterval` instead, and the check
/// itself is one `PRAGMA data_version`.
final class ChangeMonitor: @unchecked Sendable {
    /// One element per "look again"; the consumer coalesces (newest only is kept).
    let signals: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation
    /// Whether inotify watches the database's folder (else only the fallback interval).
    let watchesFiles: Bool
    private let inotify: Int32
    private let wake: (read: Int32, write: Int32)
    private let names: Set<String>
    private let fallbackMilliseconds: Int32?
    /// Delays after an event at which to look again, in milliseconds from the event.
    static let settle: [Int32] = [1, 2, 4, 6, 8, 11, 15, 20, 30, 45, 70, 100, 150, 250, 400, 700, 1_000, 1_500, 2_500, 5_000]
    private let lock = NSLock()
    private var started = false
    private var stopped = false

    init(databasePath: String, fallbackInterval: Duration) {
        (signals, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let url = URL(fileURLWithPath: databasePath)
        let folder = url.deletingLastPathComponent().path
        let base = url.lastPathComponent
        names = [base, base + "-wal", base + "-journal"]
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            for fd in fds {
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            }
        }
        wake = (fds[0], fds[1])
        var watching = false
        var descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        if descriptor >= 0 {
            let mask = UInt32(IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM)
            if inotify_add_watch(descriptor, folder, mask) >= 0 {
                watching = true
            } else {
                DelegateLog.warning("cannot watch the database's folder; checking for changes on a timer",
                    ["folder": folder, "error": String(cString: strerror(errno))])
                close(descriptor)
                descriptor = -1
            }
        }
        inotify = descriptor
        let network = Self.isNetworkFileSystem(folder)
        watchesFiles = watching && !network
        let interval = fallbackInterval.components
        let milliseconds = Int32(clamping: interval.seconds * 1000 + interval.attoseconds / 1_000_000_000_000_000)
        fallbackMilliseconds = watchesFiles ? nil : max(milliseconds, 10)
        if network {
            DelegateLog.debug("network file system: other hosts' writes raise no inotify event; checking on a timer too",
                ["folder": folder])
        }
    }

    deinit {
        if inotify >= 0 { close(inotify) }
        close(wake.read)
        close(wake.write)
    }

    /// Starts the watching thread; the first signal is sent at once (look at the start).
    func start() {
        let go: Bool = lock.withLock {
            guard !started, !stopped else { return false }
            started = true
            return true
        }
        guard go else { return }
        continuation.yield()
        let thread = Thread { [self] in watch() }
        thread.name = "searchlight-sqlite-watch"
        thread.start()
    }

    /// Asks for a look now (the app's own request, e.g. `waitUntilIndexed`).
    func poke() { continuation.yield() }

    /// Ends the thread and the signal stream.
    func stop() {
        let wasStarted: Bool = lock.withLock {
            guard !stopped else { return false }
            stopped = true
            return started
        }
        if wasStarted {
            var byte: UInt8 = 1
            _ = write(wake.write, &byte, 1)
        } else {
            continuation.finish()
        }
    }

    private func watch() {
        var lastEvent: ContinuousClock.Instant?
        var step = 0
        let clock = ContinuousClock()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        defer { continuation.finish() }
        while true {
            var timeout: Int32 = fallbackMilliseconds ?? -1
            if let lastEvent, step < Self.settle.count {
                let elapsed = lastEvent.duration(to: clock.now).components
                let elapsedMs = Int32(clamping: elapsed.seconds * 1000 + elapsed.attoseconds / 1_000_000_000_000_000)
                let untilSettle = max(0, Self.settle[step] - elapsedMs)
                timeout = timeout < 0 ? untilSettle : min(timeout, untilSettle)
            }
            var fds = [pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: inotify, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&fds, inotify >= 0 ? 2 : 1, timeout)
            if ready < 0 {
                if errno == EINTR { continue }
                DelegateLog.warning("cannot wait for database changes; checking every second", ["error": String(cString: strerror(errno))])
                usleep(1_000_000)
                continuation.yield()
                continue
            }
            if fds[0].revents != 0 { return }
            if inotify >= 0, fds[1].revents != 0 {
                if relevantEvents(&buffer) {
                    lastEvent = clock.now
                    step = 0
                    continuation.yield()
                }
                continue
            }
            // A timeout: the next settle check, or the fallback interval.
            if lastEvent != nil, step < Self.settle.count { step += 1 }
            continuation.yield()
        }
    }

    /// Reads every queued event; whether one concerns the database's files (or the queue
    /// overflowed, which may have hidden one).
    private func relevantEvents(_ buffer: inout [UInt8]) -> Bool {
        var relevant = false
        while true {
            let n = buffer.withUnsafeMutableBytes { read(inotify, $0.baseAddress, $0.count) }
            if n <= 0 { return relevant }
            var offset = 0
            buffer.withUnsafeBytes { bytes in
                while offset + MemoryLayout<inotify_event>.size <= n {
                    let event = bytes.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
                    let nameStart = offset + MemoryLayout<inotify_event>.size
                    let nameLength = Int(event.len)
                    if event.mask & UInt32(IN_Q_OVERFLOW) != 0 {
                        relevant = true
                    } else if nameLength > 0, nameStart + nameLength <= n {
                        let raw = UnsafeRawBufferPointer(rebasing: bytes[nameStart..<(nameStart + nameLength)])
                        let name = String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                        if names.contains(name) { relevant = true }
                    }
                    offset = nameStart + nameLength
                }
            }
        }
    }

    /// Whether `folder` is on a file system where inotify misses other hosts' writes.
    static func isNetworkFileSystem(_ folder: String) -> Bool {
        guard let mounts = try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8) else { return false }
        let resolved = URL(fileURLWithPath: folder).resolvingSymlinksInPath().path
        var best: (length: Int, type: String)?
        for line in mounts.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count >= 3 else { continue }
            let point = String(fields[1]).replacingOccurrences(of: "\\040", with: " ")
            let inside = resolved == point || resolved.hasPrefix(point == "/" ? "/" : point + "/")
            if inside, point.count > (best?.length ?? -1) { best = (point.count, String(fields[2])) }
        }
        guard let type = best?.type else { return false }
        return ["nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "afs", "lustre"].contains(type)
            || (type.hasPrefix("fuse") && type != "fuseblk")
    }
}
