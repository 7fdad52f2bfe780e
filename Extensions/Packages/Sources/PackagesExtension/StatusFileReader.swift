#if canImport(Glibc)
import Glibc
#endif

/// Reads a deb822 file (dpkg's `status`) paragraph by paragraph, in large chunks, without
/// splitting the file into lines or strings: a million-package file streams through one buffer.
///
/// Paragraphs are separated by empty lines, as dpkg writes them.
final class StatusFileReader {
    /// Bytes read per `read(2)`; the buffer grows past it only for a paragraph that is larger.
    static let chunkSize = 4 << 20

    let path: String
    private let fd: Int32
    private var buffer: UnsafeMutablePointer<UInt8>
    private var capacity: Int
    /// The bytes not handed out yet are `buffer[start..<end]`.
    private var start = 0
    private var end = 0
    private var atEOF = false

    init(path: String) throws(StatusFileError) {
        self.path = path
        fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw StatusFileError(description: "cannot open \(path): \(String(cString: strerror(errno))); pass the status file as the first argument")
        }
        capacity = Self.chunkSize * 2
        buffer = .allocate(capacity: capacity)
    }

    deinit {
        close(fd)
        buffer.deallocate()
    }

    /// The next paragraph's bytes, without the empty line that ends it; valid until the next call.
    /// Nil at the end of the file.
    func nextParagraph() throws(StatusFileError) -> UnsafeBufferPointer<UInt8>? {
        while true {
            while start < end, buffer[start] == UInt8(ascii: "\n") { start += 1 }  // extra empty lines
            if let stop = emptyLine(after: start) {
                defer { start = stop + 1 }
                return UnsafeBufferPointer(start: buffer + start, count: stop - start)
            }
            if atEOF {
                guard start < end else { return nil }
                defer { start = end }
                return UnsafeBufferPointer(start: buffer + start, count: end - start)
            }
            try refill()
        }
    }

    /// The offset of the first empty line's `\n` in `buffer[from..<end]`, line by line with
    /// `memchr` (vectorised in the C library, unlike a byte loop in a debug build).
    private func emptyLine(after from: Int) -> Int? {
        var position = from
        while position < end - 1, let newline = memchr(buffer + position, Int32(UInt8(ascii: "\n")), end - 1 - position) {
            let offset = UnsafeRawPointer(buffer).distance(to: UnsafeRawPointer(newline))
            if buffer[offset + 1] == UInt8(ascii: "\n") { return offset + 1 }
            position = offset + 1
        }
        return nil
    }

    /// Moves the unfinished paragraph to the front, grows the buffer if it is all paragraph, and reads on.
    private func refill() throws(StatusFileError) {
        if start > 0 {
            memmove(buffer, buffer + start, end - start)
            end -= start
            start = 0
        }
        if capacity - end < Self.chunkSize {
            let bigger = UnsafeMutablePointer<UInt8>.allocate(capacity: capacity * 2)
            bigger.update(from: buffer, count: end)
            buffer.deallocate()
            buffer = bigger
            capacity *= 2
        }
        while true {
            let n = read(fd, buffer + end, capacity - end)
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else {
                throw StatusFileError(description: "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            if n == 0 { atEOF = true }
            end += n
            return
        }
    }
}

/// Why the status file could not be read.
struct StatusFileError: Error, CustomStringConvertible {
    var description: String
}

extension StatusFileReader {
    /// How many paragraphs say `Status: … installed`: the total for progress reports, found by
    /// a quick pass that only looks at line starts.
    static func countInstalled(path: String) throws(StatusFileError) -> Int {
        let reader = try StatusFileReader(path: path)
        var count = 0
        while let paragraph = try reader.nextParagraph() {
            if ControlParagraph.isInstalled(statusLineIn: paragraph) { count += 1 }
        }
        return count
    }
}
