import CSQLite
import Foundation
import SearchlightWire

/// Builds the ranked index of one store, segment by segment, off the donation path: donations
/// only record in `rank_dirty` what a built segment must re-read (`RankWriter`), and items above
/// the coverage are read from `items` by queries until a segment holds them.
///
/// Tantivy's segment model, in two lanes that may run at once (their rowid ranges never meet):
/// - **Fresh segments** (`freshQueue`, normal priority): as soon as `freshSegmentDocs` items lie
///   above the coverage, writes or not, they become a segment of their own, so an app that has
///   just donated finds its items in segments, not in a delta that every query scores one by one
///   (or ranks with FTS5, past `RankedTopK.deltaLimit`). This is the donation's own work.
/// - **Merges** (`mergeQueue`): while writes come in, `tierWidth` adjacent segments of one size
///   tier are merged into one, at the normal priority too (else the segments would pile up
///   faster than a background thread merges them on a busy machine). Once no client has written
///   for `idleSeconds` (when a query asked, at most `maxDeferral` after it asked), settling, at
///   background priority (`queue`), one step at a time: the trailing segments merged as one
///   build would have laid them out (a segment per `rankedIndexSegmentDocs`), segments with many
///   rewritten items or close to their `safe_until` rebuilt, retired segments' rows deleted.
///
/// One build: the rowid range is registered with the writer (writes there are recorded from
/// then on), the items are read in one read transaction and tokenized with FTS5's tokenizer,
/// the terms written under a new, inactive segment id in batches through the writer queue (a
/// donation waits for one batch at most), then one small transaction switches the segment in,
/// retires the segments it replaces and forgets the recorded writes its snapshot included.
/// Retired segments are deleted in batches afterwards (by settling, for merges made while
/// writes come in). Without fresh segments (`StoreOptions.rankedIndexFreshSegments`), nothing
/// is built before the writes stop, as before.
public final class RankMaintainer: @unchecked Sendable {
    /// A query whose delta is at least this asks for a build.
    static let deltaBuildThreshold = 64
    /// Items above the coverage that make a fresh segment at once, writes or not. Small, since
    /// what is left under it when the donations stop is scored one by one by every query.
    static let freshSegmentDocs = 256
    /// Adjacent segments of one tier (sizes within a factor of `tierWidth`, from
    /// `freshSegmentDocs` up) merged at once while writes come in: each item is read about
    /// log4(`rankedIndexSegmentDocs` / `freshSegmentDocs`) + 1 times, and a query meets at most
    /// `tierWidth - 1` segments of a tier.
    static let tierWidth = 4
    /// Rewritten documents that make a segment worth rebuilding: this many, and an eighth of it.
    static let dirtyRebuildThreshold = 64
    /// Terms per write batch…
    static let batchTerms = 4096
    /// …and postings' bytes, at most: a batch's commit (its pages written to the WAL, and the
    /// checkpoint it may start) runs no statement, so it cannot yield to queries (`QueryYield`);
    /// while they are active, batches are smaller.
    static func batchBytes(queriesActive: Bool) -> Int { queriesActive ? 256 << 10 : 4 << 20 }
    /// How far ahead of its `safe_until` a segment is rebuilt.
    static let expiryMargin: TimeInterval = 3600
    /// Documents expiring within this of a build carry `extra` (their row is read when scored).
    static let expiryHorizon: TimeInterval = 7 * 86_400

    /// A thread of its own at background priority (`BackgroundQueue`): settling is CPU work no
    /// query waits for. SCHED_IDLE with `SEARCHLIGHT_BACKGROUND_IDLE=1` (an experiment:
    /// `BackgroundPriority.idlePolicy`); its writes then go through the writer's queue, never
    /// lent to it (`IndexStore.maintenanceWrite`).
    private static let queue = BackgroundQueue(label: "ranked-index", idle: true)
    /// The normal-priority lanes, shared by every store: serial dispatch queues (not the
    /// cooperative pool), so at most one fresh segment and one merge are built at a time in the process.
    private static let freshQueue = DispatchQueue(label: "ranked-fresh")
    private static let mergeQueue = DispatchQueue(label: "ranked-merge")

    private weak var store: IndexStore?
    private let lock = NSLock()
    private var requested: Date?
    /// Whether a query asked (then settling starts at most `maxDeferral` after), or only the
    /// writer (then it waits for the writes to stop, however long a reindex-all runs).
    private var byQuery = false
    /// The fresh lane has a job queued or running.
    private var freshRunning = false
    /// The fresh lane waits for the writes to stop; a new request wakes it at once (`wake`
    /// numbers the waits, so the timer of an earlier one does nothing).
    private var waiting = false
    private var wake = 0
    /// A request came while the fresh lane's turn was running (not waiting): the turn looks again
    /// before it waits, so that request is not lost until the wait's timer (`rankedIndexIdleSeconds`).
    private var askedDuringTurn = false
    /// The merge lane has a job queued or running.
    private var merging = false
    /// The fresh lane found that settling may run (the writes stopped, or a query waited long
    /// enough): the merge lane settles until nothing is left, writes or not.
    private var settleDue = false
    /// Segments being built (inactive until switched in): never taken for an interrupted build's.
    private var inFlight: Set<Int64> = []
    private var builds = 0
    private var lastError: String?
    /// The fresh lane's last build failed (and none succeeded since): donations are not paced
    /// then (`IndexStore.waitForRankedLag`), since no segment will come to end the wait.
    private var freshFailing = false
    /// Tests: runs in the transaction that reserves a build's segment, after its range is
    /// registered and its id claimed; a throw rolls the reservation back, as a failed commit does.
    private var reservationFault: (@Sendable () throws -> Void)?
    /// Tests: runs in each fresh-lane turn after its tail build, before the lane looks again
    /// whether settling may run (the writes stopping between the two looks).
    private var afterTailBuild: (@Sendable (IndexStore) -> Void)?
    /// Tests: runs on a build's thread after its terms are written, before the transaction that
    /// switches it in (another build of the same rows landing there first).
    private var beforeSwitch: (@Sendable (IndexStore) -> Void)?

    init(store: IndexStore) { self.store = store }

    /// Asks for a build (cheap; does nothing more when one is already asked for or running).
    /// `byQuery`: a query is waiting for it, so writes defer settling by `rankedIndexMaxDeferral` at most.
    func request(byQuery: Bool = true) {
        guard store?.options.rankedIndexBuilds ?? false else { return }
        let start: Bool = lock.withLock {
            if requested == nil { requested = Date() }
            if byQuery { self.byQuery = true }
            if waiting {
                waiting = false
                wake += 1
                return true
            }
            guard !freshRunning else {
                askedDuringTurn = true
                return false
            }
            freshRunning = true
            return true
        }
        if start { Self.freshQueue.async { self.freshLane() } }
    }

    /// Whether a build is asked for and not yet done, and whether a query asked (tests).
    var buildRequest: (asked: Bool, byQuery: Bool) { lock.withLock { (requested != nil, byQuery) } }

    /// The lanes' state, for a test's failure message.
    var laneState: String {
        lock.withLock {
            "requested=\(requested.map { "\(-$0.timeIntervalSinceNow) s ago" } ?? "no") byQuery=\(byQuery) freshRunning=\(freshRunning) "
                + "waiting=\(waiting) wake=\(wake) merging=\(merging) settleDue=\(settleDue) builds=\(builds)"
        }
    }

    /// Segments built since the store opened, and the last failure.
    public var statistics: (builds: Int, lastError: String?) { lock.withLock { (builds, lastError) } }

    /// Whether the fresh lane's builds are failing now (its last one failed).
    var freshBuildsFailing: Bool { lock.withLock { freshFailing } }

    /// Tests: makes every segment reservation run `fault` (nil: none).
    func setReservationFault(_ fault: (@Sendable () throws -> Void)?) { lock.withLock { reservationFault = fault } }

    /// Tests: runs `hook` in every fresh-lane turn (see `afterTailBuild`; nil: none).
    func setAfterTailBuild(_ hook: (@Sendable (IndexStore) -> Void)?) { lock.withLock { afterTailBuild = hook } }

    /// Tests: runs `hook` in every build before its switch (see `beforeSwitch`; nil: none).
    func setBeforeSwitch(_ hook: (@Sendable (IndexStore) -> Void)?) { lock.withLock { beforeSwitch = hook } }

    /// Runs the `beforeSwitch` hook, if any.
    func runBeforeSwitch(_ store: IndexStore) { lock.withLock { beforeSwitch }?(store) }

    /// Called in a reservation's transaction (see `reservationFault`).
    func checkReservationFault() throws {
        try lock.withLock { reservationFault }?()
    }

    /// The segments being built now (for the clean-up of interrupted builds' rows).
    var segmentsInFlight: Set<Int64> { lock.withLock { inFlight } }

    func claim(_ segment: Int64) { lock.withLock { _ = inFlight.insert(segment) } }
    func release(_ segment: Int64) { lock.withLock { _ = inFlight.remove(segment) } }

    /// Whether settling may run now (no client wrote for `idleSeconds`, or a query waited
    /// `maxDeferral`), else how long until the writes may have stopped.
    private func settling(_ store: IndexStore) -> (may: Bool, wait: Double) {
        let quiet = store.secondsSinceClientWrite
        let idle = store.options.rankedIndexIdleSeconds
        if quiet >= idle { return (true, 0) }
        let (since, urgent) = lock.withLock { (requested, byQuery) }
        if urgent, let since, Date().timeIntervalSince(since) >= store.options.rankedIndexMaxDeferral { return (true, 0) }
        return (false, idle - quiet)
    }

    private func recorded(fresh: Bool = false, _ body: () throws(SearchlightError) -> Bool) -> Bool {
        do {
            let did = try body()
            lock.withLock {
                if did { builds += 1 }
                if fresh { freshFailing = false }
            }
            return did
        } catch {
            let first: Bool = lock.withLock {
                lastError = "\(error)"
                defer { if fresh { freshFailing = true } }
                return fresh && !freshFailing
            }
            // Donations waiting for this lane's segments stop waiting: none is coming.
            if first { store?.rankedBuildsFailed() }
            return false
        }
    }

    /// On `freshQueue`: the items above the coverage as segments (all of them once settling
    /// may run), the merge lane started after each, then a wait for the writes to stop.
    private func freshLane() {
        while let store, !store.isClosing {
            lock.withLock { askedDuringTurn = false }
            let settle = settling(store).may
            if store.options.rankedIndexFreshSegments,
               recorded(fresh: true, { () throws(SearchlightError) -> Bool in try store.buildRankedTail(all: settle) }) {
                startMerging()
                // One segment a turn: the lane is shared by every store, so a store whose writes
                // outrun it (one user donating without pause) must not hold it from the others.
                Self.freshQueue.async { self.freshLane() }
                return
            }
            lock.withLock { afterTailBuild }?(store)
            startMerging()
            guard lock.withLock({ requested }) != nil else { break }
            let (may, wait) = settling(store)
            if may {
                // The writes stopped during this turn, after it built the tail as if they went
                // on (full fresh segments only): build the rest of the tail first. The merge
                // lane's settling leaves the items above the coverage to this lane, so handing
                // over now left them unbuilt until the next request, none if no query came
                // (RankedBuildTests' "segments 0, pending 64, builds 0" under load).
                if !settle, store.options.rankedIndexFreshSegments { continue }
                // The tail is built; the merge lane settles the rest.
                lock.withLock { requested = nil; byQuery = false; settleDue = true }
                startMerging()
                break
            }
            // Writes are coming in: look again at the next request, or when they may have stopped.
            let token: Int? = lock.withLock {
                // Asked again during this turn (say, after a failed build, by a write that a
                // working build could now take): look again at once instead of waiting.
                if askedDuringTurn { return nil }
                waiting = true
                wake += 1
                return wake
            }
            guard let token else { continue }
            Self.freshQueue.asyncAfter(deadline: .now() + max(0.001, wait)) {
                let current: Bool = self.lock.withLock {
                    guard self.waiting, self.wake == token else { return false }
                    self.waiting = false
                    return true
                }
                if current { self.freshLane() }
            }
            return
        }
        let again: Bool = lock.withLock {
            freshRunning = requested != nil && !(store?.isClosing ?? true)
            return freshRunning
        }
        if again { Self.freshQueue.async { self.freshLane() } }
    }

    private func startMerging() {
        let start: Bool = lock.withLock {
            guard !merging else { return false }
            merging = true
            return true
        }
        if start { Self.mergeQueue.async { self.mergeLane() } }
    }

    /// On `mergeQueue`: tier merges while writes come in; once settling may run, one settling
    /// step at a time on the background queue, which comes back here.
    private func mergeLane() {
        guard let store, !store.isClosing else { return stopMerging() }
        if !lock.withLock({ settleDue }), !settling(store).may {
            guard store.options.rankedIndexFreshSegments,
                  recorded({ () throws(SearchlightError) -> Bool in try store.buildRankedIndexStep(mode: .fresh) }) else { return stopMerging() }
            Self.mergeQueue.async { self.mergeLane() }
            return
        }
        // Without fresh segments, settling builds the items above the coverage too.
        let mode: RankBuildMode = store.options.rankedIndexFreshSegments ? .settle : .all
        Self.queue.async {
            if self.recorded({ () throws(SearchlightError) -> Bool in try store.buildRankedIndexStep(mode: mode) }) {
                Self.mergeQueue.async { self.mergeLane() }
            } else {
                // A build's term tables and rows are freed by now: give the heap back, so an
                // idle daemon stays small.
                HeapTrimmer.shared.requestTrim()
                self.lock.withLock { self.settleDue = false }
                self.stopMerging()
            }
        }
    }

    private func stopMerging() { lock.withLock { merging = false } }
}

/// Which work a build step may take (`RankMaintainer`).
enum RankBuildMode {
    /// While writes come in: a merge of a full tier of segments. Nothing else.
    case fresh
    /// Everything but the items above the coverage (the fresh lane builds those): clean-ups of
    /// interrupted or replaced builds' rows, rebuilds, settling merges.
    case settle
    /// Everything, the items above the coverage first (absorbing the trailing segments small
    /// next to them): one thread building the whole index.
    case all
}

/// What a build step will do.
enum RankBuildPlan {
    /// Delete the rows of segments no longer active (a replaced one, or an interrupted build's).
    case cleanUp(segment: Int64)
    /// Build a segment of the rowids from `lo`: without `hi`, the items from `lo` on (up to
    /// `rankedIndexSegmentDocs` documents, the replaced trailing segments included); else `lo...hi`.
    case build(lo: Int64, hi: Int64?, replacing: [Int64])
}

extension IndexStore {
    /// Builds the whole ranked index now, whatever the writes (tests, the bench, `check`): the
    /// settled layout. Returns the number of steps taken.
    @discardableResult
    public func buildRankedIndex() throws(SearchlightError) -> Int {
        var steps = 0
        while try buildRankedIndexStep(mode: .all) { steps += 1 }
        return steps
    }

    /// One step of maintenance of the ranked index; false when there is nothing to do.
    func buildRankedIndexStep(mode: RankBuildMode) throws(SearchlightError) -> Bool {
        guard formatVersion >= RankWriter.firstFormat, !isClosing else { return false }
        let now = options.clock().timeIntervalSince1970
        let segmentDocs = options.rankedIndexSegmentDocs
        let busy = rankMaintainer.segmentsInFlight
        let stranded = options.rankedIndexMergesStranded
        let plan = try read { db in
            try db.transaction("DEFERRED") {
                try Self.planRankBuild(db, now: now, segmentDocs: segmentDocs, mode: mode, busy: busy, stranded: stranded)
            }
        }
        return try run(plan, now: now, deleteReplaced: mode != .fresh)
    }

    /// The fresh lane's step: the items above the coverage as a segment of their own, once there
    /// are `freshSegmentDocs` of them (`all`: once there is one); false when there are fewer.
    func buildRankedTail(all: Bool) throws(SearchlightError) -> Bool {
        guard formatVersion >= RankWriter.firstFormat, !isClosing else { return false }
        let now = options.clock().timeIntervalSince1970
        let least = all ? 1 : min(RankMaintainer.freshSegmentDocs, options.rankedIndexSegmentDocs)
        let plan = try read { db -> RankBuildPlan? in
            try db.transaction("DEFERRED") { () throws -> RankBuildPlan? in
                let covered = try RankSnapshot.read(db).covered
                let above = try db.intScalar("SELECT count(*) FROM (SELECT 1 FROM items WHERE rowid > ? LIMIT ?)",
                    [.integer(covered), .integer(Int64(least))])
                return above >= least ? .build(lo: covered + 1, hi: nil, replacing: []) : nil
            }
        }
        return try run(plan, now: now, deleteReplaced: true)
    }

    private func run(_ plan: RankBuildPlan?, now: Double, deleteReplaced: Bool) throws(SearchlightError) -> Bool {
        switch plan {
        case nil:
            return false
        case .cleanUp(let segment)?:
            try deleteSegmentRows(segment)
            return true
        case .build(let lo, let hi, let replacing)?:
            // A merge made while writes come in leaves the rows it replaces to settling.
            try buildSegment(lo: lo, hi: hi, replacing: replacing, now: now, deleteReplaced: deleteReplaced)
            return true
        }
    }

    /// Whether the ranked index is as settling leaves it: every item in a segment in its current
    /// version (no delta), nothing to merge, rebuild or clean up (`admin.status`'s `settled`).
    func isRankedIndexSettled(_ db: Database) throws -> Bool {
        try Self.planRankBuild(db, now: options.clock().timeIntervalSince1970, segmentDocs: options.rankedIndexSegmentDocs,
            mode: .all, busy: rankMaintainer.segmentsInFlight) == nil
    }

    /// What a step of `mode` does next. `busy`: the segments being built now, whose rows are
    /// not an interrupted build's.
    static func planRankBuild(_ db: Database, now: Double, segmentDocs: Int, mode: RankBuildMode = .all,
                              busy: Set<Int64> = [], stranded: Bool = false) throws -> RankBuildPlan? {
        if mode == .fresh { return try planTierMerge(db, segmentDocs: segmentDocs, stranded: stranded) }
        for row in try db.rows("SELECT id FROM rank_segments WHERE active = 0") {
            if let id = row.int(0), !busy.contains(id) { return .cleanUp(segment: id) }
        }
        let snapshot = try RankSnapshot.read(db)
        if mode == .all {
            let above = try db.intScalar("SELECT count(*) FROM (SELECT 1 FROM items WHERE rowid > ? LIMIT ?)",
                [.integer(snapshot.covered), .integer(Int64(segmentDocs))])
            if above > 0 {
                let (lo, replacing) = absorbedTail(snapshot.segments[...], adding: above, segmentDocs: segmentDocs)
                return .build(lo: lo ?? snapshot.covered + 1, hi: nil, replacing: replacing)
            }
        }
        if let s = snapshot.segments.first(where: { $0.needsRebuild(now: now) }) {
            return .build(lo: s.lo, hi: s.hi, replacing: [s.id])
        }
        // Fresh segments (made while writes came in) settle as one build of them would have
        // laid them out: the last segment absorbs the trailing ones as if it were being added.
        if let last = snapshot.segments.last {
            let (lo, replacing) = absorbedTail(snapshot.segments.dropLast(), adding: last.docs, segmentDocs: segmentDocs)
            if let lo { return .build(lo: lo, hi: last.hi, replacing: replacing + [last.id]) }
        }
        if let run = raggedRun(snapshot.segments, segmentDocs: segmentDocs) {
            return .build(lo: run.first!.lo, hi: run.last!.hi, replacing: run.map(\.id))
        }
        // A query scores the rewritten documents one by one, and past `RankedTopK.deltaLimit`
        // of them it leaves the ranked index for the exhaustive SQL. Rewrites (updates, deletes,
        // engagement) spread over large segments can pass that while no segment reaches its own
        // threshold (an eighth of 65 536 documents): then the dirtiest segment is rebuilt, until
        // half the limit is left for the writes to come.
        let dirty = snapshot.segments.reduce(0) { $0 + $1.dirty.count }
        if dirty > RankedTopK.deltaLimit / 2, let s = snapshot.segments.max(by: { $0.dirty.count < $1.dirty.count }), !s.dirty.isEmpty {
            return .build(lo: s.lo, hi: s.hi, replacing: [s.id])
        }
        return nil
    }

    /// The trailing segments a build adding `docs` documents absorbs: those small next to what is
    /// being added, so segment sizes grow geometrically and a document is re-read a few times, not
    /// at every build. Returns the new segment's first rowid (nil: none absorbed) and their ids.
    static func absorbedTail(_ segments: ArraySlice<RankSnapshot.Segment>, adding docs: Int, segmentDocs: Int)
        -> (lo: Int64?, replacing: [Int64])
    {
        var lo: Int64?
        var replacing: [Int64] = []
        var total = docs
        for segment in segments.reversed() {
            guard total + segment.docs <= segmentDocs, segment.docs <= 4 * total else { break }
            lo = segment.lo
            total += segment.docs
            replacing.append(segment.id)
        }
        return (lo, replacing)
    }

    /// Ragged segments anywhere in the layout (not only the trailing ones): when there are more
    /// than `tierWidth` segments beyond what the documents fill (a segment per
    /// `segmentDocs`), the longest run of adjacent segments that fits in one, if it has two or
    /// more. A store stopped mid-settle (or whose merges left small segments between large ones:
    /// 319 segments, 270 of them of 1 000 documents, in a kept 1M state that settling called
    /// settled, since the tail rule only absorbs the last segments) is laid out again; a few
    /// extra segments are left alone, so a small tail is not merged into a large segment at
    /// every settle.
    static func raggedRun(_ segments: [RankSnapshot.Segment], segmentDocs: Int) -> ArraySlice<RankSnapshot.Segment>? {
        let docs = segments.reduce(0) { $0 + $1.docs }
        let needed = (docs + segmentDocs - 1) / max(1, segmentDocs)
        guard segments.count > needed + RankMaintainer.tierWidth else { return nil }
        var best: Range<Int>?
        var start = 0
        while start < segments.count {
            var end = start, total = 0
            while end < segments.count, total + segments[end].docs <= segmentDocs {
                total += segments[end].docs
                end += 1
            }
            end = max(end, start + 1)
            if end - start >= 2, end - start > (best?.count ?? 0) { best = start..<end }
            start = end
        }
        return best.map { segments[$0] }
    }

    /// While writes come in: the last run of `tierWidth` adjacent segments of one tier, merged,
    /// if they fit in one segment. Failing that, the last run of `tierWidth` adjacent segments
    /// holding two or more of its highest tier (`stranded`: `rankedIndexMergesStranded`, off by
    /// default): segments are rowid ranges, so a
    /// fresh segment built while a merge ran lands between that merge's result and the next, and
    /// the same-tier rule alone never takes it (a 64k donation left 17 segments, tiers
    /// 2,0,2,0,2,0,2,0,1,2,1,0,1,1,1,0,1, for the 45 s until settling replaced them: every query
    /// read and scored each). Each merge still takes two segments of its top tier at least, so a
    /// document is rewritten about twice per tier, not at every fresh segment.
    static func planTierMerge(_ db: Database, segmentDocs: Int, stranded: Bool = false) throws -> RankBuildPlan? {
        let segments = try RankSnapshot.read(db).segments
        let width = RankMaintainer.tierWidth
        guard segments.count >= width else { return nil }
        for end in stride(from: segments.count, through: width, by: -1) {
            let run = segments[(end - width)..<end]
            let t = tier(run.first!.docs)
            guard run.allSatisfy({ tier($0.docs) == t }), run.reduce(0, { $0 + $1.docs }) <= segmentDocs else { continue }
            return .build(lo: run.first!.lo, hi: run.last!.hi, replacing: run.map(\.id))
        }
        guard stranded else { return nil }
        for end in stride(from: segments.count, through: width, by: -1) {
            let run = segments[(end - width)..<end]
            let tiers = run.map { tier($0.docs) }
            let top = tiers.max()!
            guard tiers.filter({ $0 == top }).count >= 2, run.reduce(0, { $0 + $1.docs }) <= segmentDocs else { continue }
            return .build(lo: run.first!.lo, hi: run.last!.hi, replacing: run.map(\.id))
        }
        return nil
    }

    /// A segment's size tier: 0 below `freshSegmentDocs × tierWidth` documents, then one more
    /// for each factor of `tierWidth`.
    static func tier(_ docs: Int) -> Int {
        let width = RankMaintainer.tierWidth
        var t = 0, bound = RankMaintainer.freshSegmentDocs * width
        while docs >= bound, t < 32 {
            t += 1
            bound *= width
        }
        return t
    }

    private func deleteSegmentRows(_ segment: Int64) throws(SearchlightError) {
        while true {
            let done = Flag()
            // Smaller while queries are active: the commit frees the rows' pages without a statement step.
            let limit = QueryYield.queriesActive ? RankMaintainer.batchTerms / 4 : RankMaintainer.batchTerms
            _ = try maintenanceWrite { store in
                let n = try store.writer.run("""
                    DELETE FROM rank_terms WHERE id IN
                      (SELECT id FROM rank_terms WHERE segment = ?1 LIMIT \(limit))
                    """, [.integer(segment)])
                if n == 0 {
                    try store.writer.run("DELETE FROM rank_segments WHERE id = ? AND active = 0", [.integer(segment)])
                    done.value = true
                }
                return ApplyResult()
            }
            if done.value || isClosing { return }
        }
    }

    /// A build of `range` under segment `id` is over (done, given up, or never reserved): writes
    /// there are no longer recorded for it, and its id may be cleaned up. Outside a transaction,
    /// so that a store whose commits fail still forgets it.
    private func endBuild(_ range: ClosedRange<Int64>, _ id: Int64) {
        _ = try? writeOutsideTransaction { store in
            store.rankWriter.building.removeAll { $0 == range }
            return ApplyResult()
        }
        rankMaintainer.release(id)
    }

    private func buildSegment(lo: Int64, hi: Int64?, replacing: [Int64], now: Double, deleteReplaced: Bool) throws(SearchlightError) {
        // 1. Register the range with the writer and reserve the segment's id.
        let range = lo...(hi ?? Int64.max)
        let segmentDocs = options.rankedIndexSegmentDocs
        let reserved = Flag()
        let segmentID = Counter64()
        do {
            _ = try maintenanceWrite { store in
                let next = try store.writer.intScalar("SELECT coalesce(max(CAST(value AS INTEGER)), 0) FROM meta WHERE key = 'rank_next_segment'")
                let id = Int64(max(next, try store.writer.intScalar("SELECT coalesce(max(id), 0) FROM rank_segments")) + 1)
                try store.writer.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('rank_next_segment', ?)", [.integer(id)])
                try store.writer.run("""
                    INSERT INTO rank_segments(id, lo, hi, docs, tokens, safe_until, max_static, latest_use, active)
                    VALUES (?, ?, ?, 0, 0, 0, 1, NULL, 0)
                    """, [.integer(id), .integer(lo), .integer(hi ?? lo)])
                store.rankWriter.building.append(range)
                // Claimed before the reservation commits, so no clean-up plan can take it for an
                // interrupted build's (the other lane plans from a snapshot that may include it).
                store.rankMaintainer.claim(id)
                segmentID.value = id
                reserved.value = true
                try store.rankMaintainer.checkReservationFault()
                return ApplyResult()
            }
        } catch {
            // The reservation did not commit (its transaction rolled back, or the commit failed)
            // after it had registered the range and claimed the id: both are given back, or every
            // write in the range would be recorded in `rank_dirty` from now on.
            if reserved.value { endBuild(range, segmentID.value) }
            throw error
        }
        guard reserved.value else { return }
        let id = segmentID.value
        defer { endBuild(range, id) }

        // 2. Read and tokenize the items in one snapshot; the terms are sorted and encoded after
        // the reader is back. A store closing meanwhile ends the read within 512 items: on a
        // busy machine a segment's tokenizing at background priority holds the reader that
        // `shutDown` waits for (10 s at most) for seconds.
        let closed = Flag()
        var snapshot: (builder: SegmentBuilder, last: Int64, sequence: Int64)
        do { snapshot = try read { db in
            try db.transaction("DEFERRED") { () throws -> (SegmentBuilder, Int64, Int64) in
                let sequence = Int64(try db.intScalar("SELECT coalesce(max(seq), 0) FROM rank_dirty"))
                let tokenizer = try db.fullTextTokenizer()
                var builder = SegmentBuilder(lo: lo, hi: hi ?? lo, horizon: now + RankMaintainer.expiryHorizon)
                var last = lo - 1
                let columns = IndexStore.ftsColumnList
                let tail = "items.ranking_hint, items.last_used, items.engagement, items.expires, items.related IS NOT NULL"
                let sql = hi == nil
                    ? "SELECT rowid, \(columns), \(tail) FROM items WHERE rowid >= ? ORDER BY rowid LIMIT \(segmentDocs)"
                    : "SELECT rowid, \(columns), \(tail) FROM items WHERE rowid >= ? AND rowid <= \(hi!) ORDER BY rowid"
                let n = Int32(Schema.ftsColumns.count)
                var read = 0
                var yieldPoint = QueryYield.Point()
                try db.forEachRow(sql, [.integer(lo)]) { s in
                    read += 1
                    yieldPoint.check()
                    if read % 512 == 0, isClosing {
                        closed.value = true
                        throw SearchlightError(.indexUnavailable, "the index is closing")
                    }
                    let rowid = s.int64(0)
                    let doc = RankedDocument(rowid: rowid, columns: (1...n).map { s.string($0) },
                        boosts: BM25.Boosts(rankingHint: s.double(n + 1), lastUsed: s.double(n + 2), engagement: s.double(n + 3) ?? 0),
                        expires: s.double(n + 4) ?? 0, hasRelated: s.int64(n + 5) != 0)
                    builder.add(doc, tokenizer: tokenizer)
                    last = rowid
                }
                return (builder, last, sequence)
            }
        } } catch {
            if closed.value { return }
            throw error
        }
        guard !isClosing else { return }
        // In place: a second reference would keep every term's raw postings alive through finish().
        var content = snapshot.builder.finish()
        if hi == nil { content.hi = max(snapshot.last, lo) }
        let sequence = snapshot.sequence

        // 3. Write the terms under the inactive id, in batches.
        var start = 0
        while start < content.terms.count {
            guard !isClosing else { return }
            var end = start, bytes = 0
            let budget = RankMaintainer.batchBytes(queriesActive: QueryYield.queriesActive)
            while end < content.terms.count, end - start < RankMaintainer.batchTerms, end == start || bytes < budget {
                bytes += content.terms[end].postings.count + content.terms[end].term.count
                end += 1
            }
            let batch = content.terms[start..<end]
            let alive = Flag()
            _ = try maintenanceWrite { store in
                guard try store.writer.scalar("SELECT 1 FROM rank_segments WHERE id = ? AND active = 0", [.integer(id)]) != nil else {
                    return ApplyResult()  // emptied meanwhile (deleteAll, a full-text rebuild): give up
                }
                let insert = try store.writer.statement("INSERT INTO rank_terms(segment, term, docs, column_docs, postings) VALUES (?, ?, ?, ?, ?)")
                for t in batch {
                    try insert.bind([.integer(id), .blob(t.term), .integer(Int64(t.docs)), .integer(Int64(t.columnDocs)), .blob(t.postings)])
                    try insert.run()
                }
                alive.value = true
                return ApplyResult()
            }
            guard alive.value else { return }
            start = end
        }

        // 4. Switch it in. The segments it replaces lose their rows only if it did.
        rankMaintainer.runBeforeSwitch(self)
        let switched = Flag()
        _ = try maintenanceWrite { store in
            let w = store.writer
            guard try w.scalar("SELECT 1 FROM rank_segments WHERE id = ? AND active = 0", [.integer(id)]) != nil else { return ApplyResult() }
            for r in replacing {
                guard try w.scalar("SELECT 1 FROM rank_segments WHERE id = ? AND active = 1", [.integer(r)]) != nil else {
                    return ApplyResult()  // the index changed under the build: its rows are cleaned up later
                }
            }
            // No rowid is in two active segments: a query would score its item twice and count
            // it twice in the statistics. The lanes never build the same rows at once, but
            // `buildRankedIndex` plans from its own snapshot beside them: the fresh lane and it
            // can both build the items above the coverage, and the later switch would make two
            // active segments of them. The later one gives way (its rows are cleaned up later;
            // what no active segment holds stays in the delta until the next build).
            let overlapping = try w.rows("SELECT id FROM rank_segments WHERE active = 1 AND lo <= ? AND hi >= ?",
                [.integer(content.hi), .integer(lo)]).compactMap { $0.int(0) }
            guard overlapping.allSatisfy(replacing.contains) else { return ApplyResult() }
            try w.run("""
                UPDATE rank_segments SET hi = ?, docs = ?, tokens = ?, safe_until = ?, max_static = ?, latest_use = ?, active = 1
                WHERE id = ?
                """, [.integer(content.hi), .integer(Int64(content.docs)), .integer(content.tokens),
                      .double(content.safeUntil.isFinite ? content.safeUntil : Double.greatestFiniteMagnitude),
                      .double(content.maxStatic), content.latestUse.map(SQLValue.double) ?? .null, .integer(id)])
            for r in replacing { try w.run("UPDATE rank_segments SET active = 0 WHERE id = ?", [.integer(r)]) }
            try w.run("DELETE FROM rank_dirty WHERE rowid >= ? AND rowid <= ? AND seq <= ?",
                [.integer(lo), .integer(content.hi), .integer(sequence)])
            if content.hi > store.rankWriter.covered { try store.rankWriter.setCovered(content.hi, w) }
            switched.value = true
            return ApplyResult()
        }
        // A build that gave way leaves the segments it meant to replace active, with their rows.
        if deleteReplaced, switched.value { for r in replacing { try deleteSegmentRows(r) } }
    }
}

extension RankSnapshot.Segment {
    /// Rebuilt when many of its documents were rewritten since, or before its `safeUntil`.
    func needsRebuild(now: Double) -> Bool {
        dirty.count >= max(RankMaintainer.dirtyRebuildThreshold, docs / 8) || now >= safeUntil - RankMaintainer.expiryMargin
    }
}

private final class Flag: @unchecked Sendable {
    var value = false
}

private final class Counter64: @unchecked Sendable {
    var value: Int64 = 0
}
