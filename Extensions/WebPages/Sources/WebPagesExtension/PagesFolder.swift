#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit

/// The folder of pages: which files are pages, and where an identifier points.
///
/// Identifiers come back from the supervisor and, through it, from anyone who can write to the
/// index, so one is trusted only when it names a page file inside the folder. Symbolic links are
/// followed only to a file inside the folder; a link that leads out is refused, with a reason.
struct PagesFolder: Sendable {
    static let extensions: Set<String> = ["html", "htm", "xhtml"]

    let root: URL
    /// The folder's real path (symbolic links resolved), what every page must lie under.
    let realRoot: String?

    init(path: String) {
        root = URL(fileURLWithPath: path).standardizedFileURL
        realRoot = Self.realPath(root.path)
    }

    /// Every page's identifier (its path relative to the folder), sorted. Hidden files and folders
    /// are skipped, and folders reached through symbolic links are not entered.
    func identifiers() throws -> [String] {
        guard realRoot != nil, isDirectory(root.path) else {
            throw PageError("the pages folder \(root.path) does not exist; pass the folder as the first argument")
        }
        var found: [String] = []
        walk(directory: root.path, relative: "", depth: 0, into: &found)
        return found.sorted()
    }

    /// The identifier of a reindex request as a path relative to the folder: a relative path as
    /// it is, a `file://` URL or absolute path of a page inside the folder made relative.
    func relativeIdentifier(_ identifier: String) -> String {
        var path = identifier
        if let url = URL(string: identifier), url.isFileURL { path = url.path }
        let prefix = root.path + "/"
        return path.hasPrefix(prefix) ? String(path.dropFirst(prefix.count)) : path
    }

    /// Opens the page an identifier names for reading, or throws why it is refused: not a page of
    /// this folder (`..`, hidden, absolute), a symbolic link out of it, not a regular file, or
    /// unreadable for this user. The descriptor's own path is checked after the open, so a path
    /// swapped for a link between the check and the open is caught.
    func open(_ identifier: String) throws -> (fd: Int32, size: Int, modified: Date, url: URL) {
        let components = identifier.split(separator: "/", omittingEmptySubsequences: false)
        guard !identifier.isEmpty, !identifier.hasPrefix("/"), !identifier.contains("\0"), identifier.utf8.count <= Limits().maxIdentifierBytes,  // the index's limit
              components.allSatisfy({ !$0.isEmpty && !$0.hasPrefix(".") }),  // also refuses "." and ".."
              Self.isPageName(String(components.last!))
        else { throw PageError("not a page of this folder (an .html, .htm or .xhtml path inside it, up to \(Limits().maxIdentifierBytes) bytes, without .. or hidden parts)") }
        guard let realRoot else { throw PageError("the pages folder \(root.path) does not exist") }
        let path = root.path + "/" + identifier
        guard let real = Self.realPath(path) else { throw PageError("it cannot be found: \(String(cString: strerror(errno)))") }
        guard real.hasPrefix(realRoot + "/") else { throw PageError("a symbolic link leads it out of the folder, to \(real.prefix(300)); refused") }
        let fd = Glibc.open(real, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw PageError("it cannot be read: \(String(cString: strerror(errno)))") }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG,
              let opened = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)"),
              opened.hasPrefix(realRoot + "/")
        else {
            close(fd)
            throw PageError("it is not a regular file inside the folder")
        }
        let modified = Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
        return (fd, Int(info.st_size), modified, URL(fileURLWithPath: path))
    }

    static func isPageName(_ name: String) -> Bool {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return false }
        return extensions.contains(name[name.index(after: dot)...].lowercased())
    }

    private func walk(directory: String, relative: String, depth: Int, into found: inout [String]) {
        guard depth < 64, let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names where !name.hasPrefix(".") {
            let path = directory + "/" + name
            let identifier = relative.isEmpty ? name : relative + "/" + name
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            switch info.st_mode & S_IFMT {
            case S_IFDIR: walk(directory: path, relative: identifier, depth: depth + 1, into: &found)
            // A linked page is listed: `open` follows it when it stays inside, else says why not.
            case S_IFREG, S_IFLNK: if Self.isPageName(name) { found.append(identifier) }
            default: continue
            }
        }
    }

    private func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}

/// Why one page is not indexed.
struct PageError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
