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
    /// rebuilt into a shadow file of this format, which then replaces them.
    ///
    /// - 1: the first format.
    /// - 2: the FTS5 table kept prefix indexes (`prefix='2 3 4'`), so that a prefix term (`pars*`)
    ///   read one doclist instead of merging one per matching word.
    /// - 3: the prefix indexes withdrawn. Measured with `searchlight-bench --scenarios store` on
    ///   the shared corpus, they made the store's inserts take twice as long (in-process at 0.34x
    ///   the raw FTS5 insert instead of 0.69x; `prefix='3'` alone 0.50x) and the file 77 % larger,
    ///   for prefix queries 10-45 % faster that met their targets without them
    ///   (Docs/Performance.md, "Store formats").
    ///
    /// Every format has the same tables and columns, so an older file is read and written by the
    /// same SQL while it waits for its migration. A format-1 file needs none (`needsRebuild`).
    public static let formatVersion = 3

    /// The oldest format this build opens (and migrates).
    public static let oldestReadableFormat = 1

    /// The FTS5 columns, in order. `aux` is last.
    public static let ftsColumns = [
        "title", "displayName", "alternateNames", "contentDescription", "textContent", "keywords", "authorNames", "aux",
    ]

    /// Whether a file of `format` must be rebuilt (migrated) to become this build's format. One
    /// whose schema is this build's exactly (format 1 is format 3's) is only relabelled when it
    /// is opened: a rebuild would cost a reindex-all and change nothing.
    public static func needsRebuild(from format: Int) -> Bool {
        format < formatVersion && create(format: format) != create
    }

    /// The schema of this build's format.
    public static var create: String { create(format: formatVersion) }

    /// The schema each format's build made, exactly: the full-text table's options are all that
    /// differ. Tests make files of older formats with it.
    public static func create(format: Int) -> String {
        createTemplate.replacingOccurrences(of: "$FTS_OPTIONS", with: format == 2 ? ", prefix='2 3 4'" : "")
    }

    /// SQL that turns a file of this build's format into one of an older `format`, the way that
    /// build made it (the full-text table recreated with that format's options and rebuilt, the
    /// version set): tests make old files with it.
    public static func rewrite(toFormat format: Int) -> String {
        """
        DROP TABLE fts_vocab; DROP TABLE fts_vocab_col; DROP TABLE fts;
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

/// A value bound to or read from SQLite.
public enum SQLValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case double(Double)
    case text(String)
    case blob([UInt8])
}
