#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// Reads a file, stdin (`-`) or a gzip file (through `gzip -dc`) line by line, without holding
/// the whole text in memory.
final class LineReader {
    let name: String
    private let fd: Int32
    private let decompressor: Process?
    /// The pipe from gzip, kept open for as long as this reader lives.
    private var readEnd: FileHandle?
    private var buffer: [UInt8] = []
    private var start = 0
    private var atEnd = false

    /// Opens `path`; `-` is stdin, and a name ending in `.gz` is decompressed.
    init(path: String) throws {
        name = path == "-" ? "stdin" : path
        if path == "-" {
            fd = STDIN_FILENO
            decompressor = nil
            return
        }
        let opened = open(path, O_RDONLY | O_CLOEXEC)
        guard opened >= 0 else { throw CLIFailure("cannot read \(path): \(String(cString: strerror(errno))); check the path") }
        guard path.hasSuffix(".gz") else {
            fd = opened
            decompressor = nil
            return
        }
        close(opened)
        let gzip = Process()
        gzip.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        gzip.arguments = ["gzip", "-dc", "--", path]
        let pipe = Pipe()
        gzip.standardOutput = pipe
        gzip.standardInput = FileHandle.nullDevice
        do {
            try gzip.run()
        } catch {
            throw CLIFailure("cannot run gzip to read \(path) (\(error)); install gzip or decompress the file first")
        }
        fd = pipe.fileHandleForReading.fileDescriptor
        decompressor = gzip
        readEnd = pipe.fileHandleForReading
    }

    deinit {
        if decompressor == nil, fd != STDIN_FILENO { close(fd) }
    }

    /// The next line without its `\n` (or `\r\n`), or nil at the end.
    func next() throws -> ArraySlice<UInt8>? {
        while true {
            if let nl = buffer[start...].firstIndex(of: 0x0A) {
                var end = nl
                if end > start, buffer[end - 1] == 0x0D { end -= 1 }
                defer { start = nl + 1 }
                return buffer[start..<end]
            }
            if atEnd {
                guard start < buffer.count else { return nil }
                defer { start = buffer.count }
                return buffer[start...]
            }
            try fill()
        }
    }

    private func fill() throws {
        if start > 0 {
            buffer.removeSubrange(0..<start)
            start = 0
        }
        let chunk = 1 << 16
        let old = buffer.count
        buffer.append(contentsOf: repeatElement(0, count: chunk))
        var n: Int
        repeat {
            n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + old, chunk) }
        } while n < 0 && errno == EINTR
        guard n >= 0 else { throw CLIFailure("cannot read \(name): \(String(cString: strerror(errno)))") }
        buffer.removeLast(chunk - n)
        if n == 0 {
            atEnd = true
            try checkDecompressor()
        }
    }

    private func checkDecompressor() throws {
        guard let decompressor else { return }
        decompressor.waitUntilExit()
        guard decompressor.terminationStatus == 0 else {
            throw CLIFailure("gzip -dc \(name) failed (exit status \(decompressor.terminationStatus)); is it a gzip file?")
        }
    }
}
