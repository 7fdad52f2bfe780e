#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightSQLite
import SearchlightStore
import Synchronization

/// The store delegate (issue 16): what its triggers cost the app's own writes, how fast it works
/// off a history backlog, and the lag from an app's commit to the change being in the index
/// (the batch that carries it answered: committed, searchable), with the writer in this process
/// and in another one.
struct DelegateBench {
    let daemon: Daemon
    let dir: String
    let runs: Int
    static let bundle = "bench.delegate"
    static let schema = "PRAGMA journal_mode = WAL; CREATE TABLE photos(id INTEGER PRIMARY KEY, userSpecifiedName TEXT, path TEXT);"
    static let model = SpotlightModel {
        Entity("Photo", table: "photos", key: "id", contentType: "public.image") {
            Attribute("userSpecifiedName", as: .displayName)
            Attribute("path", as: .contentURL)
        }
    }

    func run() async throws -> [Row] {
        var rows: [Row] = []
        rows += try await writeCost()
        rows += try await backlog()
        rows += try await lag(otherProcess: false)
        rows += try await lag(otherProcess: true)
        return rows
    }

    /// A fresh store with the schema; its path.
    func store(_ name: String) throws -> String {
        let path = dir + "/\(name).sqlite"
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        let db = try Database(path: path)
        try db.execute(Self.schema)
        db.close()
        return path
    }

    func delegate(_ path: String, index: String) throws -> SQLiteSpotlightDelegate {
        try IndexNamed(index, databaseAt: URL(fileURLWithPath: path), model: Self.model, bundleIdentifier: Self.bundle,
            socketPath: daemon.socket)
    }

    /// Installs the triggers (a delegate started, caught up, stopped: they stay).
    func installTriggers(_ path: String, index: String) async throws {
        let d = try delegate(path, index: index)
        try await d.startSpotlightIndexing()
        try await d.waitUntilIndexed(timeout: .seconds(60))
        await d.stopSpotlightIndexing()
    }

    /// Inserts `count` rows as the app would; rows per second. `perTransaction` 1 is one commit
    /// per row (`synchronous=NORMAL`, the usual WAL setting); more batches them.
    static func insertRate(_ path: String, count: Int, perTransaction: Int) throws -> Double {
        let db = try Database(path: path)
        defer { db.close() }
        try db.execute("PRAGMA synchronous = NORMAL")
        let insert = try db.statement("INSERT INTO photos(userSpecifiedName, path) VALUES (?, ?)")
        let start = now()
        var done = 0
        while done < count {
            let n = min(perTransaction, count - done)
            try db.execute("BEGIN IMMEDIATE")
            for i in done..<(done + n) {
                try insert.bind([.text("photo \(i) taken on the trail"), .text("/photos/\(i).jpg")])
                try insert.run()
            }
            try db.execute("COMMIT")
            done += n
        }
        return Double(count) / (now() - start)
    }

    /// The app's insert rate without and with the triggers, measured in alternation on two
    /// stores of the same schema (the one with triggers has no delegate running).
    func writeCost() async throws -> [Row] {
        var rows: [Row] = []
        for (perTransaction, count) in [(1, 20_000), (1_000, 200_000)] {
            var plain: [Double] = [], tracked: [Double] = [], ratios: [Double] = []
            for run in 0..<runs {
                let a = try store("plain"), b = try store("tracked")
                try await installTriggers(b, index: "cost\(run)")
                let without = try Self.insertRate(a, count: count, perTransaction: perTransaction)
                let with = try Self.insertRate(b, count: count, perTransaction: perTransaction)
                plain.append(without)
                tracked.append(with)
                ratios.append(with / without)
                progress(String(format: "delegate write cost, %d row(s) per commit, run %d: %.0f rows/s without triggers, %.0f with (%.2f×)",
                    perTransaction, run + 1, without, with, with / without))
            }
            let label = perTransaction == 1 ? "one row per commit" : "\(perTransaction) rows per commit"
            rows.append(Row(scenario: "app inserts without the delegate's triggers (\(label), baseline)", figure: Figure(plain),
                unit: "rows/s", higherIsBetter: true))
            rows.append(Row(scenario: "app inserts with the delegate's triggers (\(label))", figure: Figure(tracked), unit: "rows/s",
                baseline: Figure(plain), higherIsBetter: true, pairedRatios: ratios))
        }
        return rows
    }

    /// A backlog of 100 000 history rows (written while no delegate ran), worked off by a start.
    func backlog() async throws -> [Row] {
        var rates: [Double] = []
        for run in 0..<runs {
            let path = try store("backlog")
            let index = "backlog\(run)"
            try await installTriggers(path, index: index)
            _ = try Self.insertRate(path, count: 100_000, perTransaction: 1_000)
            let d = try delegate(path, index: index)
            let start = now()
            try await d.startSpotlightIndexing()
            try await d.waitUntilIndexed(timeout: .seconds(600))
            let rate = 100_000 / (now() - start)
            await d.stopSpotlightIndexing()
            rates.append(rate)
            progress(String(format: "delegate backlog run %d: 100 000 history rows at %.0f rows/s", run + 1, rate))
        }
        return [Row(scenario: "history backlog worked off (100k inserts, ranges of 2 000)", figure: Figure(rates), unit: "rows/s",
            higherIsBetter: true)]
    }

    /// Commits one row at a time (every 10–40 ms) and measures, for each, the time from its
    /// commit returning to the delegate's `indexDidUpdate` covering its history token.
    func lag(otherProcess: Bool) async throws -> [Row] {
        let count = 300
        var lags: [Double] = []
        for run in 0..<runs {
            let path = try store("lag")
            let d = try delegate(path, index: "lag\(otherProcess ? "p" : "s")\(run)")
            try await d.startSpotlightIndexing()
            try await d.waitUntilIndexed(timeout: .seconds(60))
            let seen = Mutex<[(token: Int64, at: Double)]>([])
            let listener = Task {
                for try await update in d.indexDidUpdate {
                    let t = realtime()
                    seen.withLock { $0.append((update.historyToken, t)) }
                }
            }
            try await Task.sleep(for: .milliseconds(100))
            let commits: [(token: Int64, at: Double)]
            if otherProcess {
                commits = try await Self.writeInChild(path, count: count)
            } else {
                commits = try await Task.detached { try Self.write(path, count: count) }.value
            }
            try await d.waitUntilIndexed(timeout: .seconds(60))
            // The listener may not have recorded the last update yet.
            let last = commits.last?.token ?? 0
            for _ in 0..<100 where !seen.withLock({ $0.contains { $0.token >= last } }) { try await Task.sleep(for: .milliseconds(10)) }
            listener.cancel()
            await d.stopSpotlightIndexing()
            let events = seen.withLock { $0 }
            for commit in commits {
                guard let event = events.first(where: { $0.token >= commit.token }) else { continue }
                lags.append((event.at - commit.at) * 1000)
            }
        }
        let figure = Figure(lags)
        let who = otherProcess ? "another process" : "the same process"
        progress(String(format: "delegate lag, writer in %@: p50 %.2f ms, p99 %.2f ms (%d commits)", who,
            figure.percentile(0.5), figure.percentile(0.99), lags.count))
        return [
            Row(scenario: "commit to indexed, writer in \(who): p50", figure: Figure([figure.percentile(0.5)]), unit: "ms", higherIsBetter: false),
            Row(scenario: "commit to indexed, writer in \(who): p99", figure: Figure([figure.percentile(0.99)]), unit: "ms", higherIsBetter: false),
        ]
    }

    /// The writer: one row per commit, 10–40 ms apart; each commit's token and wall-clock time.
    static func write(_ path: String, count: Int) throws -> [(token: Int64, at: Double)] {
        let db = try Database(path: path)
        defer { db.close() }
        var out: [(Int64, Double)] = []
        for i in 0..<count {
            try db.run("INSERT INTO photos(userSpecifiedName, path) VALUES (?, ?)", [.text("lag \(i)"), .text("/p/\(i)")])
            let at = realtime()
            out.append((Int64(try db.intScalar("SELECT max(token) FROM searchlight_history")), at))
            usleep(useconds_t(10_000 + Int.random(in: 0..<30_000)))
        }
        return out
    }

    /// The same writer in a child process (this executable, `delegate-writer`), which prints
    /// `token seconds` per commit.
    static func writeInChild(_ path: String, count: Int) async throws -> [(token: Int64, at: Double)] {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Daemon.executableDirectory + "/searchlight-bench")
        p.arguments = ["delegate-writer", path, String(count)]
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return String(decoding: data, as: UTF8.self).split(separator: "\n").compactMap { line in
            let f = line.split(separator: " ")
            guard f.count == 2, let token = Int64(f[0]), let at = Double(f[1]) else { return nil }
            return (token, at)
        }
    }

    /// `searchlight-bench delegate-writer DB COUNT`: the child side of `writeInChild`.
    static func writerMain(_ arguments: [String]) -> Never {
        guard arguments.count == 2, let count = Int(arguments[1]) else { fatal("delegate-writer DB COUNT") }
        do {
            for commit in try write(arguments[0], count: count) { print("\(commit.token) \(commit.at)") }
            exit(0)
        } catch {
            fatal("delegate-writer: \(error)")
        }
    }
}

/// A delegate writing a named index, so that each measurement has an index of its own.
final class IndexNamed: SQLiteSpotlightDelegate, @unchecked Sendable {
    let name: String

    init(_ name: String, databaseAt url: URL, model: SpotlightModel, bundleIdentifier: String, socketPath: String) throws {
        self.name = name
        try super.init(databaseAt: url, model: model, bundleIdentifier: bundleIdentifier, socketPath: socketPath)
    }

    override func indexName() -> String { name }
}

/// Wall-clock seconds (the writer in another process stamps its commits with the same clock).
func realtime() -> Double {
    var t = timespec()
    clock_gettime(CLOCK_REALTIME, &t)
    return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
}
