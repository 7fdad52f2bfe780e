#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// The folder of notes: which files count as notes, and where an identifier points.
///
/// Identifiers come back from the supervisor and, through it, from anyone who can write to the
/// index, so one is trusted only when it names a regular note file inside the folder.
struct NotesFolder: Sendable {
    /// File name extensions of notes, with the UTI each is indexed as.
    static let contentTypes = ["md": "net.daringfireball.markdown", "markdown": "net.daringfireball.markdown",
                               "txt": "public.plain-text"]
    /// Larger files are not notes but something that wandered in (logs, dumps).
    static let maxFileBytes = 1 << 20

    let root: URL

    init(path: String) {
        root = URL(fileURLWithPath: path).standardizedFileURL
    }

    /// Every note's identifier (its path relative to the folder), sorted; hidden files and
    /// folders, symbolic links and oversized files are skipped.
    func identifiers() throws -> [String] {
        guard isDirectory(root.path) else {
            throw NotesError(description: "the notes folder \(root.path) does not exist; pass the folder as the first argument")
        }
        var found: [String] = []
        walk(directory: root.path, relative: "", into: &found)
        return found.sorted()
    }

    /// The file an identifier names, or nil when it does not name a note of this folder (vanished,
    /// hidden, oversized, not a note, or pointing outside with `..`, `/` or a symbolic link).
    func file(for identifier: String) -> URL? {
        let components = identifier.split(separator: "/", omittingEmptySubsequences: false)
        guard !identifier.hasPrefix("/"), !identifier.contains("\0"),
            components.allSatisfy({ !$0.isEmpty && !$0.hasPrefix(".") })  // also refuses "." and ".."
        else { return nil }
        let path = root.path + "/" + identifier
        guard isNote(path: path, name: String(components.last!)),
            let real = realPath(path), let realRoot = realPath(root.path), real == realRoot + "/" + identifier
        else { return nil }
        return URL(fileURLWithPath: path)
    }

    /// The UTI of a note by its file name, or nil for files that are not notes.
    static func contentType(ofFileNamed name: String) -> String? {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return nil }
        return contentTypes[name[name.index(after: dot)...].lowercased()]
    }

    private func walk(directory: String, relative: String, into found: inout [String]) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names where !name.hasPrefix(".") {
            let path = directory + "/" + name
            let identifier = relative.isEmpty ? name : relative + "/" + name
            var info = stat()
            // lstat: a symbolic link is neither followed into nor indexed, so nothing outside the folder is read.
            guard lstat(path, &info) == 0 else { continue }
            if (info.st_mode & S_IFMT) == S_IFDIR {
                walk(directory: path, relative: identifier, into: &found)
            } else if isNote(path: path, name: name) {
                found.append(identifier)
            }
        }
    }

    private func isNote(path: String, name: String) -> Bool {
        var info = stat()
        return Self.contentType(ofFileNamed: name) != nil && lstat(path, &info) == 0
            && (info.st_mode & S_IFMT) == S_IFREG && info.st_size <= Self.maxFileBytes
    }

    private func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    private func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}

/// Why the notes could not be read.
struct NotesError: Error, CustomStringConvertible {
    var description: String
}
