#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightStore
import SearchlightWire
import Synchronization

/// When the last line of each rate-limited query event was logged, and how many were held back.
private let queryLogGates = Mutex<[String: (last: Date, count: Int)]>([:])

/// The query methods of every role. Every query runs under a `QueryBudget`: the daemon's `--query-timeout`,
/// and the connection's socket polled for a hang-up, so a query whose client disconnected stops
/// at once instead of working on for nobody. Its size is bounded before it runs (bytes, depth,
/// comparisons, filter queries, words: `Limits`).
extension BundleCalls {
    /// `query.search`: a page of items, answered as JSON written straight from the rows
    /// (`EncodedItems`), with `cursor` while more remain (one bundle) and `incomplete`.
    func search(_ r: QuerySearch) throws(SearchlightError) -> WireAnswer {
        let filter = try QueryFront.filter(query: r.query, filterQueries: r.filterQueries, limits: limits, now: Date(),
                                            cacheScope: client.peer.uid)
        let budget = queryBudget(Method.querySearch)
        return try budgeted(Method.querySearch, budget) { () throws(SearchlightError) -> WireAnswer in
            var items = EncodedItems()
            if !acrossBundles(r.bundle) {
                var cursor: String?
                let incomplete = try forEachQueryTarget(bundle: r.bundle, index: r.index) { (_, _, store) throws(SearchlightError) -> Bool in
                    cursor = try store.search(filter, fetch: r.fetchAttributes, limit: max(r.limit, 1), cursor: r.cursor, budget: budget,
                        into: &items)
                    return true
                }
                return .encoded(Self.searchResult(items, tags: [], cursor: cursor, incomplete: incomplete))
            }
            // Admin search across bundles: each item says where it lives; no cursor.
            var tags: [(bundle: String, index: String)] = []
            let incomplete = try forEachQueryTarget(bundle: r.bundle, index: r.index) { (bundle, index, store) throws(SearchlightError) -> Bool in
                guard items.count < r.limit else { return false }
                _ = try store.search(filter, fetch: r.fetchAttributes, limit: r.limit - items.count, cursor: nil, budget: budget, into: &items)
                tags += repeatElement((bundle: bundle, index: index), count: items.count - tags.count)
                return items.count < r.limit
            }
            return .encoded(Self.searchResult(items, tags: tags, cursor: nil, incomplete: incomplete))
        }
    }

    /// `{items, cursor?, incomplete?}`; `tags`, when not empty, one per item.
    static func searchResult(_ items: EncodedItems, tags: [(bundle: String, index: String)], cursor: String?, incomplete: Bool) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(items.bytes.count + items.count * 48 + 64)
        out.append(contentsOf: #"{"items":["#.utf8)
        for i in 0..<items.count {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            if tags.isEmpty {
                items.write(i, to: &out)
            } else {
                items.write(i, to: &out) { o, out in tag(&o, &out, bundle: tags[i].bundle, index: tags[i].index) }
            }
        }
        out.append(UInt8(ascii: "]"))
        if let cursor {
            out.append(contentsOf: #","cursor":"#.utf8)
            JSONValue.writeString(cursor, to: &out)
        }
        if incomplete { out.append(contentsOf: #","incomplete":true"#.utf8) }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// One item of a user query's answer: where its JSON is, its score, where it was found.
    private struct UserQueryHit {
        var score: Double
        var item: Int
        var target: Int
        var explanation: FusedCandidate?
    }

    /// `query.user`: ranked items (one ranking across bundles: `federatedUserQuery`) and suggestions, answered as
    /// JSON written straight from the rows. `desktop`: the desktop role's answer, where every
    /// item names its bundle and `bundles` says how each bundle's items open.
    func userQuery(_ r: QueryUser, desktop: DesktopCalls? = nil) throws(SearchlightError) -> WireAnswer {
        let sched = Self.logQueryCPU ? ThreadSched.sample() : nil
        var request = UserQueryRequest(text: r.text)
        // Checked before any index is read; the stores take the words parsed here.
        try request.check(limits: limits)
        request.enableRankedResults = r.context.enableRankedResults
        request.maxRankedResultCount = r.context.maxRankedResultCount
        request.maxResultCount = r.context.maxResultCount
        request.maxSuggestionCount = r.context.maxSuggestionCount
        request.fetch = r.context.fetchAttributes
        if !r.context.filterQueries.isEmpty {
            request.filter = try QueryFront.filter(query: nil, filterQueries: r.context.filterQueries, limits: limits, now: Date(),
                                                      cacheScope: client.peer.uid)
        }
        request.explain = r.context.explain
        let budget = queryBudget(Method.queryUser)
        if Self.logQueryCPU { budget.phases = [:] }
        // The desktop shells' terms narrow: every word (an app's user query is best-match).
        request.allWords = desktop != nil
        // Semantic search (hybrid ranking): on unless asked off, where the static table is there;
        // the query embedded once for every index it searches, within the query's budget (the
        // transformer's embedding waits its turn among the uids: `QueryCompute`).
        if r.context.semanticSearch ?? true, r.context.semanticWeight > 0 || r.context.explain,
           !r.text.allSatisfy({ $0.isWhitespace }) {
            let semantic = context.semantic, uid = client.peer.uid
            request.semantic = try budgeted(Method.queryUser, budget) { () throws(SearchlightError) -> SemanticRequest? in
                try budget.phase("embed") { () throws(SearchlightError) in
                    try semantic.request(r.text, weight: r.context.semanticWeight, owner: uid, budget: budget)
                }
            }
        }
        // A bundle's activity history is searched with its default index, as one ranking
        // (`federatedUserQuery`): its items carry `index: "_activities"` (DESIGN §13).
        var activities = false
        if r.index.isEmpty { activities = acrossBundles(r.bundle) ? true : hasActivities(try target(r.bundle)) }
        // The desktop's items always name their bundle, also when the query named one.
        let tagged = acrossBundles(r.bundle) || desktop != nil || activities
        var items = EncodedItems()
        var hits: [UserQueryHit] = []
        var targets: [(bundle: String, index: String)] = []
        var suggestions: [Suggestion] = []
        let incomplete = try budgeted(Method.queryUser, budget) { () throws(SearchlightError) -> Bool in
            guard !acrossBundles(r.bundle), !activities else {
                return try federatedUserQuery(request, bundle: r.bundle, index: r.index, budget: budget, targets: &targets, hits: &hits,
                    suggestions: &suggestions, items: &items)
            }
            return try forEachQueryTarget(bundle: r.bundle, index: r.index) { (bundle, index, store) throws(SearchlightError) -> Bool in
                targets.append((bundle, index))
                let first = items.count
                let result = try store.userQuery(request, budget: budget, into: &items)
                for (i, score) in result.scores.enumerated() {
                    hits.append(UserQueryHit(score: score, item: first + i, target: targets.count - 1, explanation: result.explanations?[i]))
                }
                for s in result.suggestions where !suggestions.contains(where: { $0.text == s.text }) { suggestions.append(s) }
                return true
            }
        }
        let chosen = hits.prefix(request.maxResultCount)
        let ranked = request.enableRankedResults ? chosen.prefix(request.maxRankedResultCount) : []

        var out: [UInt8] = []
        out.reserveCapacity(items.bytes.count * (ranked.isEmpty ? 1 : 2) + 256)
        func writeItems(_ list: ArraySlice<UserQueryHit>) {
            out.append(UInt8(ascii: "["))
            for (n, hit) in list.enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                guard tagged || hit.explanation != nil else {
                    items.write(hit.item, to: &out)
                    continue
                }
                items.write(hit.item, to: &out) { o, out in
                    if tagged { Self.tag(&o, &out, bundle: targets[hit.target].bundle, index: targets[hit.target].index) }
                    if let e = hit.explanation {
                        o.key("explain", &out)
                        Self.explanation(e).write(to: &out)
                    }
                }
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(contentsOf: #"{"items":"#.utf8)
        writeItems(chosen)
        out.append(contentsOf: #","rankedItems":"#.utf8)
        writeItems(ranked)
        out.append(contentsOf: #","suggestions":"#.utf8)
        JSONValue.array(suggestions.prefix(request.maxSuggestionCount).map {
            QueryUser.Suggestion(text: $0.text, highlight: $0.highlight, kind: $0.kind).json
        }).write(to: &out)
        if incomplete { out.append(contentsOf: #","incomplete":true"#.utf8) }
        if let desktop {
            // How the items of each bundle in the answer open.
            var bundles: [String: DesktopOpening?] = [:]
            for hit in chosen where bundles[targets[hit.target].bundle] == nil {
                bundles[targets[hit.target].bundle] = .some(desktop.opening(targets[hit.target].bundle))
            }
            out.append(contentsOf: #","bundles":"#.utf8)
            (QueryUser.Response(items: [], rankedItems: [], suggestions: [], bundles: bundles).result["bundles"] ?? [:]).write(to: &out)
        }
        out.append(UInt8(ascii: "}"))
        if let sched {
            // Where the wall clock went off the CPU: waiting for a CPU (the run queue) or asleep
            // (a lock, I/O), and how often the thread gave way (voluntary) or was preempted.
            // And before it, since this thread's previous query ended: the run-queue wait of the
            // thread's wake-up when the request arrived (and of the reply to the previous one).
            let end = ThreadSched.sample()
            let before = ThreadSched.previous.map { sched.runQueueNanos &- $0.runQueueNanos } ?? 0
            ThreadSched.previous = end
            // Each phase's thread-CPU and wall microseconds: "lexical=cpu/wall vector=cpu/wall ...".
            // With the transformer, "embed" is the session thread's wait for the embedding (its
            // CPU near 0) and "embed-compute" the compute thread's CPU on it (no wall of its own);
            // cpu_us counts both threads.
            let phases = (budget.phases ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value.cpu / 1000)/\($0.value.wall / 1000)" }
            log.notice("query cpu", ["method": Method.queryUser, "cpu_us": String(Int(budget.worked * 1e6) + Int(budget.offThreadCPU / 1000)),
                "wall_us": String(Int(budget.elapsed * 1e6)), "runq_us": String((end.runQueueNanos &- sched.runQueueNanos) / 1000),
                "vcs": String(end.voluntary - sched.voluntary), "ivcs": String(end.involuntary - sched.involuntary),
                "runq_before_us": String(before / 1000), "phases_us": phases.joined(separator: " ")])
        }
        return .encoded(out)
    }

    /// The calling thread's time waiting on the run queue (/proc/thread-self/schedstat, 0 where
    /// the kernel does not keep it) and its context switches (RUSAGE_THREAD).
    struct ThreadSched {
        var runQueueNanos: UInt64 = 0
        var voluntary = 0
        var involuntary = 0

        /// This thread's sample at the end of its last logged query.
        static var previous: ThreadSched? {
            get { Thread.current.threadDictionary["searchlight.sched"] as? ThreadSched }
            set { Thread.current.threadDictionary["searchlight.sched"] = newValue }
        }

        static func sample() -> ThreadSched {
            var s = ThreadSched(runQueueNanos: QueryYield.sched()?.runDelay ?? 0)
            var usage = rusage()
            if getrusage(__rusage_who_t(1), &usage) == 0 {  // RUSAGE_THREAD
                s.voluntary = usage.ru_nvcsw
                s.involuntary = usage.ru_nivcsw
            }
            return s
        }
    }

    /// `SEARCHLIGHT_QUERY_CPU_LOG=1` (the bench's fresh scenario): a log line per `query.user`
    /// with its thread-CPU and wall time in the daemon (the query runs on the session's thread,
    /// but for the transformer's embedding, whose compute thread's CPU is added).
    static let logQueryCPU = ProcessInfo.processInfo.environment["SEARCHLIGHT_QUERY_CPU_LOG"] == "1"

    /// A user query across bundles as one ranking (Docs/Architecture.md, "Queries"): every
    /// index's statistics summed, every index's candidates scored with the sum, one fusion over
    /// the union, and only the chosen items read. Each index (while fewer than half the open-index
    /// bound are held so by all queries together) is leased for the whole query and read in one
    /// read transaction (`IndexSnapshot`): a
    /// ranked-index step or a write landing between its statistics and its candidates would
    /// shift its scores. Past that many, an index is leased only while each phase reads it, in a
    /// transaction of its own. `hits` come best first; `targets` are the indexes read.
    private func federatedUserQuery(_ request: UserQueryRequest, bundle: String?, index: String, budget: QueryBudget,
                                    targets: inout [(bundle: String, index: String)], hits: inout [UserQueryHit],
                                    suggestions: inout [Suggestion], items: inout EncodedItems) throws(SearchlightError) -> Bool
    {
        // Declared in this order so that the snapshots end before their leases are given back.
        let lease = IndexLeases(context.registry)
        defer { lease.release() }
        var snapshots: [IndexSnapshot?] = []
        defer {
            for s in snapshots {
                s?.close()
                if s != nil { context.registry.releaseSnapshotHold() }
            }
        }
        var statistics = CorpusStatistics()
        let incomplete = try forEachQueryTarget(bundle: bundle, index: index, activities: index.isEmpty) { (bundle, index, store) throws(SearchlightError) -> Bool in
            targets.append((bundle, index))
            // Every query visits the indexes in one order (bundles sorted, each one's activities after
            // it), so two queries holding readers never wait for each other's.
            if context.registry.reserveSnapshotHold() {
                let snapshot: IndexSnapshot
                do throws(SearchlightError) {
                    guard let kept = try context.registry.store(bundle: bundle, index: index, create: false, lease: lease) else {
                        context.registry.releaseSnapshotHold()
                        snapshots.append(nil)
                        statistics.add(try store.corpusStatistics(request, budget: budget))
                        return true
                    }
                    snapshot = try kept.openSnapshot(semantic: request.semantic != nil)
                } catch {
                    context.registry.releaseSnapshotHold()
                    throw error
                }
                snapshots.append(snapshot)
                let kept = snapshot.store
                statistics.add(try kept.corpusStatistics(request, budget: budget, snapshot: snapshot))
            } else {
                snapshots.append(nil)
                statistics.add(try store.corpusStatistics(request, budget: budget))
            }
            return true
        }
        /// `body` with index `i`'s store and snapshot (leased for the query), else leased for `body`.
        func withTarget<T>(_ i: Int, _ body: (IndexStore?, IndexSnapshot?) throws(SearchlightError) -> T) throws(SearchlightError) -> T {
            if let snapshot = snapshots[i] { return try body(snapshot.store, snapshot) }
            return try context.registry.withStore(bundle: targets[i].bundle, index: targets[i].index, create: false) {
                (store) throws(SearchlightError) -> T in try body(store, nil)
            }
        }
        let tuning = FederatedUserQuery.tuning(request.semantic, statistics: statistics)
        var shards: [ShardCandidates] = []
        for i in targets.indices {
            let shard = try withTarget(i) { (store, snapshot) throws(SearchlightError) -> ShardCandidates in
                try store?.userQueryCandidates(request, statistics: statistics, tuning: tuning, budget: budget,
                    completions: FederatedUserQuery.wantsCompletions(shards, request: request),
                    vectorCut: FederatedUserQuery.vectorCut(shards, request: request), snapshot: snapshot) ?? ShardCandidates()
            }
            shards.append(shard)
        }
        // Best-match: the items with some of the words, when those with all of them are too few.
        if FederatedUserQuery.needsTail(shards, request: request) {
            for i in targets.indices {
                shards[i].tail = try withTarget(i) { (store, snapshot) throws(SearchlightError) -> [ScoredCandidate] in
                    try store?.userQueryTail(request, statistics: statistics, after: shards[i].lexical, budget: budget, snapshot: snapshot) ?? []
                }
            }
        }
        suggestions = FederatedUserQuery.suggestions(shards, request: request)
        let ranked = try FederatedUserQuery.rank(shards, semantic: request.semantic, tuning: tuning, limit: request.maxResultCount) {
            (shard, rowids) throws(SearchlightError) -> Set<Int64> in
            try withTarget(shard) { (store, snapshot) throws(SearchlightError) -> Set<Int64> in
                try store?.exactHits(request, among: rowids, budget: budget, snapshot: snapshot) ?? []
            }
        }
        // Each index read once more, for its chosen items only; an item deleted meanwhile is left out.
        var position: [Int: Int] = [:]
        for (shard, _) in targets.enumerated() {
            let mine = ranked.indices.filter { ranked[$0].shard == shard }
            guard !mine.isEmpty else { continue }
            let first = items.count
            let found = try withTarget(shard) { (store, snapshot) throws(SearchlightError) -> [Bool] in
                try store?.writeUserQueryItems(mine.map { ranked[$0].candidate.rowID }, fetch: request.fetch, budget: budget, into: &items,
                    snapshot: snapshot) ?? mine.map { _ in false }
            }
            var n = first
            for (i, present) in zip(mine, found) where present {
                position[i] = n
                n += 1
            }
        }
        for (i, hit) in ranked.enumerated() {
            guard let item = position[i] else { continue }
            hits.append(UserQueryHit(score: hit.candidate.score, item: item, target: hit.shard,
                explanation: request.explain ? hit.candidate : nil))
        }
        return incomplete
    }

    /// An item's `explain`: `{lexicalRank?, vectorRank?, similarity?, score}`; `score` is the
    /// one the items are ordered by, higher first (the fused score in a hybrid query).
    static func explanation(_ e: FusedCandidate) -> JSONValue {
        var x: [String: JSONValue] = ["score": .number(-e.score)]
        if let r = e.lexicalRank { x["lexicalRank"] = .number(Double(r)) }
        if let r = e.vectorRank { x["vectorRank"] = .number(Double(r)) }
        if let s = e.similarity { x["similarity"] = .number((Double(s) * 10_000).rounded() / 10_000) }
        return .object(x)
    }

    /// `query.prepare`: loads the transformer; answers the model's state.
    func prepare() -> JSONResponse {
        context.semantic.prepare()
        return JSONResponse(result: ["semantic": context.semantic.status])
    }

    func engaged(_ r: QueryEngaged) throws(SearchlightError) -> JSONResponse {
        // An activity result (`activity: true`): its bundle's history, which must exist (read
        // access, as the desktop's engagement: the ranking signal is not the history's data; an
        // engagement never creates the history nor claims the bundle).
        let found = r.activity ? try store(bundle: r.bundle, index: Names.activityIndex, write: false).store
                               : try store(bundle: r.bundle, index: r.index, write: true).store
        guard let store = found else { return .empty }
        var identifier: String?, suggestion: String?
        switch r.target {
        case .identifier(let id): identifier = id
        case .suggestion(let s): suggestion = s
        }
        try store.recordEngagement(identifier: identifier, suggestion: suggestion, weight: r.interaction == .select ? 1 : 0.25)
        return .empty
    }

    // MARK: - Budget

    /// The budget of one query call: the deadline (`--query-timeout`), a log line once it runs
    /// past `--slow-query` (while it still runs: an operator sees who is busy), and the
    /// connection's socket polled for a hang-up.
    private func queryBudget(_ method: String) -> QueryBudget {
        QueryYield.queryBegan()  // background work yields the CPU to it for a while
        let config = context.config
        let socket = client.connection.socket
        let log = self.log, peer = client.peer
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
            let log = self.log, peer = client.peer, elapsed = budget.elapsed
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

    /// An administrator's query without "bundle" reads every bundle's index; the desktop's every
    /// bundle's it may show (`DesktopCalls.mayShow`).
    private func acrossBundles(_ bundle: String?) -> Bool {
        switch caller {
        case .admin, .desktop: return bundle == nil
        case .app, .extensionUnit: return false
        }
    }

    /// Runs `body` on each store a query reads: the caller's bundle, or for an admin without
    /// "bundle", every bundle's, one at a time (each leased only while it is read, so a search
    /// across ten thousand bundles keeps the open-index bound). `body` returns false to stop.
    /// Returns whether one of them is being refilled (DESIGN §4 `incomplete`).
    /// `activities`: each bundle's activity history (`Names.activityIndex`) is read after its index.
    @discardableResult
    private func forEachQueryTarget(bundle requested: String?, index: String, activities: Bool = false,
                                    _ body: (_ bundle: String, _ index: String, _ store: IndexStore) throws(SearchlightError) -> Bool) throws(SearchlightError) -> Bool {
        var incomplete = false
        func visit(_ bundle: String, _ index: String, _ store: IndexStore) throws(SearchlightError) -> Bool {
            if context.registry.condition(bundle: bundle, index: index)?.incomplete ?? false { incomplete = true }
            return try body(bundle, index, store)
        }
        func visitActivities(_ bundle: String) throws(SearchlightError) -> Bool {
            guard activities, hasActivities(bundle) else { return true }
            return try context.registry.withStore(bundle: bundle, index: Names.activityIndex, create: false) { (s) throws(SearchlightError) -> Bool in
                guard let s else { return true }
                return try visit(bundle, Names.activityIndex, s)
            }
        }
        guard acrossBundles(requested) else {
            let t = try store(bundle: requested, index: index, write: false)
            if let s = t.store { guard try visit(t.bundle, t.index, s) else { return incomplete } }
            _ = try visitActivities(t.bundle)
            return incomplete
        }
        let desktop = DesktopCalls(calls: self)
        for b in context.registry.bundles() {
            if case .desktop = caller, !desktop.mayShow(b) { continue }
            let more = try context.registry.withStore(bundle: b, index: index, create: false) { (s) throws(SearchlightError) -> Bool in
                guard let s else { return true }
                return try visit(b, index, s)
            }
            if !more { break }
            if !(try visitActivities(b)) { break }
        }
        return incomplete
    }

    /// Whether the bundle has an activity history (its file, or its store open).
    func hasActivities(_ bundle: String) -> Bool {
        context.registry.servedStore(bundle: bundle, index: Names.activityIndex) != nil
            || FileManager.default.fileExists(atPath: context.registry.path(bundle: bundle, index: Names.activityIndex))
    }

    /// The members that say where an item found across bundles lives: `bundle`, and `index`
    /// unless it is the default one.
    static func tag(_ o: inout JSONObjectWriter, _ out: inout [UInt8], bundle: String, index: String) {
        o.key("bundle", &out)
        JSONValue.writeString(bundle, to: &out)
        if !index.isEmpty {
            o.key("index", &out)
            JSONValue.writeString(index, to: &out)
        }
    }
}
