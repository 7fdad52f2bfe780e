#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightStore
import SearchlightWire

/// Shadow files and the atomic replacement of an index file (DESIGN §6 Triggers).
///
/// While an index is rebuilt, its shadow (`<index>.sqlite.shadow` beside it) is registered here:
/// client donations are written to the open file and then to the shadow. `swapInShadow` puts it
/// in place through `replace` under the gate: calls in progress finish, new ones wait (briefly)
/// until the new file is open, so no call sees a closed store and none fails.
extension IndexRegistry {
    func shadowPath(bundle: String, index: String) -> String { path(bundle: bundle, index: index) + ".shadow" }

    /// The shadow of an index being rebuilt, if any.
    func shadow(bundle: String, index: String) -> IndexStore? {
        lock.withLock { shadows[Key(bundle: bundle, index: index)] }
    }

    /// Opens the shadow file of an index (a fresh one unless `resume`), attaches the current file
    /// as its source, and registers it so that every call from now on writes both. Waits for the
    /// calls in progress: do not call it from inside a client call.
    func beginShadow(bundle: String, index: String, resume: Bool) throws(SearchlightError) -> IndexStore {
        let key = Key(bundle: bundle, index: index)
        let shadowFile = shadowPath(bundle: bundle, index: index)
        if !resume { Self.removeDatabaseFiles(shadowFile) }
        // Its writer at background priority: the reindex-all filling it must not take the CPU
        // from queries, which the open file answers until the swap.
        var shadowOptions = options
        shadowOptions.backgroundWriter = true
        let shadow = try IndexStore(path: shadowFile, options: shadowOptions)
        do {
            try shadow.attachSource(path(bundle: bundle, index: index))
        } catch {
            shadow.shutDown()
            throw error
        }
        gate.exclusively {
            let previous: IndexStore? = lock.withLock {
                shadowFaults[key] = nil
                defer { shadows[key] = shadow }
                return shadows[key]
            }
            previous?.shutDown()
        }
        return shadow
    }

    /// Unregisters an index's shadow, closes it and deletes its file (a rebuild that ended without a swap).
    func dropShadow(bundle: String, index: String) {
        let key = Key(bundle: bundle, index: index)
        let shadow: IndexStore? = gate.exclusively {
            lock.withLock {
                shadowFaults[key] = nil
                return shadows.removeValue(forKey: key)
            }
        }
        shadow?.shutDown()
        Self.removeDatabaseFiles(shadowPath(bundle: bundle, index: index))
    }

    /// A donation reached the open file but not the shadow: the shadow cannot replace it.
    func noteShadowFault(bundle: String, index: String, _ message: String) {
        lock.withLock { shadowFaults[Key(bundle: bundle, index: index)] = message }
    }

    func shadowFault(bundle: String, index: String) -> String? {
        lock.withLock { shadowFaults[Key(bundle: bundle, index: index)] }
    }

    /// Replaces the file of (bundle, index) by the shadow's file, atomically (through `replace`,
    /// the one primitive recovery uses too), and returns the store of the new file. Both WALs are
    /// checkpointed and the shadow fsynced first, outside the gate, so the pause is short. Inside
    /// it: the old store is shut down (every connection closed, so no WAL of it survives to be
    /// replayed into the new file), the shadow unregistered and shut down, fsynced, renamed over
    /// the index's path, the directory fsynced, and the file opened. A crash at any point leaves
    /// either the old file or the new one in place. Returns how long client calls waited.
    @discardableResult
    func swapInShadow(bundle: String, index: String, shadow: IndexStore) throws(SearchlightError) -> (store: IndexStore, pause: TimeInterval) {
        let key = Key(bundle: bundle, index: index)
        let target = path(bundle: bundle, index: index)
        Self.checkpoint(shadow.path)
        Self.checkpoint(target)
        _ = Self.fsync(path: shadow.path)
        let started = Date()
        let store = try replace(bundle: bundle, index: index) { (path) throws(SearchlightError) in
            // Under the registry lock (held by `replace`).
            if shadows[key] === shadow {
                shadows[key] = nil
                shadowFaults[key] = nil
            }
            // Every connection of the shadow must be closed before its WAL goes: one still open
            // (a background read at low priority on a loaded machine, past shutDown's 10 s) kept
            // the last close from checkpointing, and removing the WAL then lost committed pages;
            // the file renamed over the index answered SQLITE_IOERR_SHORT_READ and 0 items. Refuse
            // the swap instead: the old file stays in service, untouched.
            // Its reads are its own background work (ranked-index builds, the vector fill):
            // interrupted, rather than waited for while every client call is held at the gate.
            guard shadow.shutDown(timeout: shutDownTimeout, interruptingReads: true) else {
                throw SearchlightError(.indexUnavailable,
                    "the shadow \(shadow.path) was still being read when the swap closed it; the old index stays in service; retry")
            }
            Self.removeDatabaseFiles(shadow.path, mainFile: false)
            guard Self.fsync(path: shadow.path) else {
                throw SearchlightError(.indexUnavailable, "cannot fsync \(shadow.path): \(String(cString: strerror(errno)))")
            }
            var st = stat()
            if stat(path + "-wal", &st) == 0, st.st_size > 0 {
                log.warning("old index WAL left after shutdown; removed", ["bundle": bundle, "bytes": Int(st.st_size)])
            }
            Self.removeDatabaseFiles(path, mainFile: false)
            // The old index's saved vector partition and index go; the shadow's partition, if it
            // saved one, follows its file (a load checks each entry against the vectors it finds
            // anyway). A shadow never saves its index (only a close that keeps the files does).
            for suffix in IndexStore.vectorSideFileSuffixes { unlink(path + suffix) }
            guard rename(shadow.path, path) == 0 else {
                throw SearchlightError(.indexUnavailable, "cannot rename \(shadow.path) to \(path): \(String(cString: strerror(errno)))")
            }
            _ = rename(shadow.path + IndexStore.partitionFileSuffix, path + IndexStore.partitionFileSuffix)
            for suffix in IndexStore.vectorSideFileSuffixes { unlink(shadow.path + suffix) }  // a .tmp left by a crash
            _ = Self.fsync(path: (path as NSString).deletingLastPathComponent)
        }
        let pause = Date().timeIntervalSince(started)
        log.info("index file replaced", ["bundle": bundle, "index": index.isEmpty ? "_default" : index, "items": store.count,
            "format": store.formatVersion, "pause_ms": Int(pause * 1000)])
        return (store, pause)
    }

    /// Copies what a file's WAL holds into the file (PASSIVE: waits for nobody), from a
    /// connection of its own; best effort, the close does it in full.
    static func checkpoint(_ file: String) {
        guard let db = try? Database(path: file) else { return }
        _ = try? db.rows("PRAGMA wal_checkpoint(PASSIVE)")
        db.close()
    }

    /// Removes a SQLite file with its -wal, -shm and the vector index's side files (with `mainFile: false`, only the -wal and -shm).
    static func removeDatabaseFiles(_ file: String, mainFile: Bool = true) {
        let suffixes = mainFile ? [""] + IndexStore.sqliteFileSuffixes + IndexStore.vectorSideFileSuffixes : IndexStore.sqliteFileSuffixes
        for suffix in suffixes { unlink(file + suffix) }
    }

    /// fsync of a file or directory; false when it cannot be opened or synced.
    static func fsync(path: String) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return Glibc.fsync(fd) == 0
    }
}
