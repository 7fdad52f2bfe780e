import Foundation
import SearchlightKit

/// One bench run: the corpus, the daemon under test and the rows measured so far. Each scenario
/// is a method that appends its rows, its baseline measured in the same process and run.
final class BenchRun {
    let options: Options
    let corpus: Corpus
    let dir: String
    var daemon: Daemon
    var rows: [Row] = []
    /// Spawn-to-ready times of daemons on an empty state directory.
    var readyEmpty: [Double] = []
    let reindex: ReindexBench?
    /// The bundle whose index the 64k query scenario reads (filled by the donation scenario).
    var queryBundle: String?

    init(options: Options, corpus: Corpus) throws {
        self.options = options
        self.corpus = corpus
        dir = "/tmp/slbench-\(getpid())"
        try? FileManager.default.removeItem(atPath: dir)
        try FileManager.default.createDirectory(atPath: dir + "/units", withIntermediateDirectories: true)
        let extensionPath = URL(fileURLWithPath: options.packagesExtension).standardizedFileURL.path
        if options.scenarios.contains(.reindex) {
            if FileManager.default.isExecutableFile(atPath: extensionPath) {
                let r = ReindexBench(corpus: corpus, daemonDir: dir)
                try r.writeUnit(unitsDir: dir + "/units", extensionPath: extensionPath)
                reindex = r
            } else {
                progress("reindex: skipped, no Packages extension at \(extensionPath); build it with "
                    + "`swift build -c release --package-path Extensions/Packages` (make bench does)")
                reindex = nil
            }
        } else {
            reindex = nil
        }
        daemon = try Daemon(dir: dir)
        readyEmpty.append(daemon.readySeconds)
    }

    var itemsPerSecond: String { "items/s" }

    // MARK: - 1. Donation

    func donation() async throws {
        let items = corpus.entries.map(\.searchableItem)
        let size = items.count
        var raw: [Double] = [], store: [Double] = []
        var through: [Int: [Double]] = [:]
        for run in 0..<options.runs {
            raw.append(try Baselines.rawInsert(items, batch: options.batch))
            store.append(try Baselines.storeInsert(items, batch: options.batch))
            for clients in options.clients {
                let bundle = "bench.donate\(clients).r\(run)"
                through[clients, default: []].append(try await donate(items, socket: daemon.socket, bundle: bundle,
                    clients: clients, batch: options.batch))
                if clients == 4 || queryBundle == nil { queryBundle = bundle }
            }
            progress("donation run \(run + 1): raw \(Report.number(raw.last!, unit: itemsPerSecond)), store \(Report.number(store.last!, unit: itemsPerSecond)), "
                + options.clients.map { "\($0) clients \(Report.number(through[$0]!.last!, unit: itemsPerSecond))" }.joined(separator: ", ") + " items/s")
        }
        let rawFigure = Figure(raw)
        rows.append(Row(scenario: "raw FTS5 insert, batches of \(options.batch) (baseline)", figure: rawFigure, unit: itemsPerSecond,
            higherIsBetter: true, size: size, series: "raw FTS5 insert (in-process)"))
        rows.append(Row(scenario: "IndexStore in-process (no socket)", figure: Figure(store), unit: itemsPerSecond,
            baseline: rawFigure, higherIsBetter: true, size: size, series: "IndexStore in-process"))
        for clients in options.clients {
            let f = Figure(through[clients]!)
            var row = Row(scenario: "donation through the socket, \(clients) client\(clients > 1 ? "s" : "")", figure: f,
                unit: itemsPerSecond, baseline: rawFigure, higherIsBetter: true, size: size, series: "donation, \(clients) client\(clients > 1 ? "s" : "")")
            if clients == 4 {
                row.target = "≥ 0.80× raw"
                row.met = (row.ratio ?? 0) >= 0.8
            }
            rows.append(row)
        }
    }

    // MARK: - 3. Queries

    /// Query latency on the index of `bundle` holding `size` items. The table shows the sizes the
    /// targets name (the corpus, about 64k, and the largest); the chart every size.
    func queries(bundle: String, size: Int, inTable: Bool) async throws {
        let bench = QueryBench(corpus: corpus, queries: options.queries)
        let results = try await bench.run(socket: daemon.socket, bundle: bundle, path: daemon.indexPath(bundle: bundle), runs: options.runs)
        let large = size > 200_000
        for r in results {
            progress(String(format: "query %@ at %@: p50 %.3f ms, p99 %.3f ms (in-process p50 %.3f ms, p99 %.3f ms)", r.name, sizeLabel(size),
                Figure(r.p50).median, Figure(r.p99).median, Figure(r.baselineP50).median, Figure(r.baselineP99).median))
            var p50 = Row(scenario: "query \(r.name) at \(sizeLabel(size)), p50", figure: Figure(r.p50), unit: "ms",
                baseline: Figure(r.baselineP50), higherIsBetter: false, size: size, series: "\(r.name) p50")
            var p99 = Row(scenario: "query \(r.name) at \(sizeLabel(size)), p99", figure: Figure(r.p99), unit: "ms",
                baseline: Figure(r.baselineP99), higherIsBetter: false, size: size, series: "\(r.name) p99")
            let isUser = r.name.hasPrefix("user")
            if large {
                p99.target = "≤ 20 ms"
                p99.met = p99.figure.median <= 20
            } else if isUser {
                p99.target = "≤ 10 ms"
                p99.met = p99.figure.median <= 10
            } else if r.name == "term" || r.name == "prefix" {
                p50.target = "≤ 1 ms"
                p50.met = p50.figure.median <= 1
                p99.target = "≤ 5 ms"
                p99.met = p99.figure.median <= 5
            }
            // Sizes the targets do not name are charted and kept in the JSON, not put in the table.
            p50.inTable = inTable
            p99.inTable = inTable
            rows.append(p50)
            rows.append(p99)
        }
    }

    /// Queries at the corpus size, on the index the donation scenario filled (or a fresh one).
    func corpusQueries() async throws {
        let bundle: String
        if let queryBundle {
            bundle = queryBundle
        } else {
            bundle = "bench.query"
            _ = try await donate(corpus.entries.map(\.searchableItem), socket: daemon.socket, bundle: bundle, clients: 4, batch: options.batch)
        }
        try await queries(bundle: bundle, size: corpus.entries.count, inTable: true)
    }
}
