import Foundation

/// The on-disk layout of one index file (one SQLite database per bundle and index name).
///
/// Text attributes live in their own columns of `items` so that the FTS5 table can use `items`
/// as its external content (text is stored once). Array text attributes are joined with U+001F.
/// `aux` is the auxiliary column (`TextAnalysis.auxiliaryDocument` of all text attributes): CJK
/// bigrams, so that a substring of CJK characters is found through the full-text index, and the
/// pieces of camelCase and letter/digit compound words, so that `t` predicates are too (the name
/// predates the pieces). Every other attribute is in `attrs`, a JSON
/// object in *storage form*: dates as Unix seconds (numbers); custom attributes under `custom`, with
/// the names of date-valued custom attributes listed in `customDates`.
public enum Schema {
    /// The store format this build writes. Files with an older version are migrated (issue 4):
    /// rebuilt into a shadow file of this format, which then replaces them, unless only tables
    /// were added since (`needsRebuild`).
    ///
    /// - 1: the first format.
    /// - 2: the FTS5 table kept prefix indexes (`prefix='2 3 4'`), so that a prefix term (`pars*`)
    ///   read one doclist instead of merging one per matching word.
    /// - 3: the prefix indexes withdrawn. Measured with `searchlight-bench --scenarios store` on
    ///   the shared corpus, they made the store's inserts take twice as long (in-process at 0.34x
    ///   the raw FTS5 insert instead of 0.69x; `prefix='3'` alone 0.50x) and the file 77 % larger,
    ///   for prefix queries 10-45 % faster that met their targets without them
    ///   (Docs/Performance.md, "Store formats").
    /// - 4: the ranked index (`rankTables`, SearchlightStore/Ranked): segments of per-term posting
    ///   lists with bm25 bounds, derived from the items and built lazily, beside the full-text
    ///   index. A file of format 1 or 3 gets the (empty) tables when opened and is relabelled: the
    ///   index is built from the items already there, so no reindex-all is needed. The version is
    ///   raised all the same, so that an older build, which would write without marking what the
    ///   ranked index must re-read, refuses the file instead of leaving the index stale.
    ///
    /// - 5: the vectors of semantic search (`vectorTables`, issue 18): one int8 vector per item,
    ///   written in the transaction that writes its text when the store has an encoder. A file of
    ///   format 1, 3 or 4 gets the (empty) table when opened; the vectors of its items are filled
    ///   in the background (`IndexStore.fillMissingVectors`), so no reindex-all is needed.
    ///
    /// - 6: the ranked index's postings record *which* text columns hold a term (a 7-bit mask),
    ///   where 4 and 5 recorded how many, so a column filter (`title == "pars*"`) is applied from
    ///   them and a `query.search` page walks a prefix's documents in rowid order
    ///   (`RankedPageWalk`). A file of format 4 or 5 has its ranked tables emptied when opened
    ///   (`upgradeInPlace(from:)`): the index is derived data, rebuilt in the background from the
    ///   items as after a recovery, and queries take the exhaustive FTS5 path until it is. The
    ///   version is raised so that an older build, which would misread the new postings, refuses
    ///   the file.
    ///
    /// Every format has the same `items` and `fts` columns, so an older file is read and written by
    /// the same SQL while it waits for its migration. Formats 1 and 3 need none (`needsRebuild`).
    public static let formatVersion = 6

    /// The oldest format this build opens (and migrates).
    public static let oldestReadableFormat = 1

    /// The FTS5 columns, in order. `aux` is last.
    public static let ftsColumns = [
        "title", "displayName", "alternateNames", "contentDescription", "textContent", "keywords", "authorNames", "aux",
    ]

    /// Whether a file of `format` must be rebuilt (migrated) to become this build's format. One
    /// whose full-text table is this build's (formats 1 and 3) is upgraded in place when it is
    /// opened (`upgradeInPlace`): a rebuild would cost a reindex-all for tables that start empty.
    public static func needsRebuild(from format: Int) -> Bool {
        format < formatVersion && ftsOptions(format: format) != ftsOptions(format: formatVersion)
    }

    /// What turns a file of `format`, older, that needs no rebuild into this build's format. A
    /// ranked index of format 4 or 5 is dropped (its postings lack the column masks) and the empty
    /// tables made again: `meta.rank_covered` 0 makes every item pending until a build.
    static func upgradeInPlace(from format: Int) -> String {
        let dropRanked = (4...5).contains(format) ? """
            DROP INDEX IF EXISTS rank_terms_key; DROP TABLE IF EXISTS rank_terms; DROP TABLE IF EXISTS rank_segments;
            DROP TABLE IF EXISTS rank_dirty; DELETE FROM meta WHERE key LIKE 'rank_%';

            """ : ""
        return dropRanked + rankTables + vectorTables + "PRAGMA user_version=\(formatVersion);"
    }

    /// The schema of this build's format.
    public static var create: String { create(format: formatVersion) }

    /// The schema each format's build made, exactly: the full-text table's options are all that
    /// differ. Tests make files of older formats with it.
    public static func create(format: Int) -> String {
        createTemplate.replacingOccurrences(of: "$FTS_OPTIONS", with: ftsOptions(format: format))
            + (format >= 4 ? rankTables : "") + (format >= 5 ? vectorTables : "")
    }

    private static func ftsOptions(format: Int) -> String { format == 2 ? ", prefix='2 3 4'" : "" }

    /// SQL that turns a file of this build's format into one of an older `format`, the way that
    /// build made it (the full-text table recreated with that format's options and rebuilt, the
    /// version set): tests make old files with it.
    public static func rewrite(toFormat format: Int) -> String {
        """
        DROP TABLE fts_vocab; DROP TABLE fts_vocab_col; DROP TABLE fts;
        DROP INDEX IF EXISTS rank_terms_key; DROP TABLE IF EXISTS rank_terms; DROP TABLE IF EXISTS rank_segments; DROP TABLE IF EXISTS rank_dirty;
        DROP TABLE IF EXISTS item_vectors;
        DELETE FROM meta WHERE key LIKE 'rank_%';
        \(create(format: format))
        INSERT INTO fts(fts) VALUES ('rebuild');
        PRAGMA user_version=\(format);
        """
    }

    /// The full-text rows are written by `IndexStore` itself on every path (donation, update,
    /// delete, cascade, purge), not by triggers: an FTS5 insert fired by a trigger runs in a
    /// statement savepoint, which makes FTS5 flush its pending segment on every row — measured
    /// 2.2x slower on the shared corpus (16k vs 35k rows/s).
    private static let createTemplate = """
        CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS items(
            rowid INTEGER PRIMARY KEY,
            uid TEXT NOT NULL UNIQUE,
            domain TEXT,
            expires REAL NOT NULL,
            related TEXT,
            title TEXT, displayName TEXT, alternateNames TEXT, contentDescription TEXT,
            textContent TEXT, keywords TEXT, authorNames TEXT, aux TEXT,
            attrs TEXT NOT NULL,
            ranking_hint REAL,
            last_used REAL,
            engagement REAL NOT NULL DEFAULT 0,
            checksum INTEGER NOT NULL
        );
        CREATE INDEX IF NOT EXISTS items_domain ON items(domain) WHERE domain IS NOT NULL;
        CREATE INDEX IF NOT EXISTS items_expires ON items(expires);
        CREATE INDEX IF NOT EXISTS items_related ON items(related) WHERE related IS NOT NULL;
        CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
            title, displayName, alternateNames, contentDescription, textContent, keywords, authorNames, aux,
            content='items', content_rowid='rowid',
            tokenize='unicode61 remove_diacritics 2'$FTS_OPTIONS
        );
        CREATE VIRTUAL TABLE IF NOT EXISTS fts_vocab USING fts5vocab(fts, row);
        CREATE VIRTUAL TABLE IF NOT EXISTS fts_vocab_col USING fts5vocab(fts, col);
        CREATE TABLE IF NOT EXISTS engagement(
            kind TEXT NOT NULL, key TEXT NOT NULL, count REAL NOT NULL, last REAL NOT NULL,
            PRIMARY KEY(kind, key)
        ) WITHOUT ROWID;
        """
}

extension Schema {
    /// The ranked index (format 4; SearchlightStore/Ranked, Docs/Architecture.md "Ranked
    /// retrieval"), derived from `items` like the full-text index but built lazily, off the
    /// donation path:
    ///
    /// - `rank_segments`: one row per segment, a contiguous range of item rowids `lo...hi` read at
    ///   one moment: its documents, their tokens (bm25's D summed), `safe_until` (every document
    ///   without the `extra` flag expires after it), the largest boost of its documents
    ///   (`max_static`, `latest_use`) and `active` (0 while it is written, or retired and waiting
    ///   to be deleted). Active segments cover the rowids 1 to the
    ///   `rank_covered` value of `meta` without gap or overlap.
    /// - `rank_terms`: per segment and term (FTS5's token, bytes), the documents that hold it, the
    ///   completions' weight (`column_docs`, documents counted once per text column) and the
    ///   posting list (`PostingListFormat`). A rowid table with an index on the key, not a
    ///   WITHOUT ROWID table: an index b-tree compares a search key with a whole cell, so a large
    ///   posting list in the key's b-tree was read in full at every comparison (a miss among
    ///   the prefix lists cost 40 µs, a hit on "lib" 200 µs, measured).
    /// - `rank_dirty`: rowids at or below `rank_covered` (or in a segment being built) written since
    ///   their segment read them: the writer adds them in the same transaction as the write, and
    ///   queries read these items, and the ones above `rank_covered`, from `items` itself.
    static let rankTables = """
        CREATE TABLE IF NOT EXISTS rank_segments(
            id INTEGER PRIMARY KEY, lo INTEGER NOT NULL, hi INTEGER NOT NULL, docs INTEGER NOT NULL,
            tokens INTEGER NOT NULL, safe_until REAL NOT NULL, max_static REAL NOT NULL, latest_use REAL,
            active INTEGER NOT NULL
        );
        CREATE TABLE IF NOT EXISTS rank_terms(
            id INTEGER PRIMARY KEY, segment INTEGER NOT NULL, term BLOB NOT NULL, docs INTEGER NOT NULL,
            column_docs INTEGER NOT NULL, postings BLOB NOT NULL
        );
        CREATE INDEX IF NOT EXISTS rank_terms_key ON rank_terms(segment, term, docs, column_docs);
        CREATE TABLE IF NOT EXISTS rank_dirty(rowid INTEGER PRIMARY KEY, seq INTEGER NOT NULL);

        """
}

extension Schema {
    /// Semantic search's vectors (format 5; `VectorTable`, Docs/SemanticSearch.md): the item's
    /// rowid and its `QuantizedVector` BLOB (384 int8 codes, a scale, whether the transformer
    /// made it). Every path that deletes an item deletes its row in the same transaction.
    static let vectorTables = """
        CREATE TABLE IF NOT EXISTS item_vectors(rowid INTEGER PRIMARY KEY, vector BLOB NOT NULL);

        """

    /// The stamp of the committed vectors (`VectorStamp`), made when a store with `item_vectors`
    /// opens: in `meta`, a random identity made once with the file (`vectorIdentity`; a migration
    /// does not copy it) and an epoch (`vectorEpoch`) that every transaction writing
    /// `item_vectors` moves before it commits (`IndexStore.bumpVectorEpochIfTouched`). A saved
    /// vector index is used only at the stamp it was saved at.
    ///
    /// Not triggers on `item_vectors`: with them (one UPDATE of `meta` per row) a donation of 50 000
    /// items through the release daemon took 2.67–3.14 s instead of 2.17–2.36 s (load 5–6), and
    /// 4.2–5.6 instead of 3.2–3.4 s (load 7–10), where the sqlite3 shell's plain INSERTs had
    /// shown ~1 µs a row.
    static let vectorStamp = """
        INSERT OR IGNORE INTO meta(key, value) VALUES ('vectorIdentity', randomblob(16)), ('vectorEpoch', 0);
        """
}

/// A value bound to or read from SQLite.
public enum SQLValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case double(Double)
    case text(String)
    case blob([UInt8])
}
