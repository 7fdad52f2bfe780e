#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit

/// The journal as read from its JSON file at one moment, with a fingerprint of that moment.
struct JournalFile: Sendable {
    var entries: [JournalEntry]
    /// Entries the file holds but that lack a required field (reported, not indexed).
    var skipped: Int
    /// Stored as the index's client state after a rebuild: the journal app compares it with its
    /// file to know whether the index is current, without hashing the file.
    var fingerprint: Data
    var path: String

    /// Why the journal file could not be read.
    struct ReadError: Error, CustomStringConvertible {
        var description: String
    }

    /// Reads and parses `url`. A missing or malformed file throws (the request is retried later:
    /// the app may be halfway through rewriting it); a malformed entry is skipped.
    static func read(_ url: URL) throws -> JournalFile {
        let handle: FileHandle
        do {
            handle = try FileHandle(forReadingFrom: url)
        } catch {
            throw ReadError(description: "cannot open the journal \(url.path): \(error.localizedDescription); pass its path as the first argument")
        }
        defer { try? handle.close() }
        // Size and mtime from the descriptor we read, so the fingerprint describes these bytes.
        var info = stat()
        guard fstat(handle.fileDescriptor, &info) == 0 else {
            throw ReadError(description: "cannot stat the journal \(url.path): \(String(cString: strerror(errno)))")
        }
        let bytes = try handle.readToEnd() ?? Data()
        let document: JSONValue
        do {
            document = try JSONValue.parse(bytes)
        } catch {
            throw ReadError(description: "the journal \(url.path) is not valid JSON (\(error)); fix the file")
        }
        guard let array = document.arrayValue else {
            throw ReadError(description: "the journal \(url.path) must hold a JSON array of entries, not \(document.typeName)")
        }
        let entries = array.compactMap(JournalEntry.init)
        let fingerprint = "journal/1 size=\(info.st_size) mtime=\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec) entries=\(entries.count)"
        return JournalFile(entries: entries, skipped: array.count - entries.count, fingerprint: Data(fingerprint.utf8),
            path: url.path)
    }

    /// One line on stderr (the daemon's log, tagged with our label) when entries were skipped.
    func warnAboutSkippedEntries() {
        guard skipped > 0 else { return }
        FileHandle.standardError.write(Data(
            "journal: skipped entries without id, title, body or an ISO 8601 date count=\(skipped) file=\(path)\n".utf8))
    }

    /// The entries by identifier (the last one wins when an identifier repeats).
    var entriesByID: [String: JournalEntry] {
        Dictionary(entries.map { ($0.id, $0) }, uniquingKeysWith: { _, last in last })
    }
}
