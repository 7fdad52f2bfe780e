import Foundation
import SearchlightKit

// searchlight-bench: speed as a measured property (the performance issue). Every scenario runs
// its baseline in the same process and run, so a ratio survives a noisy machine. Prints a
// Markdown table (medians with min and max), writes bench-results.json and bench-chart.svg.

@main
struct Bench {
    static func main() async throws {
        signal(SIGPIPE, SIG_IGN)
        if CommandLine.arguments.dropFirst().first == "delegate-writer" {
            DelegateBench.writerMain(Array(CommandLine.arguments.dropFirst(2)))
        }
        let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
        let corpus = try options.corpus.map(Corpus.load(path:)) ?? Corpus.synthetic(count: options.synthetic)
        progress("corpus: \(corpus.name), \(corpus.entries.count) items; \(options.runs) runs per figure; "
            + "reindex sizes \(options.sizes.map(sizeLabel).joined(separator: ", ")); \(ProcessInfo.processInfo.activeProcessorCount) cores")
        // The in-process scenarios alone start no daemon, so they run under valgrind (whose
        // reserved descriptors break Foundation's `Process`).
        if options.scenarios.isSubset(of: [.store, .fill, .ranked, .apps, .refineOrder]) {
            var rows: [Row] = []
            if options.scenarios.contains(.ranked) { rows += try RankedBench.run(options: options, corpus: corpus) }
            if options.scenarios.contains(.apps) { rows += try AppsBench(options: options, corpus: corpus, dir: "/tmp/slbench-apps-\(getpid())").run() }
            if options.scenarios.contains(.store) { rows += try BenchRun.storeOnly(options: options, corpus: corpus) }
            if options.scenarios.contains(.fill) { rows += try StoreFill.run(options: options, corpus: corpus) }
            if options.scenarios.contains(.refineOrder) {
                rows += try RefineOrderBench(options: options, corpus: corpus, dir: "/tmp/slbench-refine-order-\(getpid())").run()
            }
            print("\n" + Report.table(rows))
            try Report.write(rows, corpus: corpus, options: options)
            print("\nwrote \(options.output) and \(options.chart)")
            return
        }
        let run = try BenchRun(options: options, corpus: corpus)
        defer {
            let keep = options.keep || options.daemonState != nil
            run.daemon.stop(remove: !keep)
            if keep { print("kept \(run.dir)") }
        }
        if options.scenarios.contains(.store) { try run.storeOnly() }
        if options.scenarios.contains(.fill) { run.rows += try StoreFill.run(options: options, corpus: corpus) }
        if options.scenarios.contains(.donation) { try await run.donation() }
        if options.scenarios.contains(.query) { try await run.corpusQueries() }
        if options.scenarios.contains(.fresh) {
            // A daemon of its own, that logs each user query's thread-CPU time. Its directory is a
            // new one in /tmp, or SEARCHLIGHT_BENCH_FRESH_DIR (kept: a 1M run's index is large).
            let freshDir = ProcessInfo.processInfo.environment["SEARCHLIGHT_BENCH_FRESH_DIR"]
            let fresh = try Daemon(dir: freshDir, environment: ["SEARCHLIGHT_QUERY_CPU_LOG": "1"])
            defer { fresh.stop(remove: freshDir == nil) }
            if let compare = ProcessInfo.processInfo.environment["SEARCHLIGHT_BENCH_FRESH_BEFORE"] {
                // A measuring aid: `NAME=VALUE` for a second daemon, the two alternated run by run
                // (the rows of each run apart, the progress lines give every figure).
                // `NAME=VALUE[,NAME=VALUE…]`.
                var environment = ["SEARCHLIGHT_QUERY_CPU_LOG": "1"]
                for pair in compare.split(separator: ",") {
                    let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
                    environment[parts[0]] = parts.count > 1 ? parts[1] : ""
                }
                let before = try Daemon(dir: freshDir.map { $0 + "-before" }, environment: environment)
                defer { before.stop(remove: freshDir == nil) }
                var one = options
                one.runs = 1
                for r in 0..<options.runs {
                    var a = FreshBench(options: one, corpus: corpus, daemon: fresh, label: " (after, round \(r + 1))")
                    var b = FreshBench(options: one, corpus: corpus, daemon: before, label: " (before: \(compare), round \(r + 1))")
                    a.bundlePrefix = "bench.after\(r)."
                    b.bundlePrefix = "bench.before\(r)."
                    if r % 2 == 0 { run.rows += try await b.run() + a.run() } else { run.rows += try await a.run() + b.run() }
                }
            } else {
                run.rows += try await FreshBench(options: options, corpus: corpus, daemon: fresh).run()
            }
            if options.compareFresh {
                let before = try Daemon(environment: ["SEARCHLIGHT_RANKED_FRESH": "0", "SEARCHLIGHT_QUERY_CPU_LOG": "1"])
                defer { before.stop() }
                run.rows += try await FreshBench(options: options, corpus: corpus, daemon: before, label: " (no fresh segments: before)").run()
            }
        }
        if options.scenarios.contains(.reindex) { try await run.reindexAll() }
        if options.scenarios.contains(.daemon) { try await run.daemonCost() }
        if options.scenarios.contains(.throttle) { try await run.throttleReaction() }
        if options.scenarios.contains(.background) { try await run.backgroundLoad() }
        if options.scenarios.contains(.maintenance) { try await run.maintenanceCost() }
        if options.scenarios.contains(.semantic) {
            run.rows += try await SemanticBench(options: options, corpus: corpus, dir: run.dir + "/semantic-bench").run()
        }
        if options.scenarios.contains(.relevance) {
            run.rows += try await SemanticBench(options: options, corpus: corpus, dir: run.dir + "/relevance-bench").relevanceOnly()
        }
        if options.scenarios.contains(.refined) {
            run.rows += try await RefineBench(options: options, corpus: corpus, dir: options.keepState ?? run.dir + "/refine-bench",
                count: min(options.refineItems ?? .max, corpus.entries.count), full: true, keep: options.keepState != nil).run()
        }
        if options.scenarios.contains(.apps) { run.rows += try AppsBench(options: options, corpus: corpus, dir: run.dir + "/apps-bench").run() }
        if options.scenarios.contains(.refineOrder) {
            run.rows += try RefineOrderBench(options: options, corpus: corpus, dir: run.dir + "/refine-order-bench").run()
        }
        if options.scenarios.contains(.refineOrderDaemon) {
            run.rows += try await RefineOrderDaemonBench(options: options, corpus: corpus, dir: run.dir + "/refine-order-daemon-bench").run()
        }
        if options.scenarios.contains(.delegate) {
            run.rows += try await DelegateBench(daemon: run.daemon, dir: run.dir, runs: options.runs).run()
        }
        print("\n" + Report.table(run.rows))
        try Report.write(run.rows, corpus: corpus, options: options)
        print("\nwrote \(options.output) and \(options.chart)")
    }
}
