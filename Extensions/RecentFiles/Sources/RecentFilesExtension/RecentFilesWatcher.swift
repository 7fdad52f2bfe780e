#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// Waits for changes of one file with inotify, watching its folder (GLib replaces
/// recently-used.xbel by writing a new file and renaming it over the old one, which a watch on
/// the file itself would lose). Blocking: run it on a thread of its own.
final class RecentFilesWatcher: @unchecked Sendable {
    private let fd: Int32
    private let name: String

    init(path: String) throws {
        let folder = (path as NSString).deletingLastPathComponent
        name = (path as NSString).lastPathComponent
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        fd = inotify_init1(Int32(IN_CLOEXEC))
        guard fd >= 0 else { throw WatchError("inotify is not available: \(String(cString: strerror(errno)))") }
        let mask = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE)
        guard inotify_add_watch(fd, folder, mask) >= 0 else {
            close(fd)
            throw WatchError("cannot watch \(folder): \(String(cString: strerror(errno)))")
        }
    }

    deinit { close(fd) }

    /// Blocks until the file is written, replaced or removed.
    func next() throws {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw WatchError("reading inotify events failed: \(String(cString: strerror(errno)))")
            }
            var offset = 0
            while offset + MemoryLayout<inotify_event>.size <= n {
                let (length, eventName): (Int, String) = buffer.withUnsafeBytes { raw in
                    let len = Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                    let start = offset + MemoryLayout<inotify_event>.size
                    let bytes = raw[start..<min(start + len, n)].prefix { $0 != 0 }
                    return (len, String(decoding: bytes, as: UTF8.self))
                }
                offset += MemoryLayout<inotify_event>.size + length
                if eventName == name { return }
            }
        }
    }
}

struct WatchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
