import Foundation
import SearchlightKit
import SearchlightStore

/// The ranked index in-process (`--scenarios ranked`, no daemon, so it runs under callgrind): the
/// store filled with the corpus (or `--index FILE` opened as it is), the ranked index built and
/// timed, then the user queries' top 20 by the ranked index and exhaustively, interleaved, with
/// the answers compared (they must be identical).
enum RankedBench {
    /// The user queries of the bench, as typed into a search box: a word being typed after a
    /// complete one, frequent complete words (tens of thousands of matches at 64k), a short
    /// prefix, two complete words.
    static func queries(_ corpus: Corpus) -> [String] {
        if corpus.name.hasPrefix("synthetic") {
            let w = ZipfWords.word(rank:)
            return [corpus.userText, w(3) + " ", w(12), "\(w(5)) \(w(30).prefix(4))", "\(w(8)) \(w(40)) ", String(w(2).prefix(2))]
        }
        return ["json pars", "library ", "python", "gtk theme", "web server ", "lib"]
    }

    static func run(options: Options, corpus: Corpus) throws -> [Row] {
        let dir = "/tmp/slbench-ranked-\(getpid())"
        defer { if options.indexFile == nil { try? FileManager.default.removeItem(atPath: dir) } }
        var storeOptions = StoreOptions()
        storeOptions.rankedIndexBuilds = false
        let path = options.indexFile ?? dir + "/b/_default.sqlite"
        let store = try IndexStore(path: path, options: storeOptions)
        defer { store.close() }
        // An index file given is filled only when empty, so that a large one is made once and
        // then profiled run after run.
        if options.indexFile == nil || store.count == 0 {
            let total = options.rankedItems ?? corpus.entries.count
            var i = 0
            while i < total {
                let batch = (i..<min(i + options.batch, total)).map { corpus.entry($0).searchableItem }
                _ = try store.applySync([.items(batch)])
                i += options.batch
            }
            progress("filled the store with \(total) items")
        }
        var rows: [Row] = []
        // SEARCHLIGHT_BENCH_RANKED_AS_IS=1: the index file's ranked index as it is (say, a copy of
        // a daemon's index taken while fresh segments were still settling), not built first.
        let env = ProcessInfo.processInfo.environment
        if env["SEARCHLIGHT_BENCH_RANKED_AS_IS"] == "1" {
            progress("ranked index as it is (not built)")
        } else {
            let build = try milliseconds { try store.buildRankedIndex() }
            progress(String(format: "ranked index of %d items built in %.0f ms", store.count, build))
            rows.append(Row(scenario: "ranked index build, \(sizeLabel(store.count)) items (in-process)", figure: Figure([build / 1000]),
                unit: "s", higherIsBetter: false))
        }
        // SEARCHLIGHT_BENCH_RANKED_POKE=1: a commit by another connection before each user query,
        // as while a build writes (a reader's caches start over after a commit).
        let poke: Database? = env["SEARCHLIGHT_BENCH_RANKED_POKE"] == "1" ? try Database(path: path) : nil
        try poke?.execute("CREATE TABLE IF NOT EXISTS bench_poke(x)")
        func pokeCommit() throws { _ = try poke?.run("INSERT INTO bench_poke VALUES (1)") }
        // query.search's first page in-process: the query parsed and compiled, the page read, its
        // answer serialized: what the daemon does for one call besides reading and writing the socket.
        for (name, query) in [("term", "textContent == \"\(corpus.term)\"cdw"), ("prefix", "title == \"\(corpus.prefix)*\"cdw")]
        where options.userQueries.isEmpty && options.rankedParts.contains(name) {
            var times: [Double] = []
            for k in 0..<(options.queries + 10) {
                let t = try milliseconds {
                    let filter = try QueryFront.filter(query: query, limits: Limits(), now: Date(), cacheScope: 0)
                    let page = try store.search(filter, fetch: ["title"], limit: 20)
                    _ = JSONValue.object(["items": .array(page.items), "cursor": page.cursor.map(JSONValue.string) ?? .null]).serialized()
                }
                if k >= 10 { times.append(t) }
            }
            progress(String(format: "query.search %@ first page in-process: p50 %.3f ms, p99 %.3f ms", name,
                Figure(times).percentile(0.5), Figure(times).percentile(0.99)))
            rows.append(Row(scenario: "query.search \(name) first page in-process (parse, search, JSON), p50", figure: Figure([Figure(times).percentile(0.5)]),
                unit: "ms", higherIsBetter: false))
        }
        func topK(_ text: String) throws {
            var fast: [Double] = [], exhaustive: [Double] = []
            var answers: (LexicalCandidates, LexicalCandidates)?
            for k in 0..<(options.queries + 10) {
                var a: LexicalCandidates?, b: LexicalCandidates?
                let t1 = try milliseconds { a = try store.lexicalCandidates(text, limit: 20) }
                let t2 = options.exhaustiveBaseline || (k == 0 && options.exhaustiveCheck)
                    ? try milliseconds { b = try store.lexicalCandidates(text, limit: 20, path: .exhaustive) } : 0
                if b == nil { b = answers?.1 ?? (options.exhaustiveCheck ? nil : a) }
                if k >= 10 {
                    fast.append(t1)
                    exhaustive.append(t2)
                }
                answers = (a!, b!)
            }
            guard let (a, b) = answers, a.candidates == b.candidates, a.usedRankedIndex else {
                fatal("\"\(text)\": the ranked index's answer differs from the exhaustive one (or it was not used)")
            }
            let p50 = Figure(fast).percentile(0.5), p99 = Figure(fast).percentile(0.99)
            progress(String(format: "ranked \"%@\": p50 %.3f ms, p99 %.3f ms; exhaustive p50 %.3f ms, p99 %.3f ms", text,
                p50, p99, Figure(exhaustive).percentile(0.5), Figure(exhaustive).percentile(0.99)))
            rows.append(Row(scenario: "ranked top 20 \"\(text)\" in-process, p50", figure: Figure([p50]), unit: "ms",
                baseline: Figure([Figure(exhaustive).percentile(0.5)]), higherIsBetter: false))
            rows.append(Row(scenario: "ranked top 20 \"\(text)\" in-process, p99", figure: Figure([p99]), unit: "ms",
                baseline: Figure([Figure(exhaustive).percentile(0.99)]), higherIsBetter: false))
        }

        func withSuggestions(_ text: String) throws {
            // The whole user query with 5 suggestions (items read, titles), both ways.
            var request = UserQueryRequest(text: text)
            request.maxResultCount = 20
            request.maxSuggestionCount = 5
            request.fetch = ["title"]
            var withSuggestions: [Double] = [], exhaustiveSuggestions: [Double] = []
            for k in 0..<(options.queries + 10) {
                var a: UserQueryResult?, b: UserQueryResult?
                try pokeCommit()
                let t1 = try milliseconds { a = try store.userQuery(request) }
                let t2 = options.exhaustiveBaseline || (k == 0 && options.exhaustiveCheck) ? try milliseconds { b = try store.userQuery(request, path: .exhaustive) } : 0
                if let b, a!.suggestions != b.suggestions || a!.scores != b.scores {
                    fatal("\"\(text)\": suggestions or scores differ: \(a!.suggestions) vs \(b.suggestions)")
                }
                if k >= 10 {
                    withSuggestions.append(t1)
                    exhaustiveSuggestions.append(t2)
                }
            }
            let s50 = Figure(withSuggestions).percentile(0.5), s99 = Figure(withSuggestions).percentile(0.99)
            progress(String(format: "user query \"%@\" + 5 suggestions: p50 %.3f ms, p99 %.3f ms; exhaustive p50 %.3f ms", text, s50, s99,
                Figure(exhaustiveSuggestions).percentile(0.5)))
            rows.append(Row(scenario: "user query \"\(text)\" + 5 suggestions in-process, p50", figure: Figure([s50]), unit: "ms",
                baseline: Figure([Figure(exhaustiveSuggestions).percentile(0.5)]), higherIsBetter: false))
        }

        for text in options.userQueries.isEmpty ? queries(corpus) : options.userQueries {
            if options.rankedParts.contains("top") { try topK(text) }
            if options.rankedParts.contains("suggest") { try withSuggestions(text) }
        }
        return rows
    }
}
