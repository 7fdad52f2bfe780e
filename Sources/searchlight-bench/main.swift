#if canImport(Glibc)
import Glibc
#endif
import CSQLite
import Foundation
import SearchlightKit
import SearchlightStore

// searchlight-bench: speed as a measured property. Every scenario runs its baseline in the same
// process and run, so the ratio survives a noisy machine. Prints a table, writes bench-results.json.

struct Options {
    var corpus: String? = ProcessInfo.processInfo.environment["SEARCHLIGHT_CORPUS"]
    var generate = 20_000
    var runs = 3
    var queries = 300
    var output = "bench-results.json"
}

func parseOptions() -> Options {
    var o = Options()
    var args = Array(CommandLine.arguments.dropFirst())[...]
    func value(_ flag: String) -> String {
        guard let v = args.popFirst() else { fatal("\(flag) needs a value") }
        return v
    }
    while let a = args.popFirst() {
        switch a {
        case "--corpus": o.corpus = value(a)
        case "--generate": o.generate = Int(value(a)) ?? o.generate
        case "--runs": o.runs = max(1, Int(value(a)) ?? o.runs)
        case "--queries": o.queries = max(10, Int(value(a)) ?? o.queries)
        case "--output": o.output = value(a)
        case "--help", "-h":
            print("usage: searchlight-bench [--corpus FILE.jsonl[.gz]] [--generate N] [--runs N] [--queries N] [--output FILE]")
            exit(0)
        default: fatal("unknown option \(a)")
        }
    }
    if o.corpus == nil, FileManager.default.fileExists(atPath: "../shared/corpus/debian-packages.jsonl.gz") {
        o.corpus = "../shared/corpus/debian-packages.jsonl.gz"
    }
    return o
}

func fatal(_ message: String) -> Never {
    FileHandle.standardError.write(Data("searchlight-bench: \(message)\n".utf8))
    exit(2)
}

// MARK: - Corpus

/// The shared corpus, or a generated one with Zipf-distributed words (realistic frequencies).
func loadCorpus(_ o: Options) throws -> (name: String, items: [SearchableItem]) {
    if let path = o.corpus {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", path.hasSuffix(".gz") ? "gzip -dc \"$0\"" : "cat \"$0\"", path]
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        var items: [SearchableItem] = []
        for line in data.split(separator: 0x0A) {
            guard let o = try? JSONValue.parse(Array(line)), let id = o["id"]?.stringValue ?? o["uniqueIdentifier"]?.stringValue else { continue }
            var a = AttributeSet(contentType: "org.debian.deb-archive")
            a.title = o["title"]?.stringValue
            a.contentDescription = o["contentDescription"]?.stringValue
            a.textContent = o["textContent"]?.stringValue
            a.keywords = o["keywords"]?.arrayValue?.compactMap(\.stringValue)
            items.append(SearchableItem(uniqueIdentifier: id, attributeSet: a))
        }
        return ((path as NSString).lastPathComponent, items)
    }
    var rng = SystemRandomNumberGenerator()
    let vocabulary = (0..<20_000).map { i in "w" + String(i, radix: 36) }
    func word() -> String {
        // Zipf: rank ~ 1/u
        let u = Double.random(in: 0.00005...1, using: &rng)
        return vocabulary[min(vocabulary.count - 1, Int(1 / u) - 1)]
    }
    let items = (0..<o.generate).map { i -> SearchableItem in
        var a = AttributeSet()
        a.title = (0..<2).map { _ in word() }.joined(separator: " ")
        a.contentDescription = (0..<8).map { _ in word() }.joined(separator: " ")
        a.textContent = (0..<60).map { _ in word() }.joined(separator: " ")
        a.keywords = (0..<3).map { _ in word() }
        return SearchableItem(uniqueIdentifier: "gen-\(i)", attributeSet: a)
    }
    return ("generated-\(o.generate)", items)
}

// MARK: - Measurement

struct Figure {
    var values: [Double]
    var median: Double { values.sorted()[values.count / 2] }
    var min: Double { values.min() ?? 0 }
    var max: Double { values.max() ?? 0 }
    func percentile(_ p: Double) -> Double {
        let s = values.sorted()
        return s[Swift.min(s.count - 1, Int(Double(s.count) * p))]
    }
}

func now() -> Double {
    var t = timespec()
    clock_gettime(CLOCK_MONOTONIC, &t)
    return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
}

/// A release-build daemon on a temp socket, next to this executable.
final class Daemon {
    let dir: String
    let socket: String
    let process = Process()
    init() throws {
        dir = "/tmp/slbench-\(getpid())-\(Int.random(in: 0..<1_000_000))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        socket = dir + "/d.sock"
        let exe = ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]) as NSString
        process.executableURL = URL(fileURLWithPath: exe.deletingLastPathComponent + "/searchlightd")
        process.arguments = ["--socket", socket, "--state-dir", dir + "/state", "--log-level", "warning"]
        try process.run()
        let deadline = now() + 30
        while now() < deadline {
            if let c = try? UnixSocket.connect(path: socket) { c.close(); return }
            usleep(20_000)
        }
        fatal("searchlightd did not start")
    }
    func stop() {
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: dir)
    }
}

/// Raw in-process FTS5 insert of the same rows, same durability (WAL, synchronous=FULL), batched.
func rawInsertBaseline(_ items: [SearchableItem], batch: Int) throws -> Double {
    let path = "/tmp/slbench-raw-\(getpid()).sqlite"
    for s in ["", "-wal", "-shm"] { unlink(path + s) }
    defer { for s in ["", "-wal", "-shm"] { unlink(path + s) } }
    let db = try Database(path: path)
    _ = try db.scalar("PRAGMA journal_mode=WAL")
    try db.execute("PRAGMA synchronous=FULL; CREATE VIRTUAL TABLE f USING fts5(title, contentDescription, textContent, keywords, tokenize='unicode61 remove_diacritics 2');")
    let start = now()
    var i = 0
    while i < items.count {
        try db.execute("BEGIN")
        for item in items[i..<min(i + batch, items.count)] {
            let a = item.attributeSet
            try db.run("INSERT INTO f VALUES (?, ?, ?, ?)", [
                .text(a.title ?? ""), .text(a.contentDescription ?? ""), .text(a.textContent ?? ""),
                .text((a.keywords ?? []).joined(separator: " ")),
            ])
        }
        try db.execute("COMMIT")
        i += batch
    }
    return Double(items.count) / (now() - start)
}

/// The store alone, in-process: the same batches through `IndexStore`, no socket or JSON-RPC.
/// The gap between this and the raw baseline is the store's cost; the gap to donation, the protocol's.
func storeInsert(_ items: [SearchableItem], batch: Int) throws -> Double {
    let dir = "/tmp/slbench-store-\(getpid())"
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let store = try IndexStore(path: dir + "/b/_default.sqlite")
    defer { store.close() }
    let start = now()
    var i = 0
    while i < items.count {
        _ = try store.applySync([.items(Array(items[i..<min(i + batch, items.count)]))])
        i += batch
    }
    return Double(items.count) / (now() - start)
}

func donate(_ items: [SearchableItem], socket: String, bundle: String, clients: Int, batch: Int) async throws -> Double {
    let start = now()
    try await withThrowingTaskGroup(of: Void.self) { group in
        for c in 0..<clients {
            group.addTask {
                let index = SearchableIndex(bundleIdentifier: bundle, socketPath: socket)
                var i = c * batch
                while i < items.count {
                    try await index.indexSearchableItems(Array(items[i..<min(i + batch, items.count)]))
                    i += clients * batch
                }
                await index.close()
            }
        }
        try await group.waitForAll()
    }
    return Double(items.count) / (now() - start)
}

/// The first page (20 results, titles only) of a query, as a UI showing results would fetch it.
func firstPage(_ query: String, _ index: SearchableIndex) async throws {
    var context = SearchQueryContext(fetchAttributes: ["title"])
    context.pageSize = 20
    var iterator = SearchQuery(queryString: query, queryContext: context, index: index).results.makeAsyncIterator()
    _ = try await iterator.next()
}

struct Row {
    var scenario: String
    var figure: Figure
    var unit: String
    var baseline: Figure?
    var higherIsBetter: Bool
    var ratio: Double? {
        guard let baseline else { return nil }
        return higherIsBetter ? figure.median / baseline.median : baseline.median / figure.median
    }
}

@main
struct Bench {
    static func main() async throws {
        let o = parseOptions()
        let (corpusName, items) = try loadCorpus(o)
        print("corpus: \(corpusName), \(items.count) items; \(o.runs) runs per figure; machine: \(ProcessInfo.processInfo.activeProcessorCount) cores")
        var rows: [Row] = []
        let daemon = try Daemon()
        defer { daemon.stop() }

        // 1. Donation throughput vs raw FTS5 insert (same durability, batches of 500).
        var raw: [Double] = []
        var store: [Double] = []
        var donation: [Int: [Double]] = [1: [], 4: []]
        for run in 0..<o.runs {
            raw.append(try rawInsertBaseline(items, batch: 500))
            store.append(try storeInsert(items, batch: 500))
            for clients in [1, 4] {
                donation[clients]!.append(try await donate(items, socket: daemon.socket, bundle: "bench.donate\(clients).r\(run)", clients: clients, batch: 500))
            }
        }
        rows.append(Row(scenario: "raw FTS5 insert (in-process baseline)", figure: Figure(values: raw), unit: "items/s", baseline: nil, higherIsBetter: true))
        rows.append(Row(scenario: "IndexStore in-process (no socket)", figure: Figure(values: store), unit: "items/s",
            baseline: Figure(values: raw), higherIsBetter: true))
        for clients in [1, 4] {
            rows.append(Row(scenario: "donation, \(clients) client\(clients > 1 ? "s" : "")", figure: Figure(values: donation[clients]!),
                unit: "items/s", baseline: Figure(values: raw), higherIsBetter: true))
        }

        // 2. Query latency through the socket vs the same FTS5 query in-process.
        let index = SearchableIndex(bundleIdentifier: "bench.donate4.r0", socketPath: daemon.socket)
        let storePath = daemon.dir + "/state/indexes/bench.donate4.r0/_default.sqlite"
        let local = try Database(path: storePath)
        let term = items.count > 1000 ? "library" : "w1"
        let prefixText = items.count > 1000 ? "pars" : "w2"
        let scenarios: [(String, () async throws -> Void, String)] = [
            ("query: term", { try await firstPage("textContent == \"\(term)\"cdw", index) },
                "SELECT rowid FROM fts WHERE fts MATCH 'textContent : \"\(term)\"' LIMIT 20"),
            ("query: prefix", { try await firstPage("title == \"\(prefixText)*\"cdw", index) },
                "SELECT rowid FROM fts WHERE fts MATCH 'title : \"\(prefixText)\" *' LIMIT 20"),
            ("query: two predicates", { try await firstPage("title == \"\(prefixText)*\"cdw && textContent == \"\(term)\"cdw", index) },
                "SELECT rowid FROM fts WHERE fts MATCH 'title : \"\(prefixText)\" * AND textContent : \"\(term)\"' LIMIT 20"),
            ("user query, ranked + 5 suggestions", {
                var c = UserQueryContext()
                c.maxSuggestionCount = 5
                c.maxResultCount = 20
                _ = try await UserQuery(userQueryString: items.count > 1000 ? "json pars" : "w1 w2", userQueryContext: c, index: index).run()
            }, "SELECT rowid, bm25(fts) AS s FROM fts WHERE fts MATCH '\(items.count > 1000 ? "\"json\" AND \"pars\" *" : "\"w1\" AND \"w2\" *")' ORDER BY s LIMIT 20"),
        ]
        for (name, socketQuery, sql) in scenarios {
            var through: [Double] = []
            var inProcess: [Double] = []
            for _ in 0..<10 { try await socketQuery() }
            for _ in 0..<o.queries {
                var t = now()
                try await socketQuery()
                through.append((now() - t) * 1000)
                t = now()
                _ = try local.rows(sql)
                inProcess.append((now() - t) * 1000)
            }
            let f = Figure(values: through)
            print(String(format: "  %@: p50 %.3f ms, p99 %.3f ms (in-process p50 %.3f ms)", name, f.median, f.percentile(0.99), Figure(values: inProcess).median))
            rows.append(Row(scenario: name + " p50", figure: f, unit: "ms", baseline: Figure(values: inProcess), higherIsBetter: false))
            rows.append(Row(scenario: name + " p99", figure: Figure(values: [f.percentile(0.99)]), unit: "ms", baseline: nil, higherIsBetter: false))
        }
        await index.close()

        // Table.
        print("")
        print("| scenario | median | min | max | unit | vs baseline |")
        print("|---|---:|---:|---:|---|---:|")
        for r in rows {
            let ratio = r.ratio.map { String(format: "%.2f x", $0) } ?? ""
            print(String(format: "| %@ | %.3f | %.3f | %.3f | %@ | %@ |", r.scenario, r.figure.median, r.figure.min, r.figure.max, r.unit, ratio))
        }
        let json: JSONValue = [
            "corpus": .string(corpusName), "items": .number(Double(items.count)), "runs": .number(Double(o.runs)),
            "results": .array(rows.map { r in
                var e: [String: JSONValue] = [
                    "scenario": .string(r.scenario), "median": .number(r.figure.median), "min": .number(r.figure.min),
                    "max": .number(r.figure.max), "unit": .string(r.unit),
                ]
                if let ratio = r.ratio { e["ratioToBaseline"] = .number(ratio) }
                return .object(e)
            }),
        ]
        try Data(json.serialized(sortedKeys: true)).write(to: URL(fileURLWithPath: o.output))
        print("\nwrote \(o.output)")
    }
}
