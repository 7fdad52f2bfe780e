import Foundation

/// One entry of freedesktop's recently-used.xbel (the desktop bookmark specification): a file the
/// user opened, and the applications that opened it.
public struct RecentBookmark: Sendable, Equatable {
    /// The file's URI (`file:///home/…`).
    public var href: String
    public var added: Date?
    public var modified: Date?
    public var visited: Date?
    /// `<mime:mime-type type=…/>`.
    public var mimeType: String?
    public var applications: [RecentApplication]

    public init(href: String, added: Date? = nil, modified: Date? = nil, visited: Date? = nil, mimeType: String? = nil,
                applications: [RecentApplication] = []) {
        self.href = href
        self.added = added
        self.modified = modified
        self.visited = visited
        self.mimeType = mimeType
        self.applications = applications
    }
}

/// `<bookmark:application name= exec= modified= count=/>`: an application that opened the file.
public struct RecentApplication: Sendable, Equatable {
    public var name: String
    /// The command line the file was opened with (`'gedit %u'`).
    public var exec: String
    public var modified: Date?
    public var count: Int

    public init(name: String, exec: String, modified: Date? = nil, count: Int = 1) {
        self.name = name
        self.exec = exec
        self.modified = modified
        self.count = count
    }

    /// The program of `exec`: its first word, quotes removed, as a file name (`gedit`).
    public var program: String? {
        // GLib quotes the whole command line (`'gedit %u'`); a program path may be quoted too.
        var s = exec.trimmingCharacters(in: .whitespaces)
        while let q = s.first, q == "'" || q == "\"" {
            s.removeFirst()
            if let end = s.firstIndex(of: q) { s = String(s[..<end]) + String(s[s.index(after: end)...]) }
            s = s.trimmingCharacters(in: .whitespaces)
        }
        s = String(s.prefix { $0 != " " })
        let name = (s as NSString).lastPathComponent
        return name.isEmpty ? nil : name
    }
}

/// Why the recent files could not be read: the file is refused or malformed. Nothing already
/// imported is changed when reading fails.
public struct RecentFilesError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
