#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightStore
import SearchlightWire

/// `<state>/quarantine/` (DESIGN §2): damaged index files set aside for diagnosis and salvage,
/// named `<UTC time>_<hash>.sqlite` (with their `-wal` and `-shm`), so that names sort by age and
/// stay short whatever the bundle: the hash is FNV-1a of the bundle and index, which the sidecar
/// `<name>.json` spells out (bundle, index, reason, time) for `status` and the operator. The old
/// `<time>_<bundle>_<index>.sqlite` passed the 255-byte limit of a file name for a long bundle
/// identifier, and the index could then not be recovered at all.
///
/// Only the newest `limit` sets are kept (`--quarantine-limit`), except those `pinned` says are
/// still needed: a file whose rows a salvage has not restored yet is never deleted.
struct Quarantine: Sendable {
    let directory: String
    let limit: Int
    /// Names of files still needed (a salvage in progress or to be resumed).
    let pinned: @Sendable () -> Set<String>

    init(stateDirectory: String, limit: Int, pinned: @escaping @Sendable () -> Set<String> = { [] }) {
        directory = stateDirectory + "/quarantine"
        self.limit = limit
        self.pinned = pinned
    }

    /// The pieces of a set, the main file last: a set whose main file is in the quarantine is complete.
    static let suffixes = ["-wal", "-shm", ""]

    /// What the quarantine holds, from the sidecar (nil fields for a file set aside by an older
    /// version, which wrote none).
    struct Entry: Sendable {
        var name: String
        var bundle: String?
        var index: String?
        var reason: String?
        var quarantined: Date?
    }

    /// A name not yet used for a file of `bundle`'s `index` set aside `now`.
    func newName(bundle: String, index: String, now: Date = Date()) -> String {
        let stamp = ISO8601.format(now).replacingOccurrences(of: ":", with: "").replacingOccurrences(of: "-", with: "")
        let hash = String(Self.fnv1a(bundle + "\u{0}" + index), radix: 16)
        let tag = String(repeating: "0", count: 16 - hash.count) + hash
        var name = "\(stamp)_\(tag).sqlite"
        var n = 1
        while FileManager.default.fileExists(atPath: directory + "/" + name) {
            n += 1
            name = "\(stamp)-\(n)_\(tag).sqlite"
        }
        return name
    }

    /// Moves the index file at `path` and its `-wal`/`-shm` into the quarantine as `name` (no
    /// connection to it may be open), after writing the sidecar; then drops the oldest sets beyond
    /// the limit that are not pinned.
    func setAside(path: String, as name: String, bundle: String, index: String, reason: String, now: Date = Date()) throws(SearchlightError) {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot create the quarantine directory \(directory): \(error.localizedDescription); check the state directory's permissions and free space")
        }
        let sidecar: JSONValue = ["bundle": .string(bundle), "index": .string(index), "reason": .string(String(reason.prefix(500))),
                                  "quarantined": .string(ISO8601.format(now)), "from": .string(path)]
        Self.writeDurably(sidecar.serialized(sortedKeys: true) + [0x0A], to: directory + "/" + name + ".json")
        try finishSetAside(path: path, as: name)
        prune()
    }

    /// Moves what is left of the set at `path` into the quarantine as `name`: every piece not
    /// moved yet (a restart finishes a move the daemon was killed in), the main file last.
    func finishSetAside(path: String, as name: String) throws(SearchlightError) {
        for suffix in Self.suffixes where FileManager.default.fileExists(atPath: path + suffix) {
            let target = directory + "/" + name + suffix
            guard !FileManager.default.fileExists(atPath: target) else { continue }
            if rename(path + suffix, target) != 0 {
                let reason = String(cString: strerror(errno))
                throw SearchlightError(.indexUnavailable, "cannot move the damaged index file \(path + suffix) into \(directory): \(reason); move or delete it by hand and restart searchlightd")
            }
        }
        // The saved vector partition and index are made from the file's vectors, of no use for
        // diagnosis or salvage: removed, not carried (left, they would lie beside the fresh index).
        for suffix in IndexStore.vectorSideFileSuffixes { unlink(path + suffix) }
        Self.syncDirectory(directory)
        Self.syncDirectory((path as NSString).deletingLastPathComponent)
    }

    /// Whether the main file of the set `name` is in the quarantine.
    func contains(_ name: String) -> Bool { FileManager.default.fileExists(atPath: directory + "/" + name) }

    /// The quarantined sets, oldest first (main file names).
    func names() -> [String] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return files.filter { $0.hasSuffix(".sqlite") }.sorted()
    }

    /// The quarantined sets with what their sidecars say, oldest first.
    func entries() -> [Entry] {
        names().map { name in
            var entry = Entry(name: name)
            if let data = FileManager.default.contents(atPath: directory + "/" + name + ".json"),
               let o = try? JSONValue.parse(Array(data)) {
                entry.bundle = o["bundle"]?.stringValue
                entry.index = o["index"]?.stringValue
                entry.reason = o["reason"]?.stringValue
                entry.quarantined = o["quarantined"]?.stringValue.flatMap(ISO8601.parse)
            }
            return entry
        }
    }

    /// Deletes the oldest sets beyond `limit`, except pinned ones (which still count toward it);
    /// returns the names deleted.
    @discardableResult
    func prune() -> [String] {
        let keep = pinned()
        let doomed = names().dropLast(max(0, limit)).filter { !keep.contains($0) }
        for name in doomed {
            for suffix in Self.suffixes + [".json"] { unlink(directory + "/" + name + suffix) }
        }
        return Array(doomed)
    }

    /// FNV-1a, 64 bits: a short, stable tag of a bundle and index (not a security measure: the
    /// sidecar, not the name, says whose file it is).
    static func fnv1a(_ s: String) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in s.utf8 {
            h ^= UInt64(b)
            h = h &* 0x100_0000_01b3
        }
        return h
    }

    /// Writes a small file and fsyncs it (mode 0600).
    static func writeDurably(_ bytes: [UInt8], to path: String) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        fsync(fd)
        close(fd)
    }

    /// Makes renames in a directory durable.
    static func syncDirectory(_ path: String) {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }
}
