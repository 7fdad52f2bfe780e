import Foundation
import SearchlightKit
import SearchlightStore

/// Query latency through the socket (SDK → daemon → store → answer), against the same FTS5
/// query run in this process on the same index file.
struct QueryBench {
    struct Scenario {
        var name: String
        /// One call through the socket for variant `i` (the user queries cycle through their texts).
        var throughSocket: (SearchableIndex, Int) async throws -> Void
        /// The bare FTS5 query with the same match and page size, in-process, per variant.
        var sql: [String]
        var variants: [String] = [""]
    }

    /// Per-scenario figures: p50 and p99 of each run (through the socket), and the in-process ones.
    struct Result {
        var name: String
        var p50: [Double] = []
        var p99: [Double] = []
        var baselineP50: [Double] = []
        var baselineP99: [Double] = []
        /// Through the socket, per variant (user query text), over all runs.
        var perVariant: [String: [Double]] = [:]
    }

    let corpus: Corpus
    let queries: Int
    /// The user queries (`RankedBench.queries` unless given with --user-query).
    let userTexts: [String]
    /// In-process baseline calls per scenario and run, at most: at 1M, FTS5 ranking every match
    /// of `lib` takes about a second, and a baseline beside each of 900 user queries per run made
    /// the 1M query phase last half an hour.
    var baselineLimit = Int.max

    static func ftsMatch(_ text: String) -> String {
        let words = text.split(separator: " ").map(String.init)
        let typing = !(text.last?.isWhitespace ?? true)
        return words.enumerated().map { i, w in "\"\(w)\"" + (typing && i == words.count - 1 ? " *" : "") }.joined(separator: " AND ")
    }

    var scenarios: [Scenario] {
        let term = corpus.term, prefix = corpus.prefix, texts = userTexts
        let userSQL = texts.map { "SELECT rowid, title, bm25(fts) AS s FROM fts WHERE fts MATCH '\(Self.ftsMatch($0).replacingOccurrences(of: "'", with: "''"))' ORDER BY s LIMIT 20" }
        func user(suggestions: Int, fetch: [String]?, semantic: Bool? = nil) -> (SearchableIndex, Int) async throws -> Void {
            { index, i in
                var c = UserQueryContext()
                c.semanticSearch = semantic
                c.maxSuggestionCount = suggestions
                c.maxResultCount = 20
                c.maxRankedResultCount = 20
                c.fetchAttributes = fetch
                _ = try await UserQuery(userQueryString: texts[i % texts.count], userQueryContext: c, index: index).run()
            }
        }
        return [
            Scenario(name: "term", throughSocket: { index, _ in try await firstPage("textContent == \"\(term)\"cdw", index) },
                sql: ["SELECT rowid, title FROM fts WHERE fts MATCH 'textContent : \"\(term)\"' LIMIT 20"]),
            Scenario(name: "prefix", throughSocket: { index, _ in try await firstPage("title == \"\(prefix)*\"cdw", index) },
                sql: ["SELECT rowid, title FROM fts WHERE fts MATCH 'title : \"\(prefix)\" *' LIMIT 20"]),
            Scenario(name: "two predicates",
                throughSocket: { index, _ in try await firstPage("title == \"\(prefix)*\"cdw && textContent == \"\(term)\"cdw", index) },
                sql: ["SELECT rowid, title FROM fts WHERE fts MATCH 'title : \"\(prefix)\" * AND textContent : \"\(term)\"' LIMIT 20"]),
            Scenario(name: "user query top 20", throughSocket: user(suggestions: 0, fetch: ["title"]), sql: userSQL, variants: texts),
            // The lexical ranking alone (issue 17's target was set before the hybrid query existed).
            Scenario(name: "user query top 20, lexical", throughSocket: user(suggestions: 0, fetch: ["title"], semantic: false), sql: userSQL,
                variants: texts),
            Scenario(name: "user query top 20 + 5 suggestions", throughSocket: user(suggestions: 5, fetch: ["title"]), sql: userSQL,
                variants: texts),
            Scenario(name: "user query top 20 + 5 suggestions, lexical", throughSocket: user(suggestions: 5, fetch: ["title"], semantic: false),
                sql: userSQL, variants: texts),
            // The earlier rounds' row: every attribute of every item (ten of them twice, as rankedItems).
            Scenario(name: "user query \"\(corpus.userText)\" + 5 suggestions, all attributes", throughSocket: { index, _ in
                var c = UserQueryContext()
                c.maxSuggestionCount = 5
                c.maxResultCount = 20
                _ = try await UserQuery(userQueryString: corpus.userText, userQueryContext: c, index: index).run()
            }, sql: [userSQL[0]]),
        ]
    }

    /// Runs every scenario `runs` times on the index of `bundle` (file at `path`).
    func run(socket: String, bundle: String, path: String, runs: Int) async throws -> [Result] {
        let index = SearchableIndex(bundleIdentifier: bundle, socketPath: socket)
        let local = try Database(path: path, readOnly: true)
        var results = scenarios.map { Result(name: $0.name) }
        for _ in 0..<runs {
            for (i, scenario) in scenarios.enumerated() {
                let n = scenario.variants.count
                for k in 0..<(10 * n) {
                    try await scenario.throughSocket(index, k)
                    _ = try local.rows(scenario.sql[k % scenario.sql.count])
                }
                var through: [Double] = [], inProcess: [Double] = []
                // Through the socket, then in-process, in blocks of 20 calls: interleaved call by
                // call, a baseline of 75 ms (FTS5 ranking every match of "lib") left the daemon's
                // caches cold for the next call and made it look three times slower than it is.
                let total = queries * max(1, n / 2)
                var k = 0
                while k < total {
                    let block = k..<min(total, k + 20)
                    for j in block {
                        let t = try await milliseconds { try await scenario.throughSocket(index, j) }
                        through.append(t)
                        results[i].perVariant[scenario.variants[j % n], default: []].append(t)
                    }
                    for j in block where inProcess.count < baselineLimit {
                        inProcess.append(try milliseconds { _ = try local.rows(scenario.sql[j % scenario.sql.count]) })
                    }
                    k = block.upperBound
                }
                results[i].p50.append(Figure(through).percentile(0.5))
                results[i].p99.append(Figure(through).percentile(0.99))
                results[i].baselineP50.append(Figure(inProcess).percentile(0.5))
                results[i].baselineP99.append(Figure(inProcess).percentile(0.99))
            }
        }
        await index.close()
        return results
    }

    /// Asks for a user query (so the daemon builds the ranked index) and waits until the index
    /// holds every item; returns the seconds it took, nil when the status says nothing of it.
    static func awaitRankedIndex(socket: String, bundle: String) async throws -> Double? {
        let index = SearchableIndex(bundleIdentifier: bundle, socketPath: socket)
        let admin = SearchlightConnection(role: .admin, socketPath: socket)
        let start = now()
        _ = try await UserQuery(userQueryString: "a", index: index).run()
        defer { Task { await admin.close() } }
        while true {
            let status = try await admin.call("admin.status", ["bundle": .string(bundle)])
            let entry = status["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first
            guard let ranked = entry?["rankedIndex"] else { return nil }
            if ranked["pending"]?.intValue == 0 { return now() - start }
            if let e = ranked["lastError"]?.stringValue { fatal("the ranked index of \(bundle) failed to build: \(e)") }
            try await Task.sleep(nanoseconds: 200_000_000)
            if now() - start > 1800 { fatal("the ranked index of \(bundle) was not built within 30 minutes") }
        }
    }
}

/// The first page (20 results, titles only) of a query, as a UI showing results would fetch it.
func firstPage(_ query: String, _ index: SearchableIndex) async throws {
    var context = SearchQueryContext(fetchAttributes: ["title"])
    context.pageSize = 20
    var iterator = SearchQuery(queryString: query, queryContext: context, index: index).results.makeAsyncIterator()
    _ = try await iterator.next()
}
