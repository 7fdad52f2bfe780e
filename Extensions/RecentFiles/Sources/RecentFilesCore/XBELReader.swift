#if canImport(Glibc)
import Glibc
#endif
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// Reads the user's recently-used.xbel, as the user, and never anyone else's: the file must be a
/// regular file owned by the reading user, not a symbolic link, at most `maxBytes`; its text must
/// be UTF-8 XML; at most `maxBookmarks` entries and `maxApplications` per entry are read.
public struct XBELReader: Sendable {
    public var maxBytes = 8 << 20
    public var maxBookmarks = 10_000
    public var maxApplications = 32
    /// The uid the file must belong to (the process's effective uid).
    public var owner: uid_t = geteuid()

    public init() {}

    /// `$XDG_DATA_HOME/recently-used.xbel` (`~/.local/share/recently-used.xbel`).
    public static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        let dataHome = environment["XDG_DATA_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? (environment["HOME"] ?? NSHomeDirectory()) + "/.local/share"
        return dataHome + "/recently-used.xbel"
    }

    /// The bookmarks of the file at `path`; none when it does not exist (nothing opened yet).
    public func read(path: String) throws(RecentFilesError) -> [RecentBookmark] {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        if fd < 0 {
            let e = errno
            if e == ENOENT { return [] }
            if e == ELOOP { throw RecentFilesError("\(path) is a symbolic link; refused (the recent files are read from the user's own file only)") }
            throw RecentFilesError("\(path) cannot be read: \(String(cString: strerror(e)))")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw RecentFilesError("\(path) cannot be read: \(String(cString: strerror(errno)))") }
        guard info.st_mode & S_IFMT == S_IFREG else { throw RecentFilesError("\(path) is not a regular file; refused") }
        guard info.st_uid == owner else {
            throw RecentFilesError("\(path) belongs to uid \(info.st_uid), not to uid \(owner) who reads it; refused (another user's file is never read)")
        }
        guard info.st_size <= maxBytes else {
            throw RecentFilesError("\(path) is \(info.st_size) bytes, over the \(maxBytes)-byte limit; nothing imported (GTK trims it; remove it to start afresh)")
        }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size) + 1)
        var total = 0
        while total < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, $0.count - total) }
            if n < 0 { throw RecentFilesError("\(path) cannot be read: \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            total += n
        }
        guard total <= maxBytes else { throw RecentFilesError("\(path) grew over the \(maxBytes)-byte limit while being read; nothing imported") }
        return try parse(Array(bytes[0..<total]), name: path)
    }

    /// The bookmarks of an XBEL text.
    public func parse(_ bytes: [UInt8], name: String = "the XBEL text") throws(RecentFilesError) -> [RecentBookmark] {
        guard String(validating: bytes, as: UTF8.self) != nil else {
            throw RecentFilesError("\(name) is not UTF-8 text; nothing imported")
        }
        let delegate = XBELParserDelegate(maxBookmarks: maxBookmarks, maxApplications: maxApplications)
        let parser = XMLParser(data: Data(bytes))
        parser.shouldResolveExternalEntities = false
        parser.delegate = delegate
        let ok = parser.parse()
        if let limit = delegate.limitError { throw RecentFilesError("\(name): \(limit); nothing imported") }
        guard ok else {
            let why = parser.parserError.map { "\($0.localizedDescription)" } ?? "unknown error"
            throw RecentFilesError("\(name) is not well-formed XML (line \(parser.lineNumber): \(why)); nothing imported")
        }
        // FoundationXML on Linux reports success for a text that ends inside an element.
        guard delegate.depth == 0 else {
            throw RecentFilesError("\(name) is not well-formed XML (it ends inside an element: cut short?); nothing imported")
        }
        guard delegate.sawRoot else { throw RecentFilesError("\(name) is not an XBEL file (no <xbel> element); nothing imported") }
        return delegate.bookmarks
    }
}

/// Collects `<bookmark>` elements and their `<mime:mime-type>` and `<bookmark:application>`.
private final class XBELParserDelegate: NSObject, XMLParserDelegate {
    let maxBookmarks: Int
    let maxApplications: Int
    var bookmarks: [RecentBookmark] = []
    var current: RecentBookmark?
    var sawRoot = false
    var depth = 0
    var limitError: String?

    init(maxBookmarks: Int, maxApplications: Int) {
        self.maxBookmarks = maxBookmarks
        self.maxApplications = maxApplications
    }

    private func stop(_ parser: XMLParser, _ why: String) {
        limitError = why
        parser.abortParsing()
    }

    func parser(_ parser: XMLParser, didStartElement element: String, namespaceURI: String?, qualifiedName: String?,
                attributes: [String: String] = [:]) {
        depth += 1
        guard depth <= 64 else { return stop(parser, "nested deeper than 64 elements") }
        switch element {
        case "xbel":
            sawRoot = true
        case "bookmark":
            guard bookmarks.count < maxBookmarks else { return stop(parser, "more than \(maxBookmarks) bookmarks") }
            guard let href = attributes["href"], !href.isEmpty else { return }
            current = RecentBookmark(href: href, added: Self.date(attributes["added"]), modified: Self.date(attributes["modified"]),
                                     visited: Self.date(attributes["visited"]))
        case "mime:mime-type":
            current?.mimeType = attributes["type"]
        case "bookmark:application":
            guard current != nil, let name = attributes["name"], let exec = attributes["exec"] else { return }
            guard current!.applications.count < maxApplications else { return stop(parser, "a bookmark with more than \(maxApplications) applications") }
            current!.applications.append(RecentApplication(name: name, exec: exec, modified: Self.date(attributes["modified"]),
                                                            count: attributes["count"].flatMap { Int($0) } ?? 1))
        default:
            break
        }
    }

    func parser(_ parser: XMLParser, didEndElement element: String, namespaceURI: String?, qualifiedName: String?) {
        depth -= 1
        if element == "bookmark", let b = current {
            bookmarks.append(b)
            current = nil
        }
    }

    /// ISO 8601, with or without fractional seconds (GLib writes `2026-11-29T05:00:00.123456Z`).
    static func date(_ s: String?) -> Date? {
        guard var s, s.utf8.count <= 64 else { return nil }
        // The fraction dropped: GLib writes six digits, which not every parser reads.
        if let dot = s.firstIndex(of: ".") {
            let end = s[dot...].firstIndex { $0 == "Z" || $0 == "+" || $0 == "-" } ?? s.endIndex
            s.removeSubrange(dot..<end)
        }
        return ISO8601DateFormatter().date(from: s)
    }
}
