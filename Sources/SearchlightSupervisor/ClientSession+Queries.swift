import Foundation
import SearchlightStore
import SearchlightWire
import Synchronization

/// When the last line of each rate-limited query event was logged, and how many were held back.
private let queryLogGates = Mutex<[String: (last: Date, count: Int)]>([:])

/// The query methods. Every query runs under a `QueryBudget`: the daemon's `--query-timeout`,
/// and the connection's socket polled for a hang-up, so a query whose client disconnected stops
/// at once instead of working on for nobody. Its size is bounded before it runs (bytes, depth,
/// comparisons, filter queries, words: `Limits`).
extension ClientSession {
    func querySearch(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        guard let text = params["query"]?.stringValue else { throw .invalidParams("\"query\" must be a query string") }
        let filters = try stringList(params["filterQueries"], name: "filterQueries") ?? []
        let fetch = try stringList(params["fetchAttributes"], name: "fetchAttributes")
        let limit = try NumericParameter.integer(params["limit"], field: "limit", in: 0...10_000, default: 1000)
        let cursor = params["cursor"]?.stringValue
        let filter = try QueryFront.filter(query: text, filterQueries: filters, limits: limits, now: Date())
        let budget = queryBudget(Method.querySearch)
        return try budgeted(Method.querySearch, budget) { () throws(SearchlightError) -> JSONValue in
            if !acrossBundles(params) {
                var out: [String: JSONValue] = ["items": []]
                let incomplete = try forEachQueryTarget(params) { (_, _, store) throws(SearchlightError) -> Bool in
                    let page = try store.search(filter, fetch: fetch, limit: max(limit, 1), cursor: cursor, budget: budget)
                    out["items"] = .array(page.items)
                    if let c = page.cursor { out["cursor"] = .string(c) }
                    return true
                }
                if incomplete { out["incomplete"] = true }
                return .object(out)
            }
            // Admin search across bundles: each item says where it lives; no cursor.
            var items: [JSONValue] = []
            let incomplete = try forEachQueryTarget(params) { (bundle, index, store) throws(SearchlightError) -> Bool in
                guard items.count < limit else { return false }
                let page = try store.search(filter, fetch: fetch, limit: limit - items.count, cursor: nil, budget: budget)
                items += page.items.map { Self.tag($0, bundle: bundle, index: index) }
                return items.count < limit
            }
            var out: [String: JSONValue] = ["items": .array(items)]
            if incomplete { out["incomplete"] = true }
            return .object(out)
        }
    }

    func queryUser(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        guard let text = params["text"]?.stringValue else { throw .invalidParams("\"text\" must be a string") }
        guard text.utf8.count <= limits.maxQueryBytes else {
            throw SearchlightError(.invalidQuery, "the text is longer than \(limits.maxQueryBytes) bytes", data: ["offset": .number(Double(limits.maxQueryBytes))])
        }
        try UserQueryRequest.check(text, limits: limits)
        let ctx = params["context"] ?? [:]
        var request = UserQueryRequest(text: text)
        request.enableRankedResults = ctx["enableRankedResults"]?.boolValue ?? true
        request.maxRankedResultCount = try NumericParameter.integer(
            ctx["maxRankedResultCount"], field: "context.maxRankedResultCount", in: 0...1000, default: 10)
        request.maxResultCount = try NumericParameter.integer(ctx["maxResultCount"], field: "context.maxResultCount", in: 0...10_000, default: 100)
        request.maxSuggestionCount = try NumericParameter.integer(
            ctx["maxSuggestionCount"], field: "context.maxSuggestionCount", in: 0...100, default: 0)
        request.fetch = try stringList(ctx["fetchAttributes"], name: "fetchAttributes")
        if let filters = try stringList(ctx["filterQueries"], name: "filterQueries"), !filters.isEmpty {
            request.filter = try QueryFront.filter(query: nil, filterQueries: filters, limits: limits, now: Date())
        }
        let tagged = acrossBundles(params)
        let budget = queryBudget(Method.queryUser)
        var scored: [(Double, JSONValue)] = []
        var suggestions: [Suggestion] = []
        var targets = 0
        let incomplete = try budgeted(Method.queryUser, budget) { () throws(SearchlightError) -> Bool in
            try forEachQueryTarget(params) { (bundle, index, store) throws(SearchlightError) -> Bool in
                targets += 1
                let r = try store.userQuery(request, budget: budget)
                for (item, score) in zip(r.items, r.scores) {
                    scored.append((score, tagged ? Self.tag(item, bundle: bundle, index: index) : item))
                }
                for s in r.suggestions where !suggestions.contains(where: { $0.text == s.text }) { suggestions.append(s) }
                return true
            }
        }
        if targets > 1 { scored.sort { $0.0 < $1.0 } }
        let items = scored.prefix(request.maxResultCount).map(\.1)
        let ranked = request.enableRankedResults ? Array(items.prefix(request.maxRankedResultCount)) : []
        var out: [String: JSONValue] = [
            "items": .array(Array(items)), "rankedItems": .array(ranked),
            "suggestions": .array(suggestions.prefix(request.maxSuggestionCount).map(\.json)),
        ]
        if incomplete { out["incomplete"] = true }
        return .object(out)
    }

    func queryEngaged(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        let identifier = params["identifier"]?.stringValue
        let suggestion = params["suggestion"]?.stringValue
        guard (identifier == nil) != (suggestion == nil) else {
            throw .invalidParams("give exactly one of \"identifier\" or \"suggestion\"")
        }
        let interaction = params["interaction"]?.stringValue ?? "select"
        guard interaction == "select" || interaction == "focus" else {
            throw .invalidParams("\"interaction\" must be \"select\" or \"focus\"")
        }
        guard let store = try store(params, write: true).store else { return [:] }
        try store.recordEngagement(identifier: identifier, suggestion: suggestion, weight: interaction == "select" ? 1 : 0.25)
        return [:]
    }

    // MARK: - Budget

    /// The budget of one query call: the deadline (`--query-timeout`), a log line once it runs
    /// past `--slow-query` (while it still runs: an operator sees who is busy), and the
    /// connection's socket polled for a hang-up.
    private func queryBudget(_ method: String) -> QueryBudget {
        let config = context.config
        let socket = connection.socket
        let log = self.log, peer = self.peer
        return QueryBudget(
            timeout: config.queryTimeout, slowAfter: config.slowQuery,
            onSlow: { elapsed in
                Self.gatedLog("slow query") { suppressed in
                    log.warning("slow query", ["method": method, "pid": peer.pid, "uid": peer.uid,
                        "elapsed_s": String(format: "%.3f", elapsed), "similar_since_last": suppressed])
                }
            },
            isAbandoned: { socket.isHungUp }, stepDelay: config.testQueryStepDelay)
    }

    /// Runs the query's work; a stop (deadline, disconnection) is logged once, rate-limited,
    /// and answered `cancelled`.
    private func budgeted<T>(_ method: String, _ budget: QueryBudget, _ body: () throws(SearchlightError) -> T) throws(SearchlightError) -> T {
        do {
            return try body()
        } catch {
            guard error.code == .cancelled, let stop = budget.stop else { throw error }
            let reason = stop == .abandoned ? "disconnected" : "deadline"
            let log = self.log, peer = self.peer, elapsed = budget.elapsed
            Self.gatedLog("query cancelled " + reason) { suppressed in
                log.log(stop == .abandoned ? .info : .notice, "query cancelled", ["reason": reason, "method": method, "pid": peer.pid,
                    "uid": peer.uid, "elapsed_s": String(format: "%.3f", elapsed), "similar_since_last": suppressed])
            }
            throw error
        }
    }

    /// At most one line per second for each query event: a client sending expensive queries in
    /// a loop must not flood the log. `write` gets how many lines were held back since the last.
    static func gatedLog(_ key: String, _ write: (Int) -> Void) {
        let now = Date()
        let suppressed: Int? = queryLogGates.withLock { gates in
            var gate = gates[key] ?? (.distantPast, 0)
            defer { gates[key] = gate }
            guard now.timeIntervalSince(gate.last) >= 1 else {
                gate.count += 1
                return nil
            }
            defer { gate = (now, 0) }
            return gate.count
        }
        if let suppressed { write(suppressed) }
    }

    // MARK: - Helpers

    private func stringList(_ value: JSONValue?, name: String) throws(SearchlightError) -> [String]? {
        switch value {
        case nil, .null?: return nil
        case .array(let a)?:
            var out: [String] = []
            for v in a {
                guard let s = v.stringValue else { throw .invalidParams("\"\(name)\" must be an array of strings") }
                out.append(s)
            }
            return out
        default: throw .invalidParams("\"\(name)\" must be an array of strings")
        }
    }

    /// An admin query without "bundle" reads every bundle's index; a desktop query every bundle's
    /// it may show (`desktopMayShow`).
    private func acrossBundles(_ params: JSONValue) -> Bool {
        (role == .admin || role == .desktop) && (params["bundle"] == nil || params["bundle"]?.isNull == true)
    }

    /// Runs `body` on each store a query reads: the caller's bundle, or for an admin without
    /// "bundle", every bundle's, one at a time (each leased only while it is read, so a search
    /// across ten thousand bundles keeps the open-index bound). `body` returns false to stop.
    /// Returns whether one of them is being refilled after a recovery (DESIGN §4 `incomplete`).
    @discardableResult
    private func forEachQueryTarget(_ params: JSONValue,
                                    _ body: (_ bundle: String, _ index: String, _ store: IndexStore) throws(SearchlightError) -> Bool) throws(SearchlightError) -> Bool {
        var incomplete = false
        func visit(_ bundle: String, _ index: String, _ store: IndexStore) throws(SearchlightError) -> Bool {
            if context.registry.condition(bundle: bundle, index: index)?.incomplete ?? false { incomplete = true }
            return try body(bundle, index, store)
        }
        guard acrossBundles(params) else {
            let t = try store(params, write: false)
            if let s = t.store { _ = try visit(t.bundle, t.index, s) }
            return incomplete
        }
        let index = try Names.index(params["index"])
        for b in context.registry.bundles() where role != .desktop || desktopMayShow(b) {
            let more = try context.registry.withStore(bundle: b, index: index, create: false) { (s) throws(SearchlightError) -> Bool in
                guard let s else { return true }
                return try visit(b, index, s)
            }
            if !more { break }
        }
        return incomplete
    }

    static func tag(_ item: JSONValue, bundle: String, index: String) -> JSONValue {
        guard case .object(var o) = item else { return item }
        o["bundle"] = .string(bundle)
        if !index.isEmpty { o["index"] = .string(index) }
        return .object(o)
    }
}
