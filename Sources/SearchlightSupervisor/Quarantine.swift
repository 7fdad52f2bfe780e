#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire

/// `<state>/quarantine/` (DESIGN §2): damaged index files set aside for diagnosis, named
/// `<time>_<bundle>_<index or _default>.sqlite` (with their `-wal` and `-shm`), so that names sort
/// by age. Only the newest `limit` sets are kept (`--quarantine-limit`).
struct Quarantine: Sendable {
    let directory: String
    let limit: Int

    init(stateDirectory: String, limit: Int) {
        directory = stateDirectory + "/quarantine"
        self.limit = limit
    }

    static let suffixes = ["", "-wal", "-shm"]

    /// Moves the index file at `path` and its `-wal`/`-shm` into the quarantine (no connection to
    /// it may be open); returns the new name of the main file. Then drops the oldest sets beyond the
    /// limit.
    func setAside(path: String, bundle: String, index: String, now: Date = Date()) throws(SearchlightError) -> String {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot create the quarantine directory \(directory): \(error.localizedDescription); check the state directory's permissions and free space")
        }
        let stamp = ISO8601.format(now).replacingOccurrences(of: ":", with: "").replacingOccurrences(of: "-", with: "")
        var name = "\(stamp)_\(bundle)_\(index.isEmpty ? "_default" : index).sqlite"
        var n = 1
        while FileManager.default.fileExists(atPath: directory + "/" + name) {
            n += 1
            name = "\(stamp)-\(n)_\(bundle)_\(index.isEmpty ? "_default" : index).sqlite"
        }
        for suffix in Self.suffixes where FileManager.default.fileExists(atPath: path + suffix) {
            if rename(path + suffix, directory + "/" + name + suffix) != 0 {
                let reason = String(cString: strerror(errno))
                throw SearchlightError(.indexUnavailable, "cannot move the damaged index file \(path + suffix) into \(directory): \(reason); move or delete it by hand and restart searchlightd")
            }
        }
        Self.syncDirectory(directory)
        Self.syncDirectory((path as NSString).deletingLastPathComponent)
        prune()
        return name
    }

    /// The quarantined sets, oldest first (main file names).
    func entries() -> [String] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return files.filter { $0.hasSuffix(".sqlite") }.sorted()
    }

    /// Deletes the oldest sets beyond `limit`; returns the names deleted.
    @discardableResult
    func prune() -> [String] {
        let all = entries()
        let doomed = all.dropLast(max(0, limit))
        for name in doomed {
            for suffix in Self.suffixes { unlink(directory + "/" + name + suffix) }
        }
        return Array(doomed)
    }

    /// Makes renames in a directory durable.
    static func syncDirectory(_ path: String) {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }
}
