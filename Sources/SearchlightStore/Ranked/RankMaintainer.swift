import CSQLite
import Foundation
import SearchlightWire

/// Builds the ranked index of one store in the background, segment by segment, off the donation
/// path: donations only record in `rank_dirty` what a built segment must re-read (`RankWriter`),
/// and items above the coverage are read from `items` by queries until a segment holds them.
///
/// A build is asked for by the writer (every `deltaBuildThreshold` donated items) and by queries
/// (a delta of `deltaBuildThreshold` items or more, a segment with many rewritten items or close
/// to its `safe_until`, or no index at all), and starts once no client has written for
/// `idleSeconds` — when a query asked, at most `maxDeferral` after it asked — so a reindex-all or a
/// donation stream nobody searches is never slowed by it. Builds of all stores share one
/// background queue: one at a time in the process.
///
/// One build: the rowid range is registered with the writer (writes there are recorded from
/// then on), the items are read in one read transaction and tokenized with FTS5's tokenizer,
/// the terms written under a new, inactive segment id in batches through the writer queue (a
/// donation waits for one batch at most), then one small transaction switches the segment in,
/// retires the segments it replaces and forgets the recorded writes its snapshot included.
/// Retired segments are deleted in batches afterwards.
public final class RankMaintainer: @unchecked Sendable {
    /// A query whose delta is at least this asks for a build.
    static let deltaBuildThreshold = 64
    /// Rewritten documents that make a segment worth rebuilding: this many, and an eighth of it.
    static let dirtyRebuildThreshold = 64
    /// Terms per write batch.
    static let batchTerms = 4096
    /// How far ahead of its `safe_until` a segment is rebuilt.
    static let expiryMargin: TimeInterval = 3600
    /// Documents expiring within this of a build carry `extra` (their row is read when scored).
    static let expiryHorizon: TimeInterval = 7 * 86_400

    /// A thread of its own at background priority (`BackgroundQueue`): a build is CPU work no query waits for.
    private static let queue = BackgroundQueue(label: "ranked-index")

    private weak var store: IndexStore?
    private let lock = NSLock()
    private var requested: Date?
    /// Whether a query asked (then the build starts at most `maxDeferral` after), or only the
    /// writer (then it waits for the writes to stop, however long a reindex-all runs).
    private var byQuery = false
    private var running = false
    private var builds = 0
    private var lastError: String?

    init(store: IndexStore) { self.store = store }

    /// Asks for a build (cheap; does nothing when one is already asked for or running). `byQuery`:
    /// a query is waiting for it, so writes defer it by `rankedIndexMaxDeferral` at most.
    func request(byQuery: Bool = true) {
        guard store?.options.rankedIndexBuilds ?? false else { return }
        let start: Bool = lock.withLock {
            if requested == nil { requested = Date() }
            if byQuery { self.byQuery = true }
            guard !running else { return false }
            running = true
            return true
        }
        if start { Self.queue.async { self.run() } }
    }

    /// Segments built since the store opened, and the last failure.
    public var statistics: (builds: Int, lastError: String?) { lock.withLock { (builds, lastError) } }

    private func run() {
        while let store, !store.isClosing {
            let (since, urgent) = lock.withLock { (requested, byQuery) }
            guard let since else { break }
            let quiet = store.secondsSinceClientWrite
            if quiet < store.options.rankedIndexIdleSeconds,
               !urgent || Date().timeIntervalSince(since) < store.options.rankedIndexMaxDeferral {
                // Writes are coming in: look again when they may have stopped.
                let wait = store.options.rankedIndexIdleSeconds - quiet
                Self.queue.async(after: wait) { self.run() }
                return
            }
            lock.withLock { requested = nil; byQuery = false }
            do {
                while try store.buildRankedIndexStep() { lock.withLock { builds += 1 } }
            } catch {
                lock.withLock { lastError = "\(error)" }
            }
            // A build's term tables and rows are freed by now: give the heap back, so an idle
            // daemon stays small.
            csqlite_release_heap()
        }
        let again: Bool = lock.withLock {
            running = requested != nil && !(store?.isClosing ?? true)
            return running
        }
        if again { Self.queue.async { self.run() } }
    }
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
    /// Builds the whole ranked index now, whatever the writes (tests, the bench, `check`).
    /// Returns the number of steps taken.
    @discardableResult
    public func buildRankedIndex() throws(SearchlightError) -> Int {
        var steps = 0
        while try buildRankedIndexStep() { steps += 1 }
        return steps
    }

    /// One step of maintenance of the ranked index; false when there is nothing to do.
    func buildRankedIndexStep() throws(SearchlightError) -> Bool {
        guard formatVersion >= RankWriter.firstFormat, !isClosing else { return false }
        let now = options.clock().timeIntervalSince1970
        let segmentDocs = options.rankedIndexSegmentDocs
        let plan = try read { db in
            try db.transaction("DEFERRED") { try Self.planRankBuild(db, now: now, segmentDocs: segmentDocs) }
        }
        switch plan {
        case nil:
            return false
        case .cleanUp(let segment)?:
            try deleteSegmentRows(segment)
            return true
        case .build(let lo, let hi, let replacing)?:
            try buildSegment(lo: lo, hi: hi, replacing: replacing, now: now)
            return true
        }
    }

    static func planRankBuild(_ db: Database, now: Double, segmentDocs: Int) throws -> RankBuildPlan? {
        if let stale = try db.scalar("SELECT id FROM rank_segments WHERE active = 0 LIMIT 1"), case .integer(let id) = stale {
            return .cleanUp(segment: id)
        }
        let snapshot = try RankSnapshot.read(db)
        let above = try db.intScalar("SELECT count(*) FROM (SELECT 1 FROM items WHERE rowid > ? LIMIT ?)",
            [.integer(snapshot.covered), .integer(Int64(segmentDocs))])
        if above > 0 {
            // Absorb trailing segments that are small next to what is being added, so segment
            // sizes grow geometrically and a document is re-read a few times, not at every build.
            var lo = snapshot.covered + 1
            var replacing: [Int64] = []
            var total = above
            for segment in snapshot.segments.reversed() {
                guard total + segment.docs <= segmentDocs, segment.docs <= 4 * total else { break }
                lo = segment.lo
                total += segment.docs
                replacing.append(segment.id)
            }
            return .build(lo: lo, hi: nil, replacing: replacing)
        }
        if let s = snapshot.segments.first(where: { $0.needsRebuild(now: now) }) {
            return .build(lo: s.lo, hi: s.hi, replacing: [s.id])
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

    private func deleteSegmentRows(_ segment: Int64) throws(SearchlightError) {
        while true {
            let done = Flag()
            _ = try maintenanceWrite { store in
                let n = try store.writer.run("""
                    DELETE FROM rank_terms WHERE id IN
                      (SELECT id FROM rank_terms WHERE segment = ?1 LIMIT \(RankMaintainer.batchTerms))
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

    private func buildSegment(lo: Int64, hi: Int64?, replacing: [Int64], now: Double) throws(SearchlightError) {
        // 1. Register the range with the writer and reserve the segment's id.
        let range = lo...(hi ?? Int64.max)
        let segmentDocs = options.rankedIndexSegmentDocs
        let reserved = Flag()
        let segmentID = Counter64()
        _ = try maintenanceWrite { store in
            let next = try store.writer.intScalar("SELECT coalesce(max(CAST(value AS INTEGER)), 0) FROM meta WHERE key = 'rank_next_segment'")
            let id = Int64(max(next, try store.writer.intScalar("SELECT coalesce(max(id), 0) FROM rank_segments")) + 1)
            try store.writer.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('rank_next_segment', ?)", [.integer(id)])
            try store.writer.run("""
                INSERT INTO rank_segments(id, lo, hi, docs, tokens, safe_until, max_static, latest_use, active)
                VALUES (?, ?, ?, 0, 0, 0, 1, NULL, 0)
                """, [.integer(id), .integer(lo), .integer(hi ?? lo)])
            store.rankWriter.building.append(range)
            segmentID.value = id
            reserved.value = true
            return ApplyResult()
        }
        guard reserved.value else { return }
        let id = segmentID.value
        defer {
            _ = try? maintenanceWrite { store in
                store.rankWriter.building.removeAll { $0 == range }
                return ApplyResult()
            }
        }

        // 2. Read and tokenize the items in one snapshot.
        let (content, sequence) = try read { db in
            try db.transaction("DEFERRED") { () throws -> (SegmentContent, Int64) in
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
                try db.forEachRow(sql, [.integer(lo)]) { s in
                    let rowid = s.int64(0)
                    let doc = RankedDocument(rowid: rowid, columns: (1...n).map { s.string($0) },
                        boosts: BM25.Boosts(rankingHint: s.double(n + 1), lastUsed: s.double(n + 2), engagement: s.double(n + 3) ?? 0),
                        expires: s.double(n + 4) ?? 0, hasRelated: s.int64(n + 5) != 0)
                    builder.add(doc, tokenizer: tokenizer)
                    last = rowid
                }
                var content = builder.finish()
                if hi == nil { content.hi = max(last, lo) }
                return (content, sequence)
            }
        }

        // 3. Write the terms under the inactive id, in batches.
        var start = 0
        while start < content.terms.count {
            guard !isClosing else { return }
            let batch = content.terms[start..<min(content.terms.count, start + RankMaintainer.batchTerms)]
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
            start += RankMaintainer.batchTerms
        }

        // 4. Switch it in.
        _ = try maintenanceWrite { store in
            let w = store.writer
            guard try w.scalar("SELECT 1 FROM rank_segments WHERE id = ? AND active = 0", [.integer(id)]) != nil else { return ApplyResult() }
            for r in replacing {
                guard try w.scalar("SELECT 1 FROM rank_segments WHERE id = ? AND active = 1", [.integer(r)]) != nil else {
                    return ApplyResult()  // the index changed under the build: its rows are cleaned up later
                }
            }
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
            return ApplyResult()
        }
        for r in replacing { try deleteSegmentRows(r) }
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
