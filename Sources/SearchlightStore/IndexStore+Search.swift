import CSQLite
import Foundation
import SearchlightWire

/// A compiled query (from `QueryCompiler.plan` or `QueryFront`): a boolean SQL condition over
/// `items` with its bindings, and optionally the full-text expression that drives the search.
public struct SQLFilter: Sendable {
    /// The exact condition, on its own: a filter without `ftsMatch` is answered by it alone.
    public var sql: String
    public var bindings: [SQLValue]
    /// An FTS5 expression that every item satisfying `sql` matches, or nil. When set, a search
    /// walks the full-text index in rowid order and checks `sql` on each candidate, so a page
    /// stops after its last row instead of after every match.
    public var ftsMatch: String?
    /// `ftsMatch` as one structured term, when it is one word (whole or prefix) in one column:
    /// then a page can walk the ranked index's postings instead of FTS5 (`RankedPageWalk`).
    public var driverTerm: FullTextTerm?

    public init(sql: String, bindings: [SQLValue], ftsMatch: String? = nil) {
        self.sql = sql
        self.bindings = bindings
        self.ftsMatch = ftsMatch
    }
    public static let all = SQLFilter(sql: "1", bindings: [])
}

/// One FTS5 phrase of a single word: `column : "word"`, with ` *` for a prefix.
public struct FullTextTerm: Sendable, Equatable {
    /// The FTS5 column (`Schema.ftsColumns`, never `aux`).
    public var column: String
    /// The word as the query wrote it: FTS5's tokenizer folds it.
    public var word: String
    public var prefix: Bool

    /// The FTS5 query it stands for, as `QueryCompiler.ftsQuery` writes it.
    var ftsQuery: String { "\(column) : " + TextAnalysis.ftsQuoted(word) + (prefix ? " *" : "") }
}

extension IndexStore {
    /// Visible = not expired, and not related to an expired item (it lives and dies with it).
    /// Takes two bindings: now, now.
    static let visible = """
        items.expires > ? AND (items.related IS NULL OR NOT EXISTS \
        (SELECT 1 FROM items r WHERE r.uid = items.related AND r.expires <= ?))
        """

    /// One page of items matching `filter`, in a stable order (insertion), resuming after `cursor`.
    /// With a `budget`, the search stops (`cancelled`) at its deadline or when its client is gone.
    public func search(
        _ filter: SQLFilter, fetch: [String]? = nil, limit: Int = 1000, cursor: String? = nil, budget: QueryBudget? = nil
    ) throws(SearchlightError) -> SearchPage {
        let after = try Self.cursorRowID(cursor)
        let now = options.clock().timeIntervalSince1970
        let fetchSet = fetch.map(Set.init)
        let columns = ItemRecord.selectColumns(fetch: fetchSet)
        let rows = try read(budget: budget) { db in
            var rows: [Row] = []
            try pageRows(filter, after: after, now: now, count: limit + 1, columns: columns, db) { rows.append($0.row()) }
            return rows
        }
        var items: [JSONValue] = []
        items.reserveCapacity(min(rows.count, limit))
        for row in rows.prefix(limit) {
            items.append(ItemRecord(row: row, offset: 1, fetch: fetchSet).wireItem(fetch: fetchSet))
        }
        let next = rows.count > limit ? rows[limit - 1].int(0).map(String.init) : nil
        return SearchPage(items: items, cursor: next)
    }

    /// `search`'s page with its items written as JSON straight from the rows (`WireItemWriter`),
    /// appended to `items`: what the daemon answers. Same items, same cursor.
    public func search(
        _ filter: SQLFilter, fetch: [String]? = nil, limit: Int = 1000, cursor: String? = nil, budget: QueryBudget? = nil,
        into items: inout EncodedItems
    ) throws(SearchlightError) -> String? {
        let after = try Self.cursorRowID(cursor)
        let now = options.clock().timeIntervalSince1970
        let fetchSet = fetch.map(Set.init)
        let writer = WireItemWriter(fetch: fetchSet)
        let columns = ItemRecord.selectColumns(fetch: fetchSet)
        return try read(budget: budget) { db in
            var written = 0
            var last: Int64 = 0
            var more = false
            try pageRows(filter, after: after, now: now, count: limit + 1, columns: columns, db) { s in
                guard written < limit else { more = true; return }
                last = s.int64(0)
                items.append { writer.write(s, offset: 1, to: &$0) }
                written += 1
            }
            return more ? String(last) : nil
        }
    }

    /// Calls `body` with the statement of each of the first `count` rows of the page after
    /// `after` (`items.rowid`, then `columns`), in rowid order. A one-term driver walks the ranked
    /// index's postings (`RankedPageWalk`) and checks each document with the exact condition, so the
    /// walk stops at the page's last row; anything else, or where the walk cannot go on, runs
    /// `searchStatement` (FTS5 in rowid order). Same rows either way.
    func pageRows(_ filter: SQLFilter, after: Int64, now: Double, count: Int, columns: String, _ db: Database,
                  _ body: (Statement) throws -> Void) throws {
        func fts(from: Int64, count: Int) throws {
            let (sql, bindings) = Self.searchStatement(filter, after: from, now: now, limit: count, columns: columns)
            try db.forEachRow(sql, bindings, body)
        }
        // Whole words walk when their list is kept by the connection (`PostingListCache.walksWholeWord`),
        // or always with `StoreOptions.rankedPagesForWholeWords`; else FTS5, in the transaction.
        guard let term = filter.driverTerm, formatVersion >= RankWriter.firstFormat, count > 0 else {
            return try fts(from: after, count: count)
        }
        // One read transaction: the snapshot of the ranked index, its postings, the candidates'
        // rows and any FTS5 hand-over see the same state of the file (and SQLite takes its read
        // lock once, not once per statement).
        try db.transaction("DEFERRED") {
            guard var walk = try RankedPageWalk(db: db, store: self, term: term, after: after) else {
                pageWalks.record(walked: false, takenOver: false)
                return try fts(from: after, count: count)
            }
            // The candidates are checked a batch at a time, as many as rows are still wanted (a
            // first page's candidates nearly all match, so usually one batch): one run of one
            // statement over a JSON array of their rowids, in the walk's order (the CROSS JOIN
            // keeps `json_each` the outer loop, which yields the array in order). One statement
            // run per candidate cost SQLite's reset and halt (its cursors closed and opened
            // again), about 3 000 instructions a candidate, a fifth of a prefix page.
            let check = try db.statement("""
                SELECT items.rowid, \(columns) FROM json_each(?) AS candidate CROSS JOIN items ON items.rowid = candidate.value
                WHERE \(Self.visible) AND (\(filter.sql))
                """)
            defer { check.reset() }
            // The query's values bound once: a reset keeps them, so each batch binds its rowids only.
            try check.bind([.double(now), .double(now)] + filter.bindings, from: 2)
            var wanted = count
            var candidates = 0
            var batch = CandidateBatch()
            /// Runs the batch; true when the page is full.
            func runBatch(_ batch: inout CandidateBatch) throws -> Bool {
                defer { batch.removeAll() }
                check.rewind()
                try batch.bind(to: check, at: 1)
                while try check.step() {
                    try body(check)
                    wanted -= 1
                    if wanted == 0 { return true }
                }
                return false
            }
            while true {
                switch try walk.next() {
                case .candidate(let rowid):
                    candidates += 1
                    batch.append(rowid)
                    // Never more than the rows wanted: every candidate taken is one the page needed to look at.
                    guard batch.count >= wanted, try runBatch(&batch) else { continue }
                    _ = walk.finish(.end)
                    pageWalks.record(walked: true, takenOver: false, candidates: candidates)
                    return
                case .end:
                    if batch.count > 0 { _ = try runBatch(&batch) }
                    pageWalks.record(walked: true, takenOver: false, candidates: candidates)
                    return
                case .sqlFrom(let rowid):
                    // Every candidate so far lies at or below `rowid`: checked first, in order.
                    if batch.count > 0, try runBatch(&batch) {
                        pageWalks.record(walked: true, takenOver: true, candidates: candidates)
                        return
                    }
                    pageWalks.record(walked: true, takenOver: true, candidates: candidates)
                    check.reset()
                    return try fts(from: rowid, count: wanted)
                }
            }
        }
    }

    static func cursorRowID(_ cursor: String?) throws(SearchlightError) -> Int64 {
        guard let cursor else { return 0 }
        guard let v = Int64(cursor), v >= 0 else {
            throw SearchlightError(.invalidParams, "\"cursor\" must be the cursor string of a previous page")
        }
        return v
    }

    /// The statement behind `search`: rows of `items.rowid` then `ItemRecord.selectColumns`.
    /// With a driver, FTS5 is the outer loop (`CROSS JOIN` fixes the order) and hands rows over in
    /// rowid order, honouring `rowid > after` itself, so no sort is needed and LIMIT stops the walk.
    static func searchStatement(_ filter: SQLFilter, after: Int64, now: Double, limit: Int, columns: String = ItemRecord.selectColumns)
        -> (sql: String, bindings: [SQLValue])
    {
        let tail: [SQLValue] = [.double(now), .double(now)] + filter.bindings + [.integer(Int64(limit))]
        guard let match = filter.ftsMatch else {
            let sql = """
                SELECT items.rowid, \(columns) FROM items
                WHERE items.rowid > ? AND \(Self.visible) AND (\(filter.sql))
                ORDER BY items.rowid LIMIT ?
                """
            return (sql, [.integer(after)] + tail)
        }
        let sql = """
            SELECT items.rowid, \(columns) FROM fts CROSS JOIN items ON items.rowid = fts.rowid
            WHERE fts MATCH ? AND fts.rowid > ? AND \(Self.visible) AND (\(filter.sql))
            ORDER BY fts.rowid LIMIT ?
            """
        return (sql, [.text(match), .integer(after)] + tail)
    }

    /// Items by identifier (for tests, the CLI and extensions' lookups); missing ones are skipped.
    public func items(withIdentifiers ids: [String]) throws(SearchlightError) -> [JSONValue] {
        let now = options.clock().timeIntervalSince1970
        return try read { db in
            try ids.compactMap { id in
                try db.rows("SELECT \(ItemRecord.selectColumns) FROM items WHERE uid = ? AND \(Self.visible)",
                    [.text(id), .double(now), .double(now)]).first.map { ItemRecord(row: $0).wireItem() }
            }
        }
    }

    /// The client state stored by the last successful batch, or nil.
    public func clientState() throws(SearchlightError) -> [UInt8]? {
        try read { db in try storedClientState(db) }
    }

    public func summary() throws(SearchlightError) -> IndexSummary {
        let state = try clientState()
        var st = stat()
        var bytes: Int64 = 0
        for suffix in ["", "-wal"] + Self.vectorSideFileSuffixes where stat(path + suffix, &st) == 0 { bytes += Int64(st.st_size) }
        var ranked: RankedIndexSummary?
        if formatVersion >= RankWriter.firstFormat {
            ranked = try read { db in
                let snapshot = try RankSnapshot.read(db)
                let above = try db.intScalar("SELECT count(*) FROM items WHERE rowid > ?", [.integer(snapshot.covered)])
                let rewritten = snapshot.dirty.filter { $0 <= snapshot.covered }.count
                let stats = rankMaintainer.statistics
                return RankedIndexSummary(segments: snapshot.segments.count, items: snapshot.segments.reduce(0) { $0 + $1.docs },
                    pending: above + rewritten, builds: stats.builds, lastError: stats.lastError,
                    settled: try isRankedIndexSettled(db))
            }
        }
        var summary = IndexSummary(itemCount: count, fileBytes: bytes, formatVersion: formatVersion, hasClientState: state != nil,
            rankedIndex: ranked)
        (summary.vectors, summary.refined) = try vectorCounts()
        return summary
    }

    /// Runs SQLite's and FTS5's own integrity checks. With `repair`, a damaged full-text index is
    /// rebuilt from the items (the items table is the source of truth) and checked again.
    public func check(repair: Bool) throws(SearchlightError) -> CheckReport {
        var problems: [String] = []
        var repaired: [String] = []
        let quick = try read { db in try db.rows("PRAGMA quick_check(20)").compactMap { $0.string(0) } }
        let tablesOK = quick == ["ok"]
        if !tablesOK { problems += quick.map { "quick_check: \($0)" } }
        if var ftsProblem = try fullTextProblem() {
            if repair, tablesOK {
                _ = try writeSync { store in
                    try store.writer.execute("INSERT INTO fts(fts) VALUES ('rebuild')")
                    try store.rankWriter.clear(store.writer)
                    return ApplyResult()
                }
                if let remaining = try fullTextProblem() {
                    ftsProblem = remaining
                } else {
                    repaired.append("rebuilt the full-text index from the items (it said: \(ftsProblem))")
                    ftsProblem = ""
                }
            }
            if !ftsProblem.isEmpty { problems.append("full-text index: \(ftsProblem)") }
        }
        if problems.isEmpty {
            stateLock.withLock { damage = nil }
        } else {
            // Found damage is recovered like damage met by any other call (DESIGN §6).
            markDamaged(DatabaseError(code: SQLITE_CORRUPT, extendedCode: SQLITE_CORRUPT, message: problems.joined(separator: "; "), sql: nil))
        }
        return CheckReport(ok: problems.isEmpty, problems: problems, repaired: repaired)
    }

    /// FTS5's integrity check against the items, or nil when it passes. It is written as an
    /// INSERT (which query-only readers refuse), so the writer runs it; its failure is caught
    /// inside the call so it never fails other calls committed in the same group.
    func fullTextProblem() throws(SearchlightError) -> String? {
        let finding = Finding()
        _ = try writeSync { store in
            do {
                try store.writer.execute("INSERT INTO fts(fts, rank) VALUES ('integrity-check', 1)")
            } catch {
                finding.message = (error as? DatabaseError)?.message ?? "\(error)"
            }
            return ApplyResult()
        }
        return finding.message
    }
}

private final class Finding: @unchecked Sendable {
    var message: String?
}

/// Rowids of a page walk's candidates as the JSON array `pageRows` binds for `json_each`.
struct CandidateBatch {
    private var json: [UInt8] = [UInt8(ascii: "[")]
    private(set) var count = 0

    mutating func append(_ rowid: Int64) {
        if count > 0 { json.append(UInt8(ascii: ",")) }
        count += 1
        // Rowids are positive; written without a `String` per number.
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var v = rowid.magnitude
        if rowid < 0 { json.append(UInt8(ascii: "-")) }
        withUnsafeMutableBytes(of: &digits) { d in
            var n = 0
            repeat {
                d[n] = UInt8(ascii: "0") + UInt8(v % 10)
                v /= 10
                n += 1
            } while v > 0
            while n > 0 {
                n -= 1
                json.append(d[n])
            }
        }
    }

    mutating func removeAll() {
        json.removeSubrange(1...)
        count = 0
    }

    func bind(to statement: Statement, at index: Int32) throws(DatabaseError) {
        var text = json
        text.append(UInt8(ascii: "]"))
        try statement.bindText(text, at: index)
    }
}
