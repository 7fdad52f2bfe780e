import Foundation
import SearchlightKit

/// User queries right after an app donated (`--scenarios fresh`, issue 32 item 2): an app donates
/// N items through the SDK (four clients, batches of `--batch`), and the moment its last call is
/// acknowledged the same app starts searching, and keeps searching until the ranked index has
/// settled (every item in it, no build or merge left: `admin.status`'s `rankedIndex`); then the
/// same queries again on the settled index. The rows: the queries until settled ("fresh"; at
/// least the first `minimumFresh`) against the settled ones, p50 and p99, and the seconds from the
/// last acknowledgement to settled. N is the corpus by default, `--sizes` when given (past the
/// corpus's end, copies under new names).
struct FreshBench {
    let options: Options
    let corpus: Corpus
    let daemon: Daemon
    /// Added to the rows' names (the `--compare-fresh` daemon's).
    var label = ""
    /// The bundles' names begin with this (two daemons alternated must not share a name).
    var bundlePrefix = "bench."
    /// The fresh window holds at least this many queries, however soon the index settles.
    static let minimumFresh = 200

    struct Measured {
        var fresh: [Double] = []
        var settled: [Double] = []
        /// The daemon's thread-CPU ms of each query (`SEARCHLIGHT_QUERY_CPU_LOG`), fresh and settled.
        var freshCPU: [Double] = []
        var settledCPU: [Double] = []
        /// The `query cpu` lines in full (daemon-side wall, run-queue wait, sleeps).
        var freshLines: [QueryCPU] = []
        var settledLines: [QueryCPU] = []
        var settleSeconds = 0.0
        var donateSeconds = 0.0
    }

    func run() async throws -> [Row] {
        var rows: [Row] = []
        let sizes = options.sizesGiven ? options.sizes : [corpus.entries.count]
        for size in sizes {
            var runs: [Measured] = []
            for run in 0..<(size > 100_000 ? options.largeRuns : options.runs) {
                let m = try await measure(size: size, bundle: "\(bundlePrefix)fresh\(size).r\(run)")
                runs.append(m)
                let f = Figure(m.fresh), s = Figure(m.settled), fc = Figure(m.freshCPU), sc = Figure(m.settledCPU)
                progress(String(format: "fresh%@ %@ run %d: donated in %.1f s; fresh p50/p99 %.3f / %.3f ms (%d queries) vs settled "
                    + "p50/p99 %.3f / %.3f ms; daemon thread CPU fresh p50/p99 %.3f / %.3f ms vs settled %.3f / %.3f ms; "
                    + "settled %.2f s after the last donation; load %@", self.label, sizeLabel(size), run + 1, m.donateSeconds,
                    f.percentile(0.5), f.percentile(0.99), m.fresh.count, s.percentile(0.5), s.percentile(0.99),
                    fc.percentile(0.5), fc.percentile(0.99), sc.percentile(0.5), sc.percentile(0.99), m.settleSeconds, loadAverage()))
                // The first queries after the donation: the client's wall and the daemon's.
                let first = zip(m.fresh.prefix(3), m.freshLines.prefix(3)).map {
                    String(format: "%.2f (%.2f, CPU %.2f, %d sleeps)", $0.0, $0.1.wall, $0.1.cpu, $0.1.voluntary)
                }
                progress("  first fresh queries, ms (in the daemon: wall, thread CPU, sleeps): " + first.joined(separator: ", "))
                // Where the wall clock went: inside the daemon (its wall, the run-queue wait, the
                // sleeps) or outside it (the socket, the client's own scheduling).
                for (phase, lines) in [("fresh", m.freshLines), ("settled", m.settledLines)] where !lines.isEmpty {
                    let wall = Figure(lines.map(\.wall)), runq = Figure(lines.map(\.runQueue)), wake = Figure(lines.map(\.runQueueBefore))
                    let asleep = Figure(lines.map { max(0, $0.wall - $0.cpu - $0.runQueue) })
                    progress(String(format: "  %@: in the daemon wall p50/p99 %.3f / %.3f ms, run-queue wait p50/p99 %.3f / %.3f ms, "
                        + "asleep p50/p99 %.3f / %.3f ms; the thread's run-queue wait before it (wake-up) p50/p99 %.3f / %.3f ms; "
                        + "%.1f %% of queries slept", phase, wall.percentile(0.5), wall.percentile(0.99),
                        runq.percentile(0.5), runq.percentile(0.99), asleep.percentile(0.5), asleep.percentile(0.99),
                        wake.percentile(0.5), wake.percentile(0.99),
                        100 * Double(lines.filter { $0.voluntary > 0 }.count) / Double(lines.count)))
                }
            }
            let label = sizeLabel(size)
            for (name, p) in [("p50", 0.5), ("p99", 0.99)] {
                // The settled row, then the fresh one against it (the ≤ 3× target up to 200k items).
                func pair(fresh: Figure, settled: Figure, settledText: String, freshText: String, series: String) {
                    rows.append(Row(scenario: "user query top 20 lexical at \(label), \(settledText)\(name)\(self.label)", figure: settled,
                        unit: "ms", higherIsBetter: false, size: size, series: "settled \(series)\(name)"))
                    var row = Row(scenario: "user query top 20 lexical at \(label), \(freshText)\(name)\(self.label)", figure: fresh,
                        unit: "ms", baseline: settled, higherIsBetter: false, size: size, series: "fresh \(series)\(name)")
                    if size < 200_000 {
                        row.target = "≤ 3× settled"
                        row.met = fresh.median <= 3 * settled.median
                    }
                    rows.append(row)
                }
                pair(fresh: Figure(runs.map { Figure($0.fresh).percentile(p) }), settled: Figure(runs.map { Figure($0.settled).percentile(p) }),
                     settledText: "settled index, ", freshText: "fresh (from the last donation until settled), ", series: "")
                guard runs.allSatisfy({ !$0.freshCPU.isEmpty && !$0.settledCPU.isEmpty }) else { continue }
                pair(fresh: Figure(runs.map { Figure($0.freshCPU).percentile(p) }), settled: Figure(runs.map { Figure($0.settledCPU).percentile(p) }),
                     settledText: "settled index, daemon thread CPU ", freshText: "fresh, daemon thread CPU ", series: "CPU ")
            }
            rows.append(Row(scenario: "time until settled at \(label) (last donation acknowledged → ranked index complete)\(self.label)",
                figure: Figure(runs.map(\.settleSeconds)), unit: "s", higherIsBetter: false, size: size, series: "time until settled"))
        }
        return rows
    }

    private func measure(size: Int, bundle: String) async throws -> Measured {
        var m = Measured()
        let start = now()
        try await donate(count: size, bundle: bundle)
        let donated = now()
        hook("fresh")
        _ = daemon.takeQueryCPU(count: 0)
        m.donateSeconds = donated - start
        let index = SearchableIndex(bundleIdentifier: bundle, socketPath: daemon.socket)
        let admin = SearchlightConnection(role: .admin, socketPath: daemon.socket)
        defer { Task { await admin.close(); await index.close() } }
        let texts = options.userQueries.isEmpty ? RankedBench.queries(corpus) : options.userQueries
        var k = 0
        func query() async throws -> Double {
            defer { k += 1 }
            var c = UserQueryContext()
            c.semanticSearch = false
            c.maxSuggestionCount = 0
            c.maxResultCount = 20
            c.maxRankedResultCount = 20
            c.fetchAttributes = ["title"]
            let text = texts[k % texts.count]
            return try await milliseconds { _ = try await UserQuery(userQueryString: text, userQueryContext: c, index: index).run() }
        }
        // Fresh: query at once and without pause until settled, while a task of its own (on the
        // admin connection) looks at the status every 100 ms: at 1M one status call takes about a
        // second, and polling between queries left ~45 queries in the fresh window. A line per
        // second says how the queries went and what the ranked index held at the last look.
        let poll = FreshPoll()
        let poller = Task {
            while !Task.isCancelled {
                let looked = now()
                do {
                    let status = try await rankedStatus(admin, bundle: bundle)
                    poll.set(status, at: now())
                    if status.settled { return }
                } catch {
                    poll.fail("\(error)")
                    return
                }
                let rest = 0.1 - (now() - looked)
                if rest > 0 { try? await Task.sleep(nanoseconds: UInt64(rest * 1e9)) }
            }
        }
        defer { poller.cancel() }
        var settledAt: Double?
        var window: [Double] = []
        var windowStart = now()
        while settledAt == nil || m.fresh.count < Self.minimumFresh {
            let t = try await query()
            m.fresh.append(t)
            window.append(t)
            if settledAt == nil {
                let seen = poll.get()
                if let e = seen.error { fatal("the status of \(bundle) could not be read: \(e)") }
                if let status = seen.status, status.settled { settledAt = seen.at }
                if now() - windowStart >= 1 || settledAt != nil {
                    let w = Figure(window)
                    let status = seen.status ?? (false, 0, -1)
                    progress(String(format: "  +%.1f s: %d queries, p50 %.3f ms, max %.1f ms; %d segments, %d pending%@", now() - donated,
                        window.count, w.percentile(0.5), w.max, status.segments, status.pending, status.settled ? ", settled" : ""))
                    window.removeAll()
                    windowStart = now()
                }
            }
            if now() - donated > 3600 { fatal("the ranked index of \(bundle) did not settle within an hour") }
        }
        m.settleSeconds = settledAt! - donated
        m.freshLines = daemon.takeQueryCPU(count: m.fresh.count)
        m.freshCPU = m.freshLines.map(\.cpu)
        hook("settled")
        for _ in 0..<(options.queries * texts.count / 2) { m.settled.append(try await query()) }
        m.settledLines = daemon.takeQueryCPU(count: m.settled.count)
        m.settledCPU = m.settledLines.map(\.cpu)
        hook("done")
        return m
    }

    /// `SEARCHLIGHT_BENCH_FRESH_HOOK`: a shell command run (and waited for) with the phase that
    /// starts, `fresh`, `settled` or `done`: say, `callgrind_control` to profile each phase alone.
    private func hook(_ phase: String) {
        guard let command = ProcessInfo.processInfo.environment["SEARCHLIGHT_BENCH_FRESH_HOOK"] else { return }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", command + " " + phase]
        do { try p.run(); p.waitUntilExit() } catch { progress("the fresh hook did not run: \(error)") }
    }

    /// `settled`: every item in the ranked index and nothing left for the maintainer to build,
    /// merge or clean up.
    private func rankedStatus(_ admin: SearchlightConnection, bundle: String) async throws -> (settled: Bool, segments: Int, pending: Int) {
        let status = try await admin.call("admin.status", ["bundle": .string(bundle)])
        guard let ranked = status["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first?["rankedIndex"] else {
            fatal("admin.status says nothing of the ranked index of \(bundle)")
        }
        if let e = ranked["lastError"]?.stringValue { fatal("the ranked index of \(bundle) failed to build: \(e)") }
        let pending = ranked["pending"]?.intValue ?? -1
        return (pending == 0 && (ranked["settled"]?.boolValue ?? true), ranked["segments"]?.intValue ?? 0, pending)
    }

    /// `count` corpus entries (copies past its end) donated by four SDK clients in batches.
    private func donate(count: Int, bundle: String) async throws {
        let clients = 4, batch = options.batch
        let corpus = self.corpus, socket = daemon.socket
        try await withThrowingTaskGroup(of: Void.self) { group in
            for c in 0..<clients {
                group.addTask {
                    let index = SearchableIndex(bundleIdentifier: bundle, socketPath: socket)
                    var i = c * batch
                    while i < count {
                        try await index.indexSearchableItems((i..<min(i + batch, count)).map { corpus.entry($0).searchableItem })
                        i += clients * batch
                    }
                    await index.close()
                }
            }
            try await group.waitForAll()
        }
    }
}

/// The fresh window's latest look at the ranked index's status, shared between the polling task
/// and the query loop.
private final class FreshPoll: @unchecked Sendable {
    private let lock = NSLock()
    private var status: (settled: Bool, segments: Int, pending: Int)?
    private var at = 0.0
    private var error: String?

    func set(_ s: (settled: Bool, segments: Int, pending: Int), at time: Double) { lock.withLock { status = s; at = time } }
    func fail(_ e: String) { lock.withLock { error = e } }
    func get() -> (status: (settled: Bool, segments: Int, pending: Int)?, at: Double, error: String?) { lock.withLock { (status, at, error) } }
}
