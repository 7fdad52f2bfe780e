import Glibc

/// A file the daemon keeps beside an index (the saved partition, `PartitionFile`; the saved
/// vector index, `VectorIndexFile`), written so that a reader sees the old file or the new one
/// whole.
enum SideFile {
    static let temporarySuffix = ".tmp"

    /// Writes `path` through `path + .tmp`: made anew (`O_EXCL` after removing what was there,
    /// not following a link, so a file planted there is never written through), filled by `fill`
    /// (the descriptor is open for reading and writing), fsynced, then renamed over `path` by
    /// `publish` (which may decline) unless `cancelled`; the directory is fsynced after. The
    /// `.tmp` is renamed or removed only while it is still the file this call made (another save
    /// of the same path may have replaced it). False on any failure; the `.tmp` is removed then.
    static func replace(_ path: String, cancelled: () -> Bool, publish: (_ rename: () -> Bool) -> Bool = { $0() },
                        fill: (Int32) -> Bool) -> Bool {
        let temporary = path + temporarySuffix
        unlink(temporary)
        let fd = open(temporary, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return false }
        var made = stat()
        guard fstat(fd, &made) == 0 else {
            close(fd)
            unlink(temporary)
            return false
        }
        func isOurs() -> Bool {
            var st = stat()
            return lstat(temporary, &st) == 0 && st.st_dev == made.st_dev && st.st_ino == made.st_ino
        }
        let synced = fill(fd) && fsync(fd) == 0
        close(fd)
        guard synced, !cancelled(), isOurs(), publish({ rename(temporary, path) == 0 }) else {
            if isOurs() { unlink(temporary) }
            return false
        }
        // The rename lasts through a power loss only once the directory's entry is on disk too.
        // Not a failure when it cannot be: the file is in place, and a lost rename leaves the
        // previous file or none, both handled at load.
        syncDirectory(of: path)
        return true
    }

    /// The directory holding `path`: its parent, `/` for a file in the root, `.` for a bare name.
    static func directory(of path: String) -> String {
        path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
    }

    /// fsync(2) of the directory holding `path`: the directory synced, nil when it could not be.
    @discardableResult
    static func syncDirectory(of path: String) -> String? {
        let directory = directory(of: path)
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var r = fsync(fd)
        while r != 0 && errno == EINTR { r = fsync(fd) }
        return r == 0 ? directory : nil
    }
}
