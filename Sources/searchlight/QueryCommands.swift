import Foundation
import SearchlightKit

/// `query` (the CSSearchQuery language over one app's index) and `search` (free text as a person
/// types it, with ranking and suggestions).
enum QueryCommands {
    static let query = Command(
        spec: CommandSpec(
            name: "query", abstract: "run a query in the query language over an app's index",
            usage: "BUNDLE 'QUERY' [--index NAME] [--fetch A,B] [--filter Q]... [--limit N] [--json]",
            positionals: [
                .required("BUNDLE", "the app whose index to query"),
                .required("QUERY", "e.g. 'title == \"report*\"cd && rankingHint > 50'; every item: 'uniqueIdentifier == \"*\"'"),
            ],
            options: [
                .value("index", "NAME", "a named index of the app (default: its default index)"),
                .value("fetch", "A,B", "attributes to show, comma-separated"),
                .repeating("filter", "Q", "a further query every result must match; may repeat"),
                .value("limit", "N", "show at most N items (default: all)"),
            ],
            discussion: """
                Prints one line per item: identifier, title (or displayName) and the --fetch attributes.
                With --json, prints one item per line (JSON Lines) in the wire shape, with all attributes
                unless --fetch is given; that output can be fed back to `searchlight import`.
                """
        ),
        run: { args, context in
            let bundle = args.positionals[0], text = args.positionals[1]
            let limit = try args.integer("limit", in: 0...Int.max)
            let fetch = args.value("fetch").map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } }
            if let fetch, fetch.isEmpty { throw UsageError("--fetch needs attribute names, e.g. --fetch title,keywords") }
            var queryContext = SearchQueryContext(filterQueries: args.values("filter"))
            if context.json {
                queryContext.fetchAttributes = fetch
            } else {
                queryContext.fetchAttributes = ["title", "displayName"] + (fetch ?? []).filter { $0 != "title" && $0 != "displayName" }
            }
            if let limit { queryContext.pageSize = max(1, min(limit, 500)) }
            let index = context.index(bundle, name: args.value("index") ?? "")
            var items: [SearchableItem] = []
            var count = 0
            if limit != 0 {
                // Printed as they arrive with --json, so a large answer streams page by page.
                for try await item in SearchQuery(queryString: text, queryContext: queryContext, index: index).results {
                    count += 1
                    if context.json { Console.out(item.json) } else { items.append(item) }
                    if let limit, count >= limit { break }
                }
            }
            await index.close()
            guard !context.json else { return }
            printItems(items, extra: fetch ?? [])
            if items.isEmpty { Console.errorLine("no items match") }
        }
    )

    static func printItems(_ items: [SearchableItem], extra: [String], bundles: [String?]? = nil, notes: [String?]? = nil) {
        var table = Table([.left])
        for (i, item) in items.enumerated() {
            let attributes = item.attributeSet
            var row = [item.uniqueIdentifier, Format.value(attributes[attribute: "title"] ?? attributes[attribute: "displayName"])]
            row += extra.filter { $0 != "title" }.map { Format.value(field($0, of: item), limit: 40) }
            if let bundles, let bundle = bundles[i] { row.append("[\(bundle)]") }
            if let notes, let note = notes[i] { row.append(note) }
            table.append(row)
        }
        table.print()
    }

    /// An attribute, or one of the item's own fields that `--fetch` may also name.
    static func field(_ name: String, of item: SearchableItem) -> JSONValue? {
        switch name {
        case "uniqueIdentifier": .string(item.uniqueIdentifier)
        case "domainIdentifier": item.domainIdentifier.map(JSONValue.string)
        case "expirationDate": item.expirationDate.map { .string(ISO8601.format($0)) }
        default: item.attributeSet[attribute: name]
        }
    }

    static let search = Command(
        spec: CommandSpec(
            name: "search", abstract: "search free text as a person types it (ranked, with suggestions)",
            usage: "[BUNDLE] TEXT [--ranked N] [--suggestions N] [--limit N] [--semantic | --no-semantic] [--semantic-weight W] [--explain] [--json]",
            positionals: [
                .optional("BUNDLE", "search only this app's index (default: every app's, as admin)"),
                .required("TEXT", "the text, quoted if it has spaces: \"json parser\""),
            ],
            options: [
                .value("index", "NAME", "a named index (default: the default index)"),
                .value("ranked", "N", "how many top hits to rank (default 10; 0 turns ranking off)"),
                .value("suggestions", "N", "how many query suggestions to show (default 3)"),
                .value("limit", "N", "show at most N items (default 25)"),
                .flag("semantic", "rank by meaning too (hybrid; the default when the daemon has the model)"),
                .flag("no-semantic", "rank by the words alone (lexical)"),
                .value("semantic-weight", "W", "weight of the meaning side, 0 to 1 (default 0.5)"),
                .flag("explain", "show each result's lexical rank, vector rank and similarity, and fused score"),
            ],
            discussion: """
                Prints the top hits, then the other results, then suggestions. With --json, prints the answer
                of query.user as one JSON object {items, rankedItems, suggestions, incomplete?}; without BUNDLE each item
                carries the "bundle" it came from; with --explain each item carries "explain".
                Semantic search finds items whose meaning is near the text even when no word matches
                (Docs/SemanticSearch.md); `searchlight status` says whether the daemon has the model.
                """,
            extraArgumentHint: "; quote text with spaces: search \"json parser\""
        ),
        run: { args, context in
            let bundle = args.positionals.count == 2 ? args.positionals[0] : nil
            let text = args.positionals.last!
            var userContext = UserQueryContext()
            let ranked = try args.integer("ranked", in: 0...1000) ?? 10
            userContext.enableRankedResults = ranked > 0
            userContext.maxRankedResultCount = ranked
            userContext.maxSuggestionCount = try args.integer("suggestions", in: 0...100) ?? 3
            userContext.maxResultCount = try args.integer("limit", in: 0...10_000) ?? 25
            userContext.fetchAttributes = context.json ? nil : ["title", "displayName"]
            if args.flag("semantic") && args.flag("no-semantic") {
                throw UsageError("give --semantic or --no-semantic, not both")
            }
            if args.flag("semantic") { userContext.semanticSearch = true }
            if args.flag("no-semantic") { userContext.semanticSearch = false }
            if let w = args.value("semantic-weight") {
                guard let weight = Double(w), weight >= 0, weight <= 1 else {
                    throw UsageError("--semantic-weight must be a number from 0 to 1, got \"\(w)\"")
                }
                userContext.semanticWeight = weight
            }
            userContext.explain = args.flag("explain")
            let answer = try await runUserQuery(text, bundle: bundle, index: args.value("index") ?? "", userContext, context)
            if context.json {
                Console.out(answer.json)
            } else {
                printSearch(answer, text: text)
            }
        }
    )

    /// One item of a search answer and, in a search across apps, the app it came from.
    struct Hit {
        var item: SearchableItem
        var bundle: String?
        var wire: JSONValue
        /// `{lexicalRank?, vectorRank?, similarity?, score}` with --explain.
        var explain: JSONValue? { wire["explain"] }
    }

    struct SearchAnswer {
        var items: [Hit]
        var ranked: [Hit]
        /// Suggestions as on the wire: `{text, highlight: [[start, length]], kind}`.
        var suggestions: [JSONValue]
        /// An index searched is being refilled after damage: results may be missing.
        var incomplete = false

        var json: JSONValue {
            var o: [String: JSONValue] = ["items": .array(items.map(\.wire)), "rankedItems": .array(ranked.map(\.wire)), "suggestions": .array(suggestions)]
            if incomplete { o["incomplete"] = true }
            return .object(o)
        }
    }

    /// An app's own search goes through `UserQuery` as that app; a search across apps needs the
    /// admin role, which `UserQuery` does not take, so it calls `query.user` directly.
    static func runUserQuery(
        _ text: String, bundle: String?, index: String, _ userContext: UserQueryContext, _ context: CommandContext
    ) async throws -> SearchAnswer {
        if let bundle {
            let searchable = context.index(bundle, name: index)
            let r = try await UserQuery(userQueryString: text, userQueryContext: userContext, index: searchable).run()
            await searchable.close()
            func hits(_ items: [SearchableItem], _ explanations: [RankExplanation?] = []) -> [Hit] {
                items.enumerated().map { i, item in
                    var wire = item.json
                    if i < explanations.count, let e = explanations[i], case .object(var o) = wire {
                        var x: [String: JSONValue] = ["score": .number(e.score)]
                        if let r = e.lexicalRank { x["lexicalRank"] = .number(Double(r)) }
                        if let r = e.vectorRank { x["vectorRank"] = .number(Double(r)) }
                        if let v = e.similarity { x["similarity"] = .number(v) }
                        o["explain"] = .object(x)
                        wire = .object(o)
                    }
                    return Hit(item: item, bundle: nil, wire: wire)
                }
            }
            let suggestions: [JSONValue] = r.suggestions.map { s in
                ["text": .string(s.text), "kind": .string(s.kind.rawValue),
                 "highlight": .array(s.highlight.map { [.number(Double($0.lowerBound)), .number(Double($0.count))] })]
            }
            let items = hits(r.items, r.explanations)
            let byID = Dictionary(items.map { ($0.item.uniqueIdentifier, $0) }, uniquingKeysWith: { a, _ in a })
            return SearchAnswer(items: items, ranked: r.rankedItems.map { byID[$0.uniqueIdentifier] ?? Hit(item: $0, bundle: nil, wire: $0.json) },
                suggestions: suggestions, incomplete: r.isIncomplete)
        }
        let c = userContext
        let r = try await context.admin(QueryUser(text: text, context: QueryUser.Context(
            enableRankedResults: c.enableRankedResults, maxRankedResultCount: c.maxRankedResultCount, maxResultCount: c.maxResultCount,
            maxSuggestionCount: c.maxSuggestionCount, filterQueries: c.filterQueries, fetchAttributes: c.fetchAttributes,
            semanticSearch: c.semanticSearch, semanticWeight: c.semanticWeight, explain: c.explain), index: index))
        func hits(_ items: [JSONValue]) -> [Hit] {
            items.compactMap { wire in SearchableItem(wire: wire).map { Hit(item: $0, bundle: wire["bundle"]?.stringValue, wire: wire) } }
        }
        return SearchAnswer(items: hits(r.items), ranked: hits(r.rankedItems), suggestions: r.suggestions.map(\.json), incomplete: r.incomplete)
    }

    /// "lexical #2, vector #1 (similarity 0.590), score 0.01639".
    static func explanation(_ e: JSONValue) -> String {
        var parts: [String] = []
        parts.append(e["lexicalRank"]?.intValue.map { "lexical #\($0)" } ?? "lexical -")
        if let r = e["vectorRank"]?.intValue {
            parts.append("vector #\(r)" + (e["similarity"]?.doubleValue.map { String(format: " (similarity %.3f)", $0) } ?? ""))
        } else {
            parts.append("vector -")
        }
        parts.append(String(format: "score %.5f", e["score"]?.doubleValue ?? 0))
        return parts.joined(separator: ", ")
    }

    static func printSearch(_ answer: SearchAnswer, text: String) {
        let rankedIDs = Set(answer.ranked.map { "\($0.bundle ?? "")\u{0}\($0.item.uniqueIdentifier)" })
        let others = answer.items.filter { !rankedIDs.contains("\($0.bundle ?? "")\u{0}\($0.item.uniqueIdentifier)") }
        var sections = 0
        func section(_ title: String, _ hits: [Hit]) {
            guard !hits.isEmpty else { return }
            if sections > 0 { Console.out("") }
            sections += 1
            Console.out(title)
            // A user activity of an app's history (DESIGN §13) is marked as one (across apps, where
            // the answer says each result's index; an app's own search, through UserQuery, does not).
            let notes = hits.map { hit -> String? in
                let parts = [hit.wire["index"]?.stringValue == Names.activityIndex ? "(activity)" : nil, hit.explain.map(explanation)].compactMap { $0 }
                return parts.isEmpty ? nil : parts.joined(separator: " ")
            }
            printItems(hits.map(\.item), extra: [], bundles: hits.map(\.bundle), notes: notes)
        }
        section("Top hits:", answer.ranked)
        section(answer.ranked.isEmpty ? "Results:" : "Other results:", others)
        if !answer.suggestions.isEmpty {
            if sections > 0 { Console.out("") }
            let texts = answer.suggestions.map { "\($0["text"]?.stringValue ?? "?") (\($0["kind"]?.stringValue ?? "?"))" }
            Console.out("Suggestions: " + texts.joined(separator: ", "))
        }
        if answer.items.isEmpty && answer.ranked.isEmpty { Console.errorLine("no items match \"\(text)\"") }
        if answer.incomplete {
            Console.errorLine("results may be incomplete: an index searched is being recovered (see `searchlight status`)")
        }
    }
}
