import Foundation

/// The bench's command line. Scale is chosen here: the corpus (shared file or synthetic), the
/// reindex sizes, the number of runs per figure, which scenarios run.
struct Options {
    enum Scenario: String, CaseIterable {
        case donation, query, reindex, daemon, throttle, maintenance
        /// Only the in-process halves of the donation scenario (raw FTS5 and IndexStore), side
        /// by side: the loop to run under a profiler while working on the store. Not in the default set.
        case store
        /// The reindex-all write path in-process, filled to the largest size (`StoreFill`). Not in the default set.
        case fill
        /// The store delegate (SearchlightSQLite): its triggers' cost in the app's inserts, a
        /// history backlog's throughput, commit-to-indexed lag (same process and another one).
        case delegate
        /// The ranked index in-process: its build and its top 20 against the exhaustive ranking (`RankedBench`). Not in the default set.
        case ranked
        /// Semantic search through the daemon: donation cost of the static vectors, hybrid query
        /// latency, the debtags relevance set lexical against hybrid (`SemanticBench`).
        case semantic
        /// The debtags relevance rows of `semantic` alone (a daemon with the static table only:
        /// lexical, static hybrid, vectors only), in minutes. Not in the default set.
        case relevance
        /// User queries on a 20 000-item index, quiet and while a migration, a reindex-all and idle
        /// maintenance with refinement run beside three CPU hogs (`BackgroundLoadBench`).
        case background
        /// Refinement of the whole corpus through the daemon and the relevance set before and
        /// after it (`RefineBench`, full): half an hour or more of CPU. Not in the default set.
        case refined
        /// Search across apps in-process (`AppsBench`): the corpus over six apps' indexes and in
        /// one; relevance, query latency and codespell corrections, each both ways.
        case apps
        /// Refinement where users look first against rowid order, in-process, on the corpus
        /// after a user session (`RefineOrderBench`): items/s and the share of hits refined after
        /// `--refine-minutes` (1 by default; the figure is 10).
        case refineOrder = "refine-order"
        /// The same through the real daemon's idle maintenance after a user session through the
        /// SDK (`RefineOrderDaemonBench`): `--refine-minutes` idle. Not in the default set.
        case refineOrderDaemon = "refine-order-daemon"
        /// User queries from the moment an app's donation of the corpus (or `--sizes`) is
        /// acknowledged until the ranked index settles, against the settled index (`FreshBench`).
        case fresh
    }

    /// A corpus file (`--corpus`, or `SEARCHLIGHT_CORPUS`); nil: a synthetic corpus.
    var corpus: String? = ProcessInfo.processInfo.environment["SEARCHLIGHT_CORPUS"]
    /// Items in the synthetic corpus (the donation and 64k-query scenarios).
    var synthetic = 64_000
    /// Reindex-all sizes; the largest is also the large query size and the RSS figure.
    var sizes = [10_000, 100_000, 1_000_000]
    /// Whether `--sizes` was given (the fresh scenario then donates those sizes, else the corpus).
    var sizesGiven = false
    var runs = 3
    /// Reindex runs per size above 100k (each is a million-item rebuild).
    var largeRuns = 3
    var queries = 300
    var clients = [1, 4, 16]
    var batch = 500
    var scenarios: Set<Scenario> = [.donation, .query, .reindex, .daemon, .throttle, .maintenance, .delegate, .semantic, .background, .apps, .refineOrder, .fresh]
    /// `--compare-priority`: the background scenario's loaded phase once more with the daemon's
    /// background threads at the normal priority (`SEARCHLIGHT_BACKGROUND_NICE=0`), in the same run.
    var comparePriority = false
    /// `--compare-fresh`: the fresh scenario once more, in the same run, on a daemon that builds the
    /// ranked index only once the writes stop (`SEARCHLIGHT_RANKED_FRESH=0`: the before).
    var compareFresh = false
    /// Seconds of the idle window in which the daemon's CPU and wakeups are counted.
    var idleSeconds = 30.0
    var output = "bench-results.json"
    var chart = "bench-chart.svg"
    /// The Packages sample extension built in release (`swift build -c release --package-path Extensions/Packages`).
    var packagesExtension = "Extensions/Packages/.build/release/packages-extension"
    /// Leave the daemon's directory (indexes, status file, unit) in place, to look at afterwards.
    var keep = false
    /// `--scenarios ranked`: an existing index file to open instead of filling one (it is written to).
    var indexFile: String?
    /// The user queries of the query and ranked scenarios (`--user-query`, repeatable); empty: the default set.
    var userQueries: [String] = []
    /// `--scenarios ranked` without the exhaustive query beside each (to profile the ranked path alone).
    var exhaustiveBaseline = true
    /// `--scenarios ranked --no-check`: not even the first query's answer compared with the
    /// exhaustive one (at 1M under callgrind that one comparison takes minutes).
    var exhaustiveCheck = true
    /// `--scenarios ranked`: items to fill the store with (past the corpus's end, copies under new
    /// names, as the reindex scenario makes them); nil: the corpus once.
    var rankedItems: Int?
    /// `--scenarios ranked`: which parts run (`term`, `prefix`: query.search first pages, `top`: the
    /// user queries' top 20, `suggest`: the user queries with 5 suggestions), to profile one alone.
    var rankedParts: Set<String> = Options.allRankedParts
    static let allRankedParts: Set<String> = ["term", "prefix", "top", "suggest"]
    /// `--scenarios refined`: the daemon's directory to keep (its refined index), and to reuse when
    /// it is there and fully refined (no donation, no refinement: the relevance rows in minutes).
    var keepState: String?
    /// `--daemon-state DIR`: the main daemon's directory, kept and reused (the reindex of a size
    /// whose index already holds that many items is skipped), so that the 1M rows come in minutes.
    var daemonState: String?
    /// `--scenarios refined`: the first N corpus items only (a check of the scenario end to end).
    var refineItems: Int?
    /// `--refine-boost NICE` (hidden: for measuring on a machine shared with other sessions): the
    /// refined and refine-order-daemon scenarios give their daemon's refinement this share of the
    /// CPU. `nice -n -10` on the bench does not reach it: the daemon lowers its background threads
    /// to an absolute nice 10, libdispatch sets its workers' nice from their QoS (the daemon is
    /// spawned from one at 0), and with the kernel's autogroups a thread's nice only ranks it
    /// within its own session. So the daemon runs with `SEARCHLIGHT_BACKGROUND_NICE=0` and this
    /// value is written to its session's `/proc/PID/autogroup` (root only; the shipped defaults
    /// are untouched).
    var refineBoost: Int?
    /// `--scenarios refine-order`: minutes of refinement per order (`--refine-minutes`).
    var refineMinutes = 1.0
    /// The relevance set of the semantic and refined scenarios (`--judgements`): by default the
    /// full debtags set, its tuning and held-out halves reported apart as well.
    var judgements = Options.defaultJudgements
    static let defaultJudgements = "Scripts/semantic/relevance/debtags-all.jsonl"
    /// `--scenarios apps`: codespell's list of common misspellings (Debian's `codespell` package).
    var misspellings = "/usr/lib/python3/dist-packages/codespell_lib/data/dictionary.txt"
    /// `--scenarios apps`: at most this many misspellings measured (an even sample of the list).
    var misspellingSample = 1000
    /// `--scenarios apps`: which parts run (`relevance`, `latency`, `corrections`), to profile one alone.
    var appsParts: Set<String> = Options.allAppsParts
    static let allAppsParts: Set<String> = ["relevance", "latency", "corrections"]
    /// `--scenarios apps`: the user queries whose latency is measured (`lexical`, `hybrid`, `desktop`).
    var appsModes: Set<String> = Options.allAppsModes
    static let allAppsModes: Set<String> = ["lexical", "hybrid", "desktop"]

    static let usage = """
        usage: searchlight-bench [--corpus FILE.jsonl[.gz]] [--synthetic N] [--sizes 10k,100k,1m] [--runs N]
                                 [--large-runs N] [--queries N] [--clients 1,4,16] [--scenarios donation,query,reindex,daemon,throttle,maintenance,delegate,store,fill,ranked,semantic,relevance,refined,background,apps,refine-order,refine-order-daemon,fresh]
                                 [--idle-seconds S] [--quick] [--keep] [--daemon-state DIR] [--index FILE] [--user-query TEXT]... [--no-exhaustive] [--no-check] [--ranked-items N] [--ranked-parts term,prefix,top,suggest]
                                 [--keep-state DIR] [--refine-items N] [--refine-minutes M] [--judgements FILE.jsonl] [--misspellings FILE] [--misspelling-sample N] [--apps-parts relevance,latency,corrections] [--apps-modes lexical,hybrid,desktop] [--extension PATH] [--output FILE.json] [--chart FILE.svg]
                                 [--compare-priority] [--compare-fresh]

          --corpus      Debian-shaped JSON lines (id, title, contentDescription, textContent, keywords, domain)
                        or wire items; without it a synthetic corpus with Zipf word frequencies
          --synthetic   size of the synthetic corpus (default 64k)
          --sizes       reindex-all sizes through the Packages extension; the largest is the large query size;
                        with --scenarios fresh, the sizes donated (default: the corpus)
          --quick       1 run, sizes 10k,100k, 100 queries, 5 s idle window: for iterating
          --keep        leave the daemon's state directory (its indexes) in /tmp and print its path
          --daemon-state  the daemon's directory: kept, and reused by the next run (a reindex-all whose index
                        already holds that many items is skipped). The 1M rows in minutes:
                        --scenarios reindex,query,daemon --sizes 1m --daemon-state DIR
          --index       with --scenarios ranked: an index file to open (written to) instead of filling one
          --user-query  a user query of the query and ranked scenarios instead of the default set (repeatable)
          --no-exhaustive  with --scenarios ranked: time the ranked index alone (for profiling)
          --no-check       as --no-exhaustive, and the first answer is not compared with the exhaustive one either
          --ranked-items   with --scenarios ranked: fill the store with N items (copies past the corpus's end)
          --ranked-parts   with --scenarios ranked: the parts to run (term, prefix, top, suggest; default all)
          --keep-state     with --scenarios refined: keep the daemon's directory in DIR; when DIR holds a fully
                           refined index from an earlier run, reuse it (no donation, no refinement, no speed rows);
                           when it holds the same items partly refined, resume the refinement
          --refine-items   with --scenarios refined: only the first N corpus items (to check the scenario quickly)
          --refine-minutes with --scenarios refine-order, refine-order-daemon: minutes of refinement per order, or
                           idle minutes of the daemon (default 1; the
                           issue's figure: 10)
          --compare-priority  with --scenarios background: the loaded phase again with the daemon's background
                           threads at the normal priority (SEARCHLIGHT_BACKGROUND_NICE=0), for the before/after
          --compare-fresh  with --scenarios fresh: also on a daemon without fresh segments (SEARCHLIGHT_RANKED_FRESH=0:
                           the ranked index built once the writes stop), for the before/after
          --judgements     with --scenarios semantic,relevance,refined: the relevance set (default
                           Scripts/semantic/relevance/debtags-all.jsonl: tuning and held-out halves, each reported)
          --misspellings   with --scenarios apps: codespell's dictionary.txt (misspelling->correction lines;
                           default: where Debian's codespell package puts it)
          --misspelling-sample  with --scenarios apps: at most N misspellings measured (default 1000)
          --apps-parts     with --scenarios apps: the parts to run (relevance, latency, corrections; default all)
          --apps-modes     with --scenarios apps: the user queries timed (lexical, hybrid, desktop; default all)
          --keep-state     with --scenarios apps: keep the seven indexes in DIR, and reuse them when DIR holds them
        """

    static func parse(_ arguments: [String]) -> Options {
        var o = Options()
        var args = arguments[...]
        func value(_ flag: String) -> String {
            guard let v = args.popFirst() else { fatal("\(flag) needs a value") }
            return v
        }
        func count(_ flag: String) -> Int {
            let text = value(flag)
            guard let n = parseCount(text), n > 0 else { fatal("\(flag) takes a positive count like 500, 64k or 1m, not \"\(text)\"") }
            return n
        }
        func counts(_ flag: String) -> [Int] {
            let text = value(flag)
            let list = text.split(separator: ",").compactMap { parseCount(String($0)) }.filter { $0 > 0 }
            guard !list.isEmpty else { fatal("\(flag) takes a comma-separated list like 10k,100k,1m, not \"\(text)\"") }
            return list
        }
        while let a = args.popFirst() {
            switch a {
            case "--corpus": o.corpus = value(a)
            case "--synthetic", "--generate": o.synthetic = count(a); o.corpus = nil
            case "--sizes": o.sizes = counts(a).sorted(); o.sizesGiven = true
            case "--runs": o.runs = count(a)
            case "--large-runs": o.largeRuns = count(a)
            case "--queries": o.queries = max(20, count(a))
            case "--clients": o.clients = counts(a)
            case "--batch": o.batch = count(a)
            case "--idle-seconds": o.idleSeconds = Double(count(a))
            case "--extension": o.packagesExtension = value(a)
            case "--keep": o.keep = true
            case "--index": o.indexFile = value(a)
            case "--user-query": o.userQueries.append(value(a))
            case "--compare-priority": o.comparePriority = true
            case "--compare-fresh": o.compareFresh = true
            case "--no-exhaustive": o.exhaustiveBaseline = false
            case "--no-check": o.exhaustiveBaseline = false; o.exhaustiveCheck = false
            case "--ranked-items": o.rankedItems = count(a)
            case "--keep-state": o.keepState = value(a)
            case "--daemon-state": o.daemonState = value(a)
            case "--refine-items": o.refineItems = count(a)
            case "--refine-boost":
                guard let n = Int(value(a)), (-20...19).contains(n) else { fatal("--refine-boost takes a nice value from -20 to 19") }
                o.refineBoost = n
            case "--refine-minutes":
                guard let m = Double(value(a)), m > 0, m <= 600 else { fatal("--refine-minutes takes minutes, more than 0 and at most 600") }
                o.refineMinutes = m
            case "--judgements": o.judgements = value(a)
            case "--misspellings": o.misspellings = value(a)
            case "--misspelling-sample": o.misspellingSample = count(a)
            case "--apps-parts":
                let text = value(a)
                let parts = Set(text.split(separator: ",").map(String.init))
                guard !parts.isEmpty, parts.isSubset(of: allAppsParts) else {
                    fatal("--apps-parts takes a list of relevance, latency, corrections, not \"\(text)\"")
                }
                o.appsParts = parts
            case "--apps-modes":
                let text = value(a)
                let modes = Set(text.split(separator: ",").map(String.init))
                guard !modes.isEmpty, modes.isSubset(of: allAppsModes) else {
                    fatal("--apps-modes takes a list of lexical, hybrid, desktop, not \"\(text)\"")
                }
                o.appsModes = modes
            case "--ranked-parts":
                let text = value(a)
                let parts = Set(text.split(separator: ",").map(String.init))
                guard !parts.isEmpty, parts.isSubset(of: allRankedParts) else {
                    fatal("--ranked-parts takes a list of term, prefix, top, suggest, not \"\(text)\"")
                }
                o.rankedParts = parts
            case "--output": o.output = value(a)
            case "--chart": o.chart = value(a)
            case "--quick":
                o.runs = 1
                o.largeRuns = 1
                o.sizes = [10_000, 100_000]
                o.queries = 100
                o.idleSeconds = 5
            case "--scenarios":
                let text = value(a)
                var chosen = Set<Scenario>()
                for name in text.split(separator: ",") {
                    guard let s = Scenario(rawValue: String(name)) else {
                        fatal("--scenarios takes a list of \(Scenario.allCases.map(\.rawValue).joined(separator: ", ")), not \"\(name)\"")
                    }
                    chosen.insert(s)
                }
                o.scenarios = chosen
            case "--help", "-h":
                print(usage)
                exit(0)
            default: fatal("unknown option \(a)\n\(usage)")
            }
        }
        return o
    }

    /// `500`, `64k`, `1m` (k = 1 000, m = 1 000 000).
    static func parseCount(_ text: String) -> Int? {
        let lower = text.lowercased()
        if lower.hasSuffix("k") { return Int(lower.dropLast()).map { $0 * 1000 } }
        if lower.hasSuffix("m") { return Int(lower.dropLast()).map { $0 * 1_000_000 } }
        return Int(lower)
    }
}

func fatal(_ message: String) -> Never {
    FileHandle.standardError.write(Data("searchlight-bench: \(message)\n".utf8))
    exit(2)
}

/// `10k`, `1m`, `63666`: the short form used in scenario names.
func sizeLabel(_ n: Int) -> String {
    if n >= 1_000_000, n % 1_000_000 == 0 { return "\(n / 1_000_000)M" }
    if n >= 1000, n % 1000 == 0 { return "\(n / 1000)k" }
    if n >= 10_000 { return "\(Int((Double(n) / 1000).rounded()))k" }
    return "\(n)"
}
