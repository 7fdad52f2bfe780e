import CSQLite
import Foundation
import Synchronization

/// A SQLite error from the app's database, with the statement that failed.
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    public var code: Int32
    public var extendedCode: Int32
    public var message: String
    public var sql: String?

    var isBusy: Bool { code == SQLITE_BUSY || code == SQLITE_LOCKED }

    public var description: String {
        var s = "SQLite error \(extendedCode): \(message)"
        if let sql { s += " (in: \(sql.prefix(160)))" }
        return s
    }
}

/// One connection to the app's database, used by one thread at a time (the `DatabaseWorker`'s).
/// A small GRDB-shaped wrapper of the system SQLite; this module's own, because the store's
/// wrapper lives in `SearchlightStore`, which the SDK side must not link.
final class SQLiteDatabase {
    let path: String
    /// Distinguishes connections over time (a reopened file is another connection: what was
    /// read on the old one, like `PRAGMA data_version`, says nothing about the new one).
    let serial: Int
    private static let serials = Atomic<Int>(0)
    private let handle: OpaquePointer
    private var cache: [String: OpaquePointer] = [:]
    private var isClosed = false
    /// Queries being stepped now (a row callback may run another): the cache is only trimmed at 0.
    private var activeQueries = 0
    /// An app that builds its `select` SQL per row must not grow the cache without bound.
    private static let cacheLimit = 256

    /// Opens an existing database read-write (never creates one: the app owns its file; only
    /// the app's own `SQLiteConnection` passes `create`).
    init(path: String, busyTimeoutMilliseconds: Int32 = 5_000, create: Bool = false) throws(SQLiteError) {
        self.path = path
        serial = Self.serials.add(1, ordering: .relaxed).newValue
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE | (create ? SQLITE_OPEN_CREATE : 0)
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(db)
            throw SQLiteError(code: rc & 0xFF, extendedCode: rc, message: message, sql: nil)
        }
        handle = db
        sqlite3_busy_timeout(db, busyTimeoutMilliseconds)
        sqlite3_extended_result_codes(db, 1)
    }

    deinit { close() }

    func close() {
        guard !isClosed else { return }
        isClosed = true
        for statement in cache.values { sqlite3_finalize(statement) }
        cache.removeAll()
        sqlite3_close_v2(handle)
    }

    func setBusyTimeout(milliseconds: Int32) { sqlite3_busy_timeout(handle, milliseconds) }

    private func error(_ rc: Int32, sql: String?) -> SQLiteError {
        SQLiteError(code: rc & 0xFF, extendedCode: rc, message: String(cString: sqlite3_errmsg(handle)), sql: sql)
    }

    /// Runs statements without bindings or results.
    func execute(_ sql: String) throws(SQLiteError) {
        var errmsg: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errmsg)
        guard rc == SQLITE_OK else {
            let message = errmsg.map { String(cString: $0) } ?? "error"
            sqlite3_free(errmsg)
            throw SQLiteError(code: rc & 0xFF, extendedCode: sqlite3_extended_errcode(handle), message: message, sql: sql)
        }
    }

    /// Runs `sql` with `bindings`, calling `row` for each result row with the statement's
    /// column names and values. Statements are prepared once and cached by their text.
    func query(_ sql: String, _ bindings: [DatabaseValue] = [],
               row: ([String], [DatabaseValue]) throws -> Void) throws {
        let statement = try prepared(sql)
        activeQueries += 1
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
            activeQueries -= 1
        }
        for (i, value) in bindings.enumerated() { try bind(value, at: Int32(i + 1), in: statement, sql: sql) }
        var names: [String]?
        while true {
            let rc = sqlite3_step(statement)
            if rc == SQLITE_DONE { return }
            guard rc == SQLITE_ROW else { throw error(rc, sql: sql) }
            let count = Int(sqlite3_column_count(statement))
            if names == nil { names = (0..<count).map { String(cString: sqlite3_column_name(statement, Int32($0))) } }
            try row(names!, (0..<count).map { value(statement, Int32($0)) })
        }
    }

    /// Every row's values. `readOnly` refuses a statement that would write (an app's query
    /// run on a snapshot the delegate reads).
    func rows(_ sql: String, _ bindings: [DatabaseValue] = [], readOnly: Bool = false) throws -> [[DatabaseValue]] {
        if readOnly { _ = try parameterCount(sql, readOnly: true) }
        var out: [[DatabaseValue]] = []
        try query(sql, bindings) { _, values in out.append(values) }
        return out
    }

    /// Compiles `sql` (a check that it is valid here) and returns its number of parameters.
    func parameterCount(_ sql: String, readOnly: Bool = false) throws(SQLiteError) -> Int {
        let statement = try prepared(sql)
        if readOnly, sqlite3_stmt_readonly(statement) == 0 {
            throw SQLiteError(code: SQLITE_READONLY, extendedCode: SQLITE_READONLY,
                message: "only a query that reads may run here (SELECT …)", sql: sql)
        }
        return Int(sqlite3_bind_parameter_count(statement))
    }

    /// The first column of the first row, or nil.
    func scalar(_ sql: String, _ bindings: [DatabaseValue] = []) throws -> DatabaseValue? {
        var result: DatabaseValue?
        try query(sql, bindings) { _, values in if result == nil { result = values.first } }
        return result
    }

    /// Runs a statement that returns no rows; the number of rows it changed.
    @discardableResult
    func run(_ sql: String, _ bindings: [DatabaseValue] = []) throws -> Int {
        try query(sql, bindings) { _, _ in }
        return Int(sqlite3_changes(handle))
    }

    /// `body` in a read transaction: one snapshot of the database for everything it reads.
    func read<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN DEFERRED")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// `body` in a write transaction (`BEGIN IMMEDIATE`); rolled back if it throws.
    func write<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// The rowid of the last row this connection inserted.
    var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    private func prepared(_ sql: String) throws(SQLiteError) -> OpaquePointer {
        if let s = cache[sql] { return s }
        if cache.count >= Self.cacheLimit, activeQueries == 0 {
            for statement in cache.values { sqlite3_finalize(statement) }
            cache.removeAll()
        }
        var statement: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard rc == SQLITE_OK, let statement else { throw error(rc, sql: sql) }
        cache[sql] = statement
        return statement
    }

    private func bind(_ value: DatabaseValue, at index: Int32, in statement: OpaquePointer, sql: String) throws(SQLiteError) {
        let rc: Int32
        switch value {
        case .null: rc = sqlite3_bind_null(statement, index)
        case .integer(let n): rc = sqlite3_bind_int64(statement, index, n)
        case .real(let d): rc = sqlite3_bind_double(statement, index, d)
        case .text(let s): rc = sqlite3_bind_text(statement, index, s, Int32(s.utf8.count), csqlite_transient())
        case .blob(let b):
            rc = b.withUnsafeBytes { sqlite3_bind_blob(statement, index, $0.baseAddress, Int32($0.count), csqlite_transient()) }
        }
        guard rc == SQLITE_OK else { throw error(rc, sql: sql) }
    }

    private func value(_ statement: OpaquePointer, _ column: Int32) -> DatabaseValue {
        switch sqlite3_column_type(statement, column) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, column))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, column))
        case SQLITE_TEXT:
            let n = Int(sqlite3_column_bytes(statement, column))
            guard let p = sqlite3_column_text(statement, column) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: p, count: n), as: UTF8.self))
        case SQLITE_BLOB:
            let n = Int(sqlite3_column_bytes(statement, column))
            guard let p = sqlite3_column_blob(statement, column) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: p, count: n)))
        default: return .null
        }
    }
}

/// The app's own connection to its database, for an app that has no SQLite library of its own:
/// the system SQLite this module already links, so the app declares no `systemLibrary` target
/// (whose name would have to be unique across the package graph). Thread-safe: one statement
/// at a time, in the caller's thread. The delegate opens its own connections; this one is the
/// app's, and every write through it is recorded by the delegate's triggers like any other.
///
/// ```swift
/// let db = try SQLiteConnection(path: "recipes.sqlite")     // created if missing
/// try db.execute("CREATE TABLE IF NOT EXISTS recipes(id INTEGER PRIMARY KEY, title TEXT)")
/// try db.run("INSERT INTO recipes(title) VALUES (?)", .text("Pancakes"))
/// let titles = try db.rows("SELECT title FROM recipes").compactMap { $0[0].stringValue }
/// ```
public final class SQLiteConnection: @unchecked Sendable {
    /// The database file's path.
    public let path: String
    private let lock = NSRecursiveLock()
    private let database: SQLiteDatabase

    /// Opens the database at `path` read-write, creating the file when `create` (the default)
    /// and it is missing (its folder must exist). Waits up to `busyTimeout` for another
    /// process's write lock before a statement fails with `SQLITE_BUSY`.
    public init(path: String, create: Bool = true, busyTimeout: Duration = .seconds(5)) throws {
        let milliseconds = busyTimeout.components.seconds * 1_000 + busyTimeout.components.attoseconds / 1_000_000_000_000_000
        database = try SQLiteDatabase(path: path, busyTimeoutMilliseconds: Int32(clamping: milliseconds), create: create)
        self.path = path
    }

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    /// Runs one or more statements separated by `;`, without arguments or results (a schema,
    /// `PRAGMA journal_mode = WAL`).
    public func execute(_ sql: String) throws {
        try locked { try database.execute(sql) }
    }

    /// Runs one statement that returns no rows, its `?` parameters bound to `arguments` in order;
    /// the number of rows it changed.
    @discardableResult
    public func run(_ sql: String, _ arguments: DatabaseValue...) throws -> Int {
        try locked { try database.run(sql, arguments) }
    }

    /// Every row of one query, each row its columns' values in the order of the `SELECT`.
    public func rows(_ sql: String, _ arguments: DatabaseValue...) throws -> [[DatabaseValue]] {
        try locked { try database.rows(sql, arguments) }
    }

    /// The first column of the query's first row; nil when it returns no row.
    public func scalar(_ sql: String, _ arguments: DatabaseValue...) throws -> DatabaseValue? {
        try locked { try database.scalar(sql, arguments) }
    }

    /// The rowid of the last row inserted through this connection.
    public var lastInsertRowID: Int64 { locked { database.lastInsertRowID } }

    /// `body` in one write transaction (`BEGIN IMMEDIATE`), committed when it returns and rolled
    /// back when it throws; other threads' statements on this connection wait until it ends.
    @discardableResult
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        try locked { try database.write(body) }
    }
}

/// A name quoted for SQL (`"photos"`), whatever it contains.
func quoted(_ name: String) -> String { "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }

/// A string literal for SQL (`'Photo'`).
func literal(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "''") + "'" }
