#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// A pipe whose writes come out as lines, each handed to a closure on a thread of its own: how an
/// extension's stdout and stderr reach the daemon's log. Made by `ProcessSpawner.lineReader`.
///
/// A line longer than `maximumLineLength` bytes is delivered in pieces, invalid UTF-8 is replaced
/// with U+FFFD, and an unterminated last line is delivered at end of file. The reader ends when
/// every write end is closed (the child's, and the daemon's through `closeWriteEnd`), or when told
/// to `finish`: a process the extension started may keep a write end open for ever, so the daemon
/// never waits for that end of file once the extension itself has exited.
public final class LineReader: Sendable {
    /// Lines are split after this many bytes, so that one endless line cannot grow the daemon.
    public static let maximumLineLength = 4096
    /// `finish` reads at most this much more: a process still writing cannot keep the reader.
    static let maximumDrain = 1 << 20

    /// The write end, close-on-exec: give it to `ProcessSpawner.spawn` as stdout or stderr.
    public let writeFD: Int32
    private let writeEndOpen = Mutex(true)
    private let end: EndOfInput
    /// An eventfd the thread polls beside the pipe; `finish` writes to it. Closed by the thread.
    private let wakeFD: Int32

    init(name: String, readFD: Int32, writeFD: Int32, wakeFD: Int32, onLine: @escaping @Sendable (String) -> Void) {
        self.writeFD = writeFD
        self.wakeFD = wakeFD
        let end = EndOfInput()
        self.end = end
        // The thread holds no reference to `self`, so that dropping the reader closes the write
        // end (in deinit) and lets the thread reach end of file.
        let thread = Thread {
            Self.readLines(from: readFD, wake: wakeFD, onLine: onLine)
            close(readFD)
            // The eventfd is closed under the end's lock: `finish` never writes to a closed (or
            // reused) descriptor.
            end.finish { close(wakeFD) }
        }
        thread.name = name
        thread.start()
    }

    deinit { closeWriteEnd() }

    /// Closes the daemon's copy of the write end; call it once the child has its own. Idempotent.
    public func closeWriteEnd() {
        let wasOpen = writeEndOpen.withLock { open in
            defer { open = false }
            return open
        }
        if wasOpen { close(writeFD) }
    }

    /// Ends the reader without waiting for end of file: what is in the pipe now is read without
    /// blocking (up to `maximumDrain`) and handed over, then the read end is closed and the thread
    /// ends. Call it when the process whose output this is has exited. Idempotent.
    public func finish() {
        end.whileRunning {
            var one: UInt64 = 1
            _ = write(wakeFD, &one, 8)
        }
    }

    /// Returns once end of file was read (or `finish` drained the pipe) and the last line handed over.
    public func waitUntilFinished() async {
        await end.wait()
    }

    private static func readLines(from fd: Int32, wake: Int32, onLine: (String) -> Void) {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: maximumLineLength)
        var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
        var draining = false
        var drained = 0
        loop: while true {
            if !draining {
                fds[0].revents = 0
                fds[1].revents = 0
                let ready = poll(&fds, 2, -1)
                if ready < 0 && errno == EINTR { continue }
                if ready < 0 { break }
                if fds[1].revents != 0 {
                    // Told to finish: from now on only what can be read without waiting.
                    draining = true
                    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                } else if fds[0].revents == 0 {
                    continue
                }
            }
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break loop }  // end of file, or nothing more to drain
            pending.append(contentsOf: buffer[0..<count])
            deliverLines(&pending, onLine)
            if draining {
                drained += count
                if drained >= maximumDrain { break }
            }
        }
        if !pending.isEmpty { onLine(String(decoding: pending, as: UTF8.self)) }
    }

    /// Hands over every complete line in `pending`, and pieces of a line that is too long, keeping
    /// the unterminated rest.
    static func deliverLines(_ pending: inout [UInt8], _ onLine: (String) -> Void) {
        var start = 0
        while start < pending.count {
            let limit = start + maximumLineLength
            if let newline = pending[start...].prefix(maximumLineLength + 1).firstIndex(of: UInt8(ascii: "\n")) {
                onLine(String(decoding: pending[start..<newline], as: UTF8.self))
                start = newline + 1
            } else if pending.count > limit {
                let cut = characterBoundary(in: pending, before: limit, after: start)
                onLine(String(decoding: pending[start..<cut], as: UTF8.self))
                start = cut
            } else {
                break
            }
        }
        pending.removeFirst(start)
    }

    /// Moves a cut back off UTF-8 continuation bytes (at most three), so that a split line does
    /// not turn one character into two replacement characters.
    private static func characterBoundary(in bytes: [UInt8], before index: Int, after start: Int) -> Int {
        var cut = index
        while cut > start, index - cut < 3, bytes[cut] & 0xC0 == 0x80 { cut -= 1 }
        return bytes[cut] & 0xC0 == 0x80 || cut == start ? index : cut
    }
}

/// A one-way flag that async callers can wait for.
private final class EndOfInput: Sendable {
    private let state = Mutex<(ended: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    /// Runs `body` under the lock if the flag is not set yet.
    func whileRunning(_ body: () -> Void) {
        state.withLock { state in if !state.ended { body() } }
    }

    /// Sets the flag, running `body` under the lock first; wakes every waiter.
    func finish(_ body: () -> Void = {}) {
        let waiters = state.withLock { state in
            body()
            state.ended = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ended = state.withLock { state in
                if !state.ended { state.waiters.append(continuation) }
                return state.ended
            }
            if ended { continuation.resume() }
        }
    }
}
