#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// Whether the local file a result's `file:` contentURL names still exists (issue 34, "no stale
/// results"): run by the desktop's search at query time, in the desktop's own process, so with its
/// user's rights (never the daemon's: as root it would see files the user cannot).
///
/// Cheap and bounded, because it runs inside every desktop query:
/// - one `stat` per result, at most `maximumChecks` per query and within `budget` (once spent,
///   the remaining results are shown unchecked);
/// - never on a path under a network, FUSE or automount file system (`/proc/self/mountinfo`,
///   re-read at most every `mountsMaxAge`), where a `stat` can block for as long as the server
///   takes or mount it;
/// - "gone" only for ENOENT or ENOTDIR; any other failure (EACCES, EIO…) keeps the result.
public struct VanishedFileCheck: Sendable {
    /// The most `stat`s one query makes.
    public static let maximumChecks = 32
    /// The most time one query's checks take; once spent, the rest are shown unchecked.
    public static let budget: Duration = .milliseconds(20)
    /// How long the list of remote mounts is trusted before it is read again.
    public static let mountsMaxAge: Duration = .seconds(30)

    /// File systems whose `stat` may block on a server or a mount: never checked.
    static let remoteTypes: Set<String> = ["nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "9p", "ceph", "glusterfs",
                                           "lustre", "gpfs", "beegfs", "davfs", "coda", "autofs", "fuse", "fuseblk"]

    /// The mount points of remote file systems, longest first.
    public private(set) var remoteMounts: [String]
    private var readAt: ContinuousClock.Instant
    private let mountinfo: String

    /// Reads the mounts from `mountinfo` (a file in the format of proc(5)'s `/proc/PID/mountinfo`).
    public init(mountinfo: String = "/proc/self/mountinfo") {
        self.mountinfo = mountinfo
        remoteMounts = Self.remoteMountPoints(Self.read(mountinfo))
        readAt = .now
    }

    /// One query's checks: how many were made, and since when.
    public struct Query: Sendable {
        /// The `stat`s made so far.
        public fileprivate(set) var checked = 0
        fileprivate let start: ContinuousClock.Instant
        fileprivate let now: @Sendable () -> ContinuousClock.Instant
    }

    /// Starts a query's checks (and re-reads the mounts when they are old). `now` is the clock the
    /// budget is measured on (tests pass their own, so the bound is checked without wall time).
    public mutating func begin(now: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }) -> Query {
        let start = now()
        if start - readAt > Self.mountsMaxAge {
            remoteMounts = Self.remoteMountPoints(Self.read(mountinfo))
            readAt = start
        }
        return Query(start: start, now: now)
    }

    /// True when `url` is a local `file:` URL whose file no longer exists; false when it exists,
    /// is not a local file, lies on a remote file system, or the query's bounds are spent.
    public func isGone(_ url: String?, in query: inout Query) -> Bool {
        guard let url, query.checked < Self.maximumChecks, query.now() - query.start < Self.budget,
              let path = Self.localPath(url), !isRemote(path) else { return false }
        query.checked += 1
        return Self.vanished(path)
    }

    /// Whether `path` lies under a remote mount point.
    public func isRemote(_ path: String) -> Bool {
        remoteMounts.contains { m in m == "/" || path == m || path.hasPrefix(m + "/") }
    }

    /// The absolute local path of a `file:` URL (`file:///p` or `file://localhost/p`), nil for any
    /// other URL, a remote host, or a path with a NUL.
    public static func localPath(_ url: String) -> String? {
        guard url.utf8.count <= 8192, url.lowercased().hasPrefix("file:"), let u = URL(string: url), u.isFileURL else { return nil }
        if let host = u.host(percentEncoded: false), !host.isEmpty, host != "localhost" { return nil }
        let path = u.path(percentEncoded: false)
        guard path.hasPrefix("/"), !path.utf8.contains(0) else { return nil }
        return path
    }

    /// True when nothing exists at `path` (ENOENT, ENOTDIR); false when it exists or cannot be
    /// told (no right to look, an I/O error).
    public static func vanished(_ path: String) -> Bool {
        var st = stat()
        if stat(path, &st) == 0 { return false }
        return errno == ENOENT || errno == ENOTDIR
    }

    static func read(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    /// The mount points of `mountinfo` (proc(5)) whose type is remote, FUSE or autofs.
    static func remoteMountPoints(_ mountinfo: String) -> [String] {
        var points: [String] = []
        for line in mountinfo.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count > 5, let dash = fields.firstIndex(of: "-"), dash + 1 < fields.count else { continue }
            let type = String(fields[dash + 1])
            let base = type.split(separator: ".").first.map(String.init) ?? type
            guard remoteTypes.contains(type) || remoteTypes.contains(base) else { continue }
            points.append(unescape(String(fields[4])))
        }
        return points.sorted { $0.count > $1.count }
    }

    /// mountinfo writes space, tab, newline and backslash as `\ooo`.
    static func unescape(_ s: String) -> String {
        guard s.contains("\\") else { return s }
        var bytes: [UInt8] = []
        let u = Array(s.utf8)
        var i = 0
        while i < u.count {
            if u[i] == UInt8(ascii: "\\"), i + 3 < u.count,
               let v = UInt8(String(decoding: u[(i + 1)...(i + 3)], as: UTF8.self), radix: 8) {
                bytes.append(v)
                i += 4
            } else {
                bytes.append(u[i])
                i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
