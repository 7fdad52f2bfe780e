import Foundation
import SearchlightKit
import SearchlightStore

/// Query latency through the socket (SDK → daemon → store → answer), against the same FTS5
/// query run in this process on the same index file.
struct QueryBench {
    struct Scenario {
        var name: String
        var throughSocket: (SearchableIndex) async throws -> Void
        /// The bare FTS5 query with the same match and page size, in-process.
        var sql: String
    }

    /// Per-scenario figures: p50 and p99 of each run (through the socket), and the in-process ones.
    struct Result {
        var name: String
        var p50: [Double] = []
        var p99: [Double] = []
        var baselineP50: [Double] = []
        var baselineP99: [Double] = []
    }

    let corpus: Corpus
    let queries: Int

    var scenarios: [Scenario] {
        let term = corpus.term, prefix = corpus.prefix
        let words = corpus.userText.split(separator: " ").map(String.init)
        let userMatch = words.dropLast().map { "\"\($0)\"" }.joined(separator: " AND ") + (words.count > 1 ? " AND " : "")
            + "\"\(words.last ?? "")\" *"
        return [
            Scenario(name: "term", throughSocket: { try await firstPage("textContent == \"\(term)\"cdw", $0) },
                sql: "SELECT rowid, title FROM fts WHERE fts MATCH 'textContent : \"\(term)\"' LIMIT 20"),
            Scenario(name: "prefix", throughSocket: { try await firstPage("title == \"\(prefix)*\"cdw", $0) },
                sql: "SELECT rowid, title FROM fts WHERE fts MATCH 'title : \"\(prefix)\" *' LIMIT 20"),
            Scenario(name: "two predicates",
                throughSocket: { try await firstPage("title == \"\(prefix)*\"cdw && textContent == \"\(term)\"cdw", $0) },
                sql: "SELECT rowid, title FROM fts WHERE fts MATCH 'title : \"\(prefix)\" * AND textContent : \"\(term)\"' LIMIT 20"),
            Scenario(name: "user query + 5 suggestions", throughSocket: { index in
                var c = UserQueryContext()
                c.maxSuggestionCount = 5
                c.maxResultCount = 20
                _ = try await UserQuery(userQueryString: corpus.userText, userQueryContext: c, index: index).run()
            }, sql: "SELECT rowid, title, bm25(fts) AS s FROM fts WHERE fts MATCH '\(userMatch)' ORDER BY s LIMIT 20"),
        ]
    }

    /// Runs every scenario `runs` times on the index of `bundle` (file at `path`).
    func run(socket: String, bundle: String, path: String, runs: Int) async throws -> [Result] {
        let index = SearchableIndex(bundleIdentifier: bundle, socketPath: socket)
        let local = try Database(path: path, readOnly: true)
        var results = scenarios.map { Result(name: $0.name) }
        for _ in 0..<runs {
            for (i, scenario) in scenarios.enumerated() {
                for _ in 0..<10 {
                    try await scenario.throughSocket(index)
                    _ = try local.rows(scenario.sql)
                }
                var through: [Double] = [], inProcess: [Double] = []
                for _ in 0..<queries {
                    through.append(try await milliseconds { try await scenario.throughSocket(index) })
                    inProcess.append(try milliseconds { _ = try local.rows(scenario.sql) })
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
}

/// The first page (20 results, titles only) of a query, as a UI showing results would fetch it.
func firstPage(_ query: String, _ index: SearchableIndex) async throws {
    var context = SearchQueryContext(fetchAttributes: ["title"])
    context.pageSize = 20
    var iterator = SearchQuery(queryString: query, queryContext: context, index: index).results.makeAsyncIterator()
    _ = try await iterator.next()
}
