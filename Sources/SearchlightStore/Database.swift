import CSQLite
import Foundation
import SearchlightWire

/// A SQLite error with the primary and extended result codes and the statement that failed.
public struct DatabaseError: Error, Sendable, CustomStringConvertible {
    public var code: Int32
    public var extendedCode: Int32
    public var message: String
    public var sql: String?

    /// The file is damaged or not a database: the store must be recovered (DESIGN §6).
    public var isCorruption: Bool { code == SQLITE_CORRUPT || code == SQLITE_NOTADB }
    public var isDiskFull: Bool { code == SQLITE_FULL }
    /// A statement stopped by its progress handler (`Database.withBudget`).
    public var isInterrupt: Bool { code == SQLITE_INTERRUPT }

    /// SQLite refused the statement for its size, not for the file: an expression deeper than
    /// 1000, too many variables or terms, a pattern too complex. The query's fault (invalidQuery),
    /// never the index's.
    public var isQueryTooLarge: Bool {
        guard code == SQLITE_ERROR || code == SQLITE_TOOBIG else { return false }
        let m = message.lowercased()
        return ["too large", "too many", "too big", "too long", "too complex", "stack overflow", "at most "].contains { m.contains($0) }
    }

    public var description: String {
        var s = "SQLite error \(extendedCode): \(message)"
        if let sql { s += " (in: \(sql.prefix(120)))" }
        return s
    }
}

/// One SQLite connection, used by one thread at a time (the caller guarantees it). A small
/// GRDB-shaped wrapper: `execute`, cached prepared statements, typed rows, transactions.
public final class Database {
    public let path: String
    let handle: OpaquePointer
    private var cache: [String: Statement] = [:]
    private var isClosed = false
    /// FTS5's tokenizer on this connection, made on first use (`fullTextTokenizer()`).
    private var tokenizer: FullTextTokenizer?
    /// Scratch arrays of the ranked index's unions on this connection.
    private(set) lazy var unionScratch = UnionScratchPool()
    /// Parsed posting lists kept across reads on a store's reader connections (nil elsewhere:
    /// a connection that writes would not see its own commits in `PRAGMA data_version`).
    var postingCache: PostingListCache?

    public init(path: String, readOnly: Bool = false, busyTimeoutMilliseconds: Int32 = 10_000) throws(DatabaseError) {
        self.path = path
        BlockingCheck.blocking("SQLite open")
        var db: OpaquePointer?
        let flags = (readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE))
            | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(db)
            throw DatabaseError(code: rc & 0xFF, extendedCode: rc, message: message, sql: nil)
        }
        handle = db
        sqlite3_busy_timeout(db, busyTimeoutMilliseconds)
        sqlite3_extended_result_codes(db, 1)
    }

    deinit { close() }

    /// Bytes in this connection's page cache (the caller owns the connection, as for every use).
    var pageCacheBytes: Int { isClosed ? 0 : Int(csqlite_cache_used(handle)) }

    /// Closes the connection now (idempotent); it must not be used afterwards. The owner calls it
    /// when the file is about to be moved: SQLite deletes `<path>-wal` by name when the last
    /// connection closes, which must never hit the file that replaced it.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        cache.removeAll()
        tokenizer = nil  // belongs to the connection's FTS5 module: freed before it

        sqlite3_close_v2(handle)
    }

    /// A use after `close()` (a late caller while the daemon stops): an error, never a freed handle.
    private static func closedError(_ sql: String) -> DatabaseError {
        DatabaseError(code: SQLITE_MISUSE, extendedCode: SQLITE_MISUSE, message: "the database connection is closed (the daemon is stopping)", sql: sql)
    }

    func error(_ rc: Int32, sql: String?) -> DatabaseError {
        DatabaseError(code: rc & 0xFF, extendedCode: rc, message: String(cString: sqlite3_errmsg(handle)), sql: sql)
    }

    /// Runs one or more statements with no bindings and no results.
    public func execute(_ sql: String) throws(DatabaseError) {
        BlockingCheck.blocking("SQLite exec")
        guard !isClosed else { throw Self.closedError(sql) }
        var errmsg: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errmsg)
        if rc != SQLITE_OK {
            let message = errmsg.map { String(cString: $0) } ?? "error"
            sqlite3_free(errmsg)
            throw DatabaseError(code: rc & 0xFF, extendedCode: sqlite3_extended_errcode(handle), message: message, sql: sql)
        }
    }

    /// A prepared statement, cached by its SQL text.
    public func statement(_ sql: String) throws(DatabaseError) -> Statement {
        BlockingCheck.blocking("SQLite statement")
        guard !isClosed else { throw Self.closedError(sql) }
        if let s = cache[sql] {
            s.reset()
            return s
        }
        let s = try Statement(database: self, sql: sql)
        cache[sql] = s
        return s
    }

    /// Runs a statement that returns no rows; returns the number of rows changed.
    @discardableResult
    public func run(_ sql: String, _ bindings: [SQLValue] = []) throws(DatabaseError) -> Int {
        let s = try statement(sql)
        try s.bind(bindings)
        while try s.step() {}
        s.reset()
        return Int(sqlite3_changes(handle))
    }

    /// Steps through the rows of a query without collecting them (large reads).
    public func forEachRow(_ sql: String, _ bindings: [SQLValue] = [], _ body: (Statement) throws -> Void) throws {
        let s = try statement(sql)
        try s.bind(bindings)
        defer { s.reset() }
        while try s.step() { try body(s) }
    }

    /// FTS5's tokenizer as the full-text table uses it, on this connection.
    func fullTextTokenizer() throws(DatabaseError) -> FullTextTokenizer {
        if let tokenizer { return tokenizer }
        let t = try FullTextTokenizer(self)
        tokenizer = t
        return t
    }

    /// All rows of a query.
    public func rows(_ sql: String, _ bindings: [SQLValue] = []) throws(DatabaseError) -> [Row] {
        let s = try statement(sql)
        try s.bind(bindings)
        var out: [Row] = []
        while try s.step() { out.append(s.row()) }
        s.reset()
        return out
    }

    /// The first column of the first row, if any.
    public func scalar(_ sql: String, _ bindings: [SQLValue] = []) throws(DatabaseError) -> SQLValue? {
        let s = try statement(sql)
        try s.bind(bindings)
        defer { s.reset() }
        return try s.step() ? s.value(0) : nil
    }

    /// An integer result (0 when there is no row or it is NULL).
    public func intScalar(_ sql: String, _ bindings: [SQLValue] = []) throws(DatabaseError) -> Int {
        switch try scalar(sql, bindings) {
        case .integer(let n)?: Int(n)
        case .double(let d)?: Int(d)
        default: 0
        }
    }

    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }
    public var changes: Int { Int(sqlite3_changes(handle)) }
    public var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// Runs `body` in a transaction; commits if it returns, rolls back if it throws.
    public func transaction<T>(_ kind: String = "IMMEDIATE", _ body: () throws -> T) throws -> T {
        // Prepared once per connection (`sqlite3_exec` parsed the text at every call: 20 k
        // instructions of a prefix page's read transaction).
        try run(Self.begin(kind))
        do {
            let result = try body()
            try run("COMMIT")
            return result
        } catch {
            _ = try? run("ROLLBACK")
            throw error
        }
    }

    private static func begin(_ kind: String) -> String {
        switch kind {
        case "IMMEDIATE": "BEGIN IMMEDIATE"
        case "DEFERRED": "BEGIN DEFERRED"
        case "EXCLUSIVE": "BEGIN EXCLUSIVE"
        default: "BEGIN \(kind)"
        }
    }

    /// Registers the scalar functions the query compiler emits (sl_match, …).
    public func registerFunctions() {
        clearFunctionCache = SQLFunctions.register(on: handle)
        csqlite_register_fts5_totals(handle)
    }

    /// Forgets what the query functions compiled from past statements' arguments.
    public private(set) var clearFunctionCache: @Sendable () -> Void = {}

    /// Virtual-machine steps between two checks of a query's budget: a few microseconds of work,
    /// so a stop takes effect at once and the check (a clock read) costs well under 1 %.
    static let progressSteps: Int32 = 1000

    /// Runs `body` with every statement interrupted (`SQLITE_INTERRUPT`) once `budget` says stop:
    /// SQLite's progress handler asks it every `progressSteps` steps. Without a budget, `body` runs
    /// as it is.
    public func withBudget<T>(_ budget: QueryBudget?, _ body: () throws -> T) rethrows -> T {
        guard let budget else { return try body() }
        sqlite3_progress_handler(handle, Self.progressSteps, budgetProgressHandler, Unmanaged.passUnretained(budget).toOpaque())
        defer { installYield() }
        return try withExtendedLifetime(budget) { try body() }
    }

    /// Whether this connection's statements yield the CPU to user queries (`QueryYield`): the
    /// writer's in maintenance transactions, a reader's while a background thread has it.
    /// Through SQLite's progress handler, which a budget takes over while it runs.
    var yieldsToQueries = false {
        didSet { if yieldsToQueries != oldValue { installYield() } }
    }
    let yieldState = YieldState()

    private func installYield() {
        if yieldsToQueries, QueryYield.enabled {
            sqlite3_progress_handler(handle, Self.progressSteps, yieldProgressHandler, Unmanaged.passUnretained(yieldState).toOpaque())
        } else {
            sqlite3_progress_handler(handle, 0, nil, nil)
        }
    }
}

/// A connection's yields (tests).
final class YieldState {
    var yields = 0
}

/// SQLite's progress callback on a connection that yields to queries: never interrupts.
private func yieldProgressHandler(_ context: UnsafeMutableRawPointer?) -> Int32 {
    guard let context else { return 0 }
    let state = Unmanaged<YieldState>.fromOpaque(context).takeUnretainedValue()
    if QueryYield.check() { state.yields += 1 }
    return 0
}

/// SQLite's progress callback: nonzero interrupts the running statement.
private func budgetProgressHandler(_ context: UnsafeMutableRawPointer?) -> Int32 {
    guard let context else { return 0 }
    return Unmanaged<QueryBudget>.fromOpaque(context).takeUnretainedValue().shouldStop() ? 1 : 0
}

/// A row read from a statement.
public struct Row: Sendable {
    public var values: [SQLValue]
    public subscript(_ i: Int) -> SQLValue { values[i] }
    public func string(_ i: Int) -> String? { if case .text(let s) = values[i] { return s } else { return nil } }
    public func double(_ i: Int) -> Double? {
        switch values[i] {
        case .double(let d): d
        case .integer(let n): Double(n)
        default: nil
        }
    }
    public func int(_ i: Int) -> Int64? {
        switch values[i] {
        case .integer(let n): n
        case .double(let d): Int64(d)
        default: nil
        }
    }
    public func blob(_ i: Int) -> [UInt8]? {
        switch values[i] {
        case .blob(let b): b
        case .text(let s): Array(s.utf8)
        default: nil
        }
    }
}

public final class Statement {
    unowned let database: Database
    let handle: OpaquePointer
    public let sql: String

    init(database: Database, sql: String) throws(DatabaseError) {
        self.database = database
        self.sql = sql
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(database.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else { throw database.error(rc, sql: sql) }
        handle = stmt
    }

    deinit { sqlite3_finalize(handle) }

    public func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Back to the first row, its bindings kept: a statement run once per candidate (the page
    /// walk's `rowid = ?` check) binds the query's own values once and only the rowid per run.
    public func rewind() {
        sqlite3_reset(handle)
    }

    public func bind(_ values: [SQLValue]) throws(DatabaseError) {
        try bind(values, from: 1)
    }

    /// Binds `values` to the parameters from `index` on.
    public func bind(_ values: some Collection<SQLValue>, from index: Int32) throws(DatabaseError) {
        var i = index
        for v in values {
            try bind(v, at: i)
            i += 1
        }
    }

    /// Steps a statement that returns no rows to its end, then resets it.
    public func run() throws(DatabaseError) {
        while try step() {}
        reset()
    }

    public func bind(_ value: SQLValue, at index: Int32) throws(DatabaseError) {
        let rc: Int32
        switch value {
        case .null: rc = sqlite3_bind_null(handle, index)
        case .integer(let n): rc = sqlite3_bind_int64(handle, index, n)
        case .double(let d): rc = sqlite3_bind_double(handle, index, d)
        case .text(let s):
            // A text without a NUL is bound NUL-terminated (length -1): SQLite then marks its copy
            // terminated, and `sqlite3_value_text` on it (each `sl_match` pattern, each run of the
            // statement) returns it as it is; bound with its length, the value had no terminator
            // and SQLite copied it again, into memory grown for one, every time a function read it.
            // A text holding a NUL keeps its length (the NUL is part of the value).
            let n = s.utf8.count
            rc = s.withCString { p in
                strlen(p) == n
                    ? sqlite3_bind_text(handle, index, p, -1, csqlite_transient())
                    : sqlite3_bind_text(handle, index, p, Int32(n), csqlite_transient())
            }
        case .blob(let b):
            rc = b.withUnsafeBytes { sqlite3_bind_blob(handle, index, $0.baseAddress, Int32($0.count), csqlite_transient()) }
        }
        guard rc == SQLITE_OK else { throw database.error(rc, sql: sql) }
    }

    /// UTF-8 bytes as TEXT (copied by SQLite); none: the empty text.
    public func bindText(_ bytes: [UInt8], at index: Int32) throws(DatabaseError) {
        let rc = bytes.withUnsafeBufferPointer { b in
            guard let base = b.baseAddress, b.count > 0 else { return sqlite3_bind_text(handle, index, "", 0, csqlite_transient()) }
            return sqlite3_bind_text(handle, index, UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self), Int32(b.count),
                csqlite_transient())
        }
        guard rc == SQLITE_OK else { throw database.error(rc, sql: sql) }
    }

    /// Binds bytes SQLite does not copy (`SQLITE_STATIC`): they must stay valid until the
    /// statement has been stepped, and every use of the statement binds them again before its
    /// step (a reset keeps the binding, pointing at memory that is gone).

    public func bindUncopiedBlob(_ bytes: UnsafeRawBufferPointer, at index: Int32) throws(DatabaseError) {
        let rc = sqlite3_bind_blob(handle, index, bytes.baseAddress, Int32(bytes.count), nil)
        guard rc == SQLITE_OK else { throw database.error(rc, sql: sql) }
    }

    /// Advances; true when a row is available.
    public func step() throws(DatabaseError) -> Bool {
        let rc = sqlite3_step(handle)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let e = database.error(rc, sql: sql)
            sqlite3_reset(handle)
            throw e
        }
    }

    public var columnCount: Int { Int(sqlite3_column_count(handle)) }

    public func value(_ i: Int) -> SQLValue {
        let c = Int32(i)
        switch sqlite3_column_type(handle, c) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(handle, c))
        case SQLITE_FLOAT: return .double(sqlite3_column_double(handle, c))
        case SQLITE_TEXT:
            let n = Int(sqlite3_column_bytes(handle, c))
            guard let p = sqlite3_column_text(handle, c) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: p, count: n), as: UTF8.self))
        case SQLITE_BLOB:
            let n = Int(sqlite3_column_bytes(handle, c))
            guard let p = sqlite3_column_blob(handle, c) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: p, count: n)))
        default: return .null
        }
    }

    public func row() -> Row { Row(values: (0..<columnCount).map(value)) }

    /// Column `i` as text, nil for NULL (no `SQLValue` in between: large reads).
    func string(_ i: Int32) -> String? {
        guard sqlite3_column_type(handle, i) != SQLITE_NULL, let p = sqlite3_column_text(handle, i) else { return nil }
        return String(decoding: UnsafeBufferPointer(start: p, count: Int(sqlite3_column_bytes(handle, i))), as: UTF8.self)
    }

    func double(_ i: Int32) -> Double? {
        sqlite3_column_type(handle, i) == SQLITE_NULL ? nil : sqlite3_column_double(handle, i)
    }

    func int64(_ i: Int32) -> Int64 { sqlite3_column_int64(handle, i) }

    /// Column `i`'s bytes (blob or text), copied once, without an `SQLValue` in between.
    func bytes(_ i: Int32) -> [UInt8] {
        let n = Int(sqlite3_column_bytes(handle, i))
        guard n > 0, let p = sqlite3_column_blob(handle, i) else { return [] }
        return Array(UnsafeRawBufferPointer(start: p, count: n))
    }

    func isNull(_ i: Int32) -> Bool { sqlite3_column_type(handle, i) == SQLITE_NULL }
}
