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
/// every write end is closed (the child's, and the daemon's through `closeWriteEnd`).
public final class LineReader: Sendable {
    /// Lines are split after this many bytes, so that one endless line cannot grow the daemon.
    public static let maximumLineLength = 4096

    /// The write end, close-on-exec: give it to `ProcessSpawner.spawn` as stdout or stderr.
    public let writeFD: Int32
    private let writeEndOpen = Mutex(true)
    private let end: EndOfInput

    init(name: String, readFD: Int32, writeFD: Int32, onLine: @escaping @Sendable (String) -> Void) {
        self.writeFD = writeFD
        let end = EndOfInput()
        self.end = end
        // The thread holds no reference to `self`, so that dropping the reader closes the write
        // end (in deinit) and lets the thread reach end of file.
        let thread = Thread {
            Self.readLines(from: readFD, onLine: onLine)
            close(readFD)
            end.finish()
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

    /// Returns once end of file was read and the last line handed over.
    public func waitUntilFinished() async {
        await end.wait()
    }

    private static func readLines(from fd: Int32, onLine: (String) -> Void) {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: maximumLineLength)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            pending.append(contentsOf: buffer[0..<count])
            deliverLines(&pending, onLine)
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

    func finish() {
        let waiters = state.withLock { state in
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
