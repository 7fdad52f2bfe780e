#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import SearchlightStore

/// The Tags sample (Extensions/Tags, built by `make extensions`) driven as its users drive it:
/// its `tags` CLI and `tags-extension` as real processes, its store as a real SQLite file that the
/// test also writes through a connection of its own (another process, from the delegate's view).
struct TagsSample {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let bundle = "org.searchlight.sample.tags"
    static var tags: String { root + "/Extensions/Tags/.build/debug/tags" }
    static var tagsExtension: String { root + "/Extensions/Tags/.build/debug/tags-extension" }
    /// DESIGN §10's schema, as the app creates it.
    static let schema = """
        PRAGMA journal_mode = WAL;
        CREATE TABLE IF NOT EXISTS photos(id INTEGER PRIMARY KEY, userSpecifiedName TEXT, path TEXT);
        CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY, name TEXT UNIQUE);
        CREATE TABLE IF NOT EXISTS photo_tags(photo_id INTEGER NOT NULL, tag_id INTEGER NOT NULL, PRIMARY KEY (photo_id, tag_id));
        """

    static func requireBuilt() throws {
        for program in [tags, tagsExtension] where !FileManager.default.isExecutableFile(atPath: program) {
            throw HarnessError("\(program) is not built; run `make extensions` (make test does) before the tests")
        }
    }

    /// Runs `tags --store STORE ARGS` against the daemon at `socket`.
    static func run(_ arguments: [String], store: String, socket: String, environment: [String: String] = [:]) async throws -> CLIResult {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tags)
        p.arguments = ["--store", store] + arguments
        p.environment = ProcessInfo.processInfo.environment.merging(["SEARCHLIGHT_SOCKET": socket].merging(environment) { $1 }) { $1 }
        let base = (store as NSString).deletingLastPathComponent + "/tags-" + UUID().uuidString.prefix(8)
        for file in [".out", ".err"] { _ = FileManager.default.createFile(atPath: base + file, contents: nil) }
        p.standardOutput = FileHandle(forWritingAtPath: base + ".out")
        p.standardError = FileHandle(forWritingAtPath: base + ".err")
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return try await blocking {
            p.waitUntilExit()
            func text(_ file: String) -> String { (try? String(contentsOfFile: base + file, encoding: .utf8)) ?? "" }
            return CLIResult(status: p.terminationStatus, stdout: text(".out"), stderr: text(".err"))
        }
    }

    /// Every item of the bundle's default index, by identifier.
    static func items(socket: String) async throws -> [String: SearchableItem] {
        let index = SearchableIndex(bundleIdentifier: bundle, socketPath: socket)
        defer { Task { await index.close() } }
        var out: [String: SearchableItem] = [:]
        let context = SearchQueryContext(fetchAttributes: ["displayName", "keywords", "contentType"])
        for try await item in SearchQuery(queryString: "uniqueIdentifier == \"*\"", queryContext: context, index: index).results {
            out[item.uniqueIdentifier] = item
        }
        return out
    }

    /// What the index must hold for the store's rows: a photo with its name and its tags (sorted)
    /// as keywords, a tag with its name.
    static func expectedItems(_ db: Database) throws -> [String: (name: String, keywords: [String])] {
        var out: [String: (name: String, keywords: [String])] = [:]
        for row in try db.rows("SELECT id, userSpecifiedName FROM photos") {
            out["photo-\(row.int(0)!)"] = (row.string(1) ?? "", [])
        }
        for row in try db.rows("SELECT pt.photo_id, t.name FROM photo_tags pt JOIN tags t ON t.id = pt.tag_id JOIN photos p ON p.id = pt.photo_id") {
            out["photo-\(row.int(0)!)"]!.keywords.append(row.string(1) ?? "")
        }
        for key in out.keys { out[key]!.keywords.sort() }
        for row in try db.rows("SELECT id, name FROM tags") { out["tag-\(row.int(0)!)"] = (row.string(1) ?? "", []) }
        return out
    }

    /// The differences between the index and the store, row by row (empty: they agree).
    static func differences(socket: String, store db: Database) async throws -> [String] {
        let expected = try expectedItems(db)
        let items = try await items(socket: socket)
        var problems: [String] = []
        for (id, want) in expected.sorted(by: { $0.key < $1.key }) {
            guard let item = items[id] else { problems.append("\(id) is missing"); continue }
            if item.attributeSet.displayName != want.name { problems.append("\(id): displayName \(item.attributeSet.displayName ?? "nil") != \(want.name)") }
            if (item.attributeSet.keywords ?? []) != want.keywords { problems.append("\(id): keywords \(item.attributeSet.keywords ?? []) != \(want.keywords)") }
        }
        for id in items.keys.sorted() where expected[id] == nil { problems.append("\(id) is in the index but not in the store") }
        return problems
    }

    /// Waits until the index covers the store's whole history (its client state is the store's
    /// last history token).
    static func waitCaughtUp(_ db: Database, socket: String, timeout: TimeInterval = 60) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            // (No history table yet: the delegate has not installed it.)
            let last = try? db.intScalar("SELECT coalesce(max(token), 0) FROM searchlight_history")
            let indexed = try? await indexedToken(socket: socket)
            if let last, indexed.map({ Int($0) == last }) == true { return }
            if Date() > deadline {
                throw HarnessError("the index covers history token \(indexed.map { String(describing: $0) } ?? "?"), the store is at \(last.map(String.init) ?? "no history")")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// A store with the schema in `dir`, and the test's own connection to it (the app's writes).
    static func newStore(_ dir: TempDir) throws -> (String, Database) {
        let path = dir.path + "/tags.sqlite"
        let db = try Database(path: path)
        try db.execute(schema)
        return (path, db)
    }

    /// The history token the index covers (its client state), or nil.
    static func indexedToken(socket: String) async throws -> Int64? {
        let index = SearchableIndex(bundleIdentifier: bundle, socketPath: socket)
        defer { Task { await index.close() } }
        return try await index.fetchLastClientState().flatMap { Int64(String(decoding: $0, as: UTF8.self)) }
    }
}

/// A `tags watch` process (the delegate running in an app), its output in files.
final class TagsWatcher: @unchecked Sendable {
    let process = Process()
    let output: String

    init(store: String, socket: String, name: String) throws {
        output = (store as NSString).deletingLastPathComponent + "/watch-\(name)"
        for file in [".out", ".err"] { _ = FileManager.default.createFile(atPath: output + file, contents: nil) }
        process.executableURL = URL(fileURLWithPath: TagsSample.tags)
        process.arguments = ["--store", store, "watch"]
        process.environment = ProcessInfo.processInfo.environment.merging(
            ["SEARCHLIGHT_SOCKET": socket, "SEARCHLIGHT_SQLITE_DEBUG": "1"]) { $1 }
        process.standardOutput = FileHandle(forWritingAtPath: output + ".out")
        process.standardError = FileHandle(forWritingAtPath: output + ".err")
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    deinit { kill(SIGKILL) }

    var pid: Int32 { process.processIdentifier }

    func kill(_ signal: Int32) {
        if process.isRunning { Glibc.kill(process.processIdentifier, signal) }
        process.waitUntilExit()
    }

    var stderr: String { (try? String(contentsOfFile: output + ".err", encoding: .utf8)) ?? "" }

    /// The history ranges this process committed, from its debug lines (`from`, `through`].
    var ranges: [(from: Int64, through: Int64)] {
        stderr.split(separator: "\n").filter { $0.contains("history range indexed") }.compactMap { line in
            let text = String(line)
            guard let from = ExtensionBench.field("from", in: text).flatMap(Int64.init),
                  let through = ExtensionBench.field("through", in: text).flatMap(Int64.init) else { return nil }
            return (from, through)
        }
    }
}

/// Overlaps between committed history ranges (a range applied twice shows up as one).
func overlaps(_ ranges: [(from: Int64, through: Int64)]) -> [String] {
    let sorted = ranges.sorted { $0.from < $1.from }
    var problems: [String] = []
    for (a, b) in zip(sorted, sorted.dropFirst()) where b.from < a.through {
        problems.append("(\(a.from), \(a.through)] and (\(b.from), \(b.through)] overlap")
    }
    return problems
}
