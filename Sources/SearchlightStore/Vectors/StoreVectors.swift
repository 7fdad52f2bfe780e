import Foundation
import Synchronization
import SearchlightSemantic
import SearchlightWire

/// The loaded vector index of one store (`VectorIndex`: a rowid and a flags byte per item in
/// memory, the vectors in unnamed files beside the store's file), following what commits to its
/// `item_vectors` table.
///
/// The writer journals each vector it writes or deletes inside a transaction; once the group
/// commits, the journal is applied to the loaded index. When any call of the group rolled back,
/// the index is dropped instead and reloaded from the table on the next semantic query: the
/// table is the truth, and patching would have to know which calls' entries survived. Between a
/// commit and its application a query may miss a new item's vector; it never returns a deleted
/// item, because every vector hit is checked against `items` (visibility, filter) in SQL.
///
/// The index is loaded on the writer thread between groups (`IndexStore.loadVectors`), so it
/// starts from exactly the committed state and every later commit is applied to it.
///
/// Searches hold the lock shared, so queries scan side by side: under a plain mutex one client's
/// scan (an exact one over every vector, for a filter few items pass) held every other client's
/// semantic query back (issue 30). The writer's patch takes it exclusively, between scans.
final class StoreVectors: @unchecked Sendable {
    private let lock = ReadWriteLock()
    /// Guards the fill flags.
    private let fillLock = NSLock()
    /// nil until the first semantic query loads it (or after a rolled-back group).
    private var loaded: VectorIndex?
    /// Whether the background fill of items without a vector ran since the file was opened.
    private var fillStarted = false
    private var filling = false
    /// Whether the partition's build thread runs (guarded by `fillLock`).
    private var partitionRunning = false
    /// Set when the store closes (guarded by `fillLock`): no partition build begins after it, and
    /// one under way is cancelled (`PartitionBuild.cancel`: it stops at its next check).
    private var closed = false
    /// The build the partition thread runs (guarded by `fillLock`).
    private var runningBuild: PartitionBuild?
    /// Where the partition is saved beside the store (`PartitionFile`), set by `install`.
    private var partitionPath: String?
    /// Where the loaded index is saved at a clean close (`VectorIndexFile`), nil when off.
    private var savedIndexPath: String?
    /// The store's file: its vector side files are this and `IndexStore.vectorSideFileSuffixes`.
    private var storePath: String?
    /// Where the last load came from (guarded by `fillLock`).
    private var lastLoad: VectorIndexLoad?
    /// Saves of the loaded index (guarded by `fillLock`).
    private var indexSaveCount = 0
    /// What the last load did with the saved partition (guarded by `fillLock`).
    private var restore: PartitionRestore?
    /// Partitions saved since the store opened (guarded by `fillLock`).
    private var saves = 0
    /// Delete-alls committed (guarded by `fillLock`): a save of a build begun before one is not
    /// put in place (the file was removed with the vectors it described).
    private var clears = 0
    /// A test seam: called on the partition thread with each build it begins, before it runs.
    var onBuildBegun: ((PartitionBuild) -> Void)?
    /// A test seam: called on the partition thread once a save has written its `.tmp`, before the rename.
    var onSaveWritten: ((PartitionBuild) -> Void)?
    /// Entered while the partition thread runs (with `partitionRunning`): `close` waits on it.
    private let partitionThread = DispatchGroup()
    /// How long `close` waits for the partition thread to end (it stops at its next check, or
    /// after the step under way: at 1M a save sorts 1M rowids and writes 14 MB).
    static let closeWait: TimeInterval = 10

    // Owned by the writer thread.
    private var journal: [(rowid: Int64, vector: QuantizedVector?)] = []
    private var cleared = false

    var isLoaded: Bool { lock.reading { loaded != nil } }

    /// Whether the loaded index keeps its vectors in files (nil when not loaded).
    var isFileBacked: Bool? { lock.reading { loaded?.isFileBacked } }

    /// The loaded index's heap bytes (nil when not loaded).
    var heapBytes: Int? { lock.reading { loaded?.heapBytes } }

    /// Whether a partition build runs (its thread, with the frozen copy it reads).
    var isPartitionBuilding: Bool { fillLock.withLock { partitionRunning } }

    /// (vectors, refined) of the loaded index, nil when it is not loaded.
    var counts: (vectors: Int, refined: Int)? {
        lock.reading { loaded.map { ($0.count, $0.refinedCount) } }
    }

    /// Whether the writer's transaction wrote vectors since the last group (its epoch moves).
    var writerTouched: Bool { !journal.isEmpty || cleared }

    func writerPut(_ rowid: Int64, _ vector: QuantizedVector) { journal.append((rowid, vector)) }
    func writerDelete(_ rowid: Int64) { journal.append((rowid, nil)) }
    func writerCleared() {
        journal.removeAll(keepingCapacity: true)
        cleared = true
    }

    /// Called by the writer after each group: applies the journal, or drops the index when a call
    /// of the group did not commit.
    func writerCommitted(clean: Bool) {
        guard !journal.isEmpty || cleared else { return }
        if cleared && clean { removeSavedPartition() }
        lock.writing {
            guard var index = loaded else { return }
            loaded = nil  // released while it is patched, so the patch does not copy its arrays
            guard clean else { return }
            if cleared {
                let limit = index.partitionLimit
                index = VectorIndex(dimension: index.dimension, directory: index.directory)
                index.partitionLimit = limit
                index.buildsPartition = false
            }
            for entry in journal {
                if let v = entry.vector { try? index.set(entry.rowid, v) } else { _ = index.remove(entry.rowid) }
            }
            loaded = index
        }
        journal.removeAll(keepingCapacity: true)
        cleared = false
        schedulePartition()
    }

    /// Installs a loaded index, `restored` what its load did with the partition saved at
    /// `partitionPath` (`VectorIndex.restorePartition`); without one in place the partition is
    /// built in the background (`schedulePartition`), and saved there once built.
    func install(_ index: VectorIndex, partitionPath: String? = nil, restored: PartitionRestore? = nil) {
        var index = index
        index.buildsPartition = false
        fillLock.withLock {
            self.partitionPath = partitionPath
            restore = restored
        }
        lock.writing { loaded = index }
        HeapTrimmer.shared.requestTrim()  // the load's row buffers and statements
        schedulePartition()
    }

    /// Where the partition is saved (`IndexStore.partitionFileSuffix`), known before a load so
    /// that a delete-all removes the file of an index not loaded.
    func usePartitionPath(_ path: String?) { fillLock.withLock { partitionPath = path } }

    /// The store's file (its side files go with a delete-all) and where the loaded index is saved
    /// at a clean close (nil: not saved).
    func useIndexPath(store: String, saved: String?) {
        fillLock.withLock {
            storePath = store
            savedIndexPath = saved
        }
    }

    var indexPath: String? { fillLock.withLock { savedIndexPath } }
    var indexLoad: VectorIndexLoad? { fillLock.withLock { lastLoad } }
    var indexSaves: Int { fillLock.withLock { indexSaveCount } }
    func noteLoad(_ load: VectorIndexLoad) { fillLock.withLock { lastLoad = load } }

    /// Saves the loaded index at `stamp` (`VectorIndexFile.save`); the bytes written, nil when
    /// nothing was (not loaded, off, a patch pending, a write failed). Only once the writer
    /// thread has stopped (`IndexStore.shutDown`, which waited for it): the index then holds what
    /// the table holds at `stamp`, and nothing changes it during the save.
    func saveIndex(stamp: VectorStamp, deadline: Date = .distantFuture) -> Int? {
        guard let path = indexPath, journal.isEmpty, !cleared else { return nil }
        // The regions' append buffers written out under the exclusive lock (queries read them),
        // then the save under the shared one: nothing changes the index any more.
        guard lock.writing({ loaded?.flushFiles() != nil }) else { return nil }
        let bytes = lock.reading { loaded.flatMap { VectorIndexFile.save($0, stamp: stamp, to: path, cancelled: { Date() >= deadline }) } }
        if bytes != nil { fillLock.withLock { indexSaveCount += 1 } }
        return bytes
    }

    /// The index was emptied (a delete-all committed): its saved partition, and one being saved,
    /// go; the build under way, of vectors that are gone, stops.
    private func removeSavedPartition() {
        fillLock.withLock {
            clears += 1
            runningBuild?.cancel()
            // A save renames under this lock and checks `clears`: it cannot put its file back.
            // (The saved index is written only by a close, after the writer's last group.)
            guard let storePath else { return }
            for suffix in IndexStore.vectorSideFileSuffixes { unlink(storePath + suffix) }
        }
    }

    /// What the last load did with the saved partition (nil: no path, or not loaded yet).
    var partitionRestore: PartitionRestore? { fillLock.withLock { restore } }
    /// Partitions saved since the store opened.
    var partitionSaves: Int { fillLock.withLock { saves } }
    /// Whether the loaded index is partitioned now.
    var isPartitioned: Bool { lock.reading { loaded?.isPartitioned ?? false } }
    /// Whether a partition build runs.
    var isBuildingPartition: Bool { fillLock.withLock { partitionRunning } }

    // MARK: The partition, off the lock

    /// Starts the build of the loaded index's coarse partition (`VectorPartition`) on a
    /// background thread when one is due and none runs. The build reads its own descriptors of
    /// the index's files, without the lock: queries meanwhile search the partition there was, or
    /// every sign code, and the writer goes on patching the index; the slots it sets meanwhile are
    /// searched beside the new lists once the build is in place (a short exclusive hold). A
    /// build begun before a compaction (which renumbers the slots) is dropped and begun again.
    func schedulePartition() {
        // Most commits make none due: no thread for them.
        guard lock.reading({ loaded?.isPartitionDue ?? false }) else { return }
        let start = fillLock.withLock {
            if partitionRunning || closed { return false }
            partitionRunning = true
            partitionThread.enter()
            return true
        }
        guard start else { return }
        let thread = Thread { [self] in
            BackgroundPriority.lowerCurrentThread(name: "vector-partition")
            buildPartitions()
        }
        thread.name = "vector-partition"
        thread.start()
    }

    private func buildPartitions() {
        while true {
            // Checked and begun under the lock, and the thread marked ended there, so a commit
            // that makes a build due after this check finds the thread ended and starts one.
            var generation = 0
            let build: PartitionBuild? = lock.writing {
                let build = fillLock.withLock { closed } ? nil : loaded?.beginPartitionBuild()
                fillLock.withLock {
                    generation = clears
                    if build == nil {
                        partitionRunning = false
                        partitionThread.leave()
                    }
                    runningBuild = build
                }
                return build
            }
            guard let build else {
                // The build's frozen copy and k-means temporaries are freed by now; without a trim
                // they stay resident, free but kept by the arena of this thread (issue 32).
                HeapTrimmer.shared.requestTrim()
                return
            }
            onBuildBegun?(build)
            // A close between the begin and here: `close` saw no build to cancel.
            if fillLock.withLock({ closed }) { build.cancel() }
            if build.isDetached { build.run() } else { lock.writing { build.run() } }
            let placed = lock.writing {
                guard !build.isCancelled, !fillLock.withLock({ closed }) else {
                    loaded?.cancelPartitionBuild(build)
                    return false
                }
                return loaded?.finishPartitionBuild(build) ?? false
            }
            // Saved off the lock (the lists are read-only once built): the next load restores it.
            // Renamed into place under `fillLock` and only while the store is open: once `close`
            // has run, the registry may move, replace or erase the store's files, and a late
            // rename would put this file back among them (its `.tmp` is removed instead).
            if placed, let path = fillLock.withLock({ closed ? nil : partitionPath }) {
                let saved = build.save(to: path) { rename in
                    onSaveWritten?(build)
                    return fillLock.withLock { closed || clears != generation ? false : rename() }
                }
                if saved { fillLock.withLock { saves += 1 } }
            }
            // Not kept past its end: its source holds a copy of the flags and rowids (9 MB at 1M)
            // and descriptors of the index's files.
            fillLock.withLock { if runningBuild === build { runningBuild = nil } }
        }
    }

    func drop() { lock.writing { loaded = nil } }

    /// `body` with the loaded index under the shared lock (for tests: `VectorIndex.partitionReach`).
    func withLoaded<T>(_ body: (VectorIndex?) -> T) -> T { lock.reading { body(loaded) } }

    /// The store closes: no partition build begins from now on, one under way stops at its next
    /// check (`PartitionBuild.cancel`), and a save under way is not put in place (its rename is
    /// checked under `fillLock`, its `.tmp` removed). With `timeout`, waits that long at most for
    /// the partition thread to end, so that nothing is written beside the store's files after
    /// (false when the wait ran out). Without, returns at once: `close` runs under the daemon's
    /// registry lock and on clients' threads, which must not wait for a background build.
    @discardableResult
    func close(waitingUpTo timeout: TimeInterval? = nil) -> Bool {
        fillLock.withLock {
            closed = true
            runningBuild?.cancel()
        }
        guard let timeout else { return !isPartitionBuilding }
        return partitionThread.wait(timeout: .now() + timeout) == .success
    }

    /// The `k` nearest vectors (nil when not loaded); `allowed` restricts them.
    func search(_ query: [Float], k: Int, mode: VectorIndex.Mode = .automatic, allowed: ((Int64) -> Bool)? = nil)
        -> (matches: [VectorMatch], total: Int)?
    {
        lock.reading {
            guard let index = loaded else { return nil }
            return (index.search(query, k: k, mode: mode, allowed: allowed), index.count)
        }
    }

    /// The search of this index for a query across indexes holding `unionCount` vectors in all
    /// (this one's among them): where one index of that size would prefilter (`VectorIndex.Mode
    /// .automatic`), this one rescores the same share of its items, `candidates × count / unionCount`
    /// (at least `k`), the nearest in Hamming distance; else it is searched as alone. Six apps of
    /// 10 600 items each were searched exactly (each is below `exactLimit`): 64 000 dot products
    /// a query where one index of their 64 000 items rescores 2 000 (issue 31).
    func mode(k: Int, unionCount: Int) -> VectorIndex.Mode {
        lock.reading {
            guard let index = loaded, index.count > 0 else { return .automatic }
            let union = max(unionCount, index.count)
            guard let candidates = index.automaticCandidates(count: union) else { return .automatic }
            let share = max(k, Int((Double(candidates) * Double(index.count) / Double(union)).rounded(.up)))
            return share >= index.count ? .exact : .prefiltered(candidates: share)
        }
    }

    /// Which of `rowids` (best first) are near-duplicates of one above (`VectorIndex.nearDuplicates`);
    /// none when the index is not loaded.
    func nearDuplicates(_ rowids: [Int64], threshold: Float, depth: Int) -> [Bool] {
        lock.reading {
            loaded?.nearDuplicates(rowids, threshold: threshold, depth: depth) ?? [Bool](repeating: false, count: rowids.count)
        }
    }

    /// True once per opening: the caller starts the fill.
    func claimFill() -> Bool {
        fillLock.withLock {
            guard !fillStarted else { return false }
            fillStarted = true
            filling = true
            return true
        }
    }

    func fillEnded() { fillLock.withLock { filling = false } }
    var isFilling: Bool { fillLock.withLock { filling } }
}

/// A pthread read-write lock that prefers writers (a stream of overlapping readers cannot keep the
/// store's writer out for ever; a reader arriving while the writer waits queues behind its short patch).
final class ReadWriteLock: @unchecked Sendable {
    private let rw: UnsafeMutablePointer<pthread_rwlock_t>

    init() {
        rw = .allocate(capacity: 1)
        var attributes = pthread_rwlockattr_t()
        pthread_rwlockattr_init(&attributes)
        pthread_rwlockattr_setkind_np(&attributes, Int32(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP))
        pthread_rwlock_init(rw, &attributes)
        pthread_rwlockattr_destroy(&attributes)
    }

    deinit {
        pthread_rwlock_destroy(rw)
        rw.deallocate()
    }

    func reading<T>(_ body: () throws -> T) rethrows -> T {
        pthread_rwlock_rdlock(rw)
        defer { pthread_rwlock_unlock(rw) }
        return try body()
    }

    func writing<T>(_ body: () throws -> T) rethrows -> T {
        pthread_rwlock_wrlock(rw)
        defer { pthread_rwlock_unlock(rw) }
        return try body()
    }
}
