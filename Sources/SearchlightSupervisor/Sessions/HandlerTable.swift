import SearchlightWire

/// How one method is answered: at once, on the connection's reader thread (inside the gate,
/// retried after a recovery), or later from a task (it waits on an extension).
enum RoleHandler {
    typealias Sync = (_ params: JSONValue, _ limits: Limits) throws(SearchlightError) -> WireAnswer
    typealias Deferred = @Sendable (_ params: JSONValue, _ limits: Limits) async throws -> JSONValue
    case sync(Sync)
    case deferred(Deferred)
}

/// A role's methods: for each, its typed request (decoded once, by the type: `WireRequest`) and
/// the session method that answers it. Built once per role; looked up per call.
struct HandlerTable<Session: AnyObject & Sendable>: Sendable {
    private enum Entry: Sendable {
        case sync(@Sendable (Session, JSONValue, Limits) throws(SearchlightError) -> WireAnswer)
        case deferred(@Sendable (Session, JSONValue, Limits) async throws -> JSONValue)
    }
    private var entries: [String: Entry] = [:]

    /// The methods this role answers.
    var methods: [String] { entries.keys.sorted() }

    /// `R` answered at once by `answer`.
    mutating func on<R: WireRequest>(_: R.Type, _ answer: @escaping @Sendable (Session, R) throws(SearchlightError) -> R.Response) {
        entries[R.method] = .sync { session, params, limits throws(SearchlightError) in
            .value(try answer(session, try R.decode(params, limits: limits)).result)
        }
    }

    /// `R` answered at once by `answer`, which writes the result's JSON itself (query answers:
    /// items written from their rows, no `R.Response` in between).
    mutating func onEncoded<R: WireRequest>(_: R.Type, _ answer: @escaping @Sendable (Session, R) throws(SearchlightError) -> WireAnswer) {
        entries[R.method] = .sync { session, params, limits throws(SearchlightError) in
            try answer(session, try R.decode(params, limits: limits))
        }
    }

    /// `R` answered later by `answer`, which may wait (on an extension).
    mutating func onDeferred<R: WireRequest>(_: R.Type, _ answer: @escaping @Sendable (Session, R) async throws -> R.Response) {
        entries[R.method] = .deferred { session, params, limits in
            try await answer(session, try R.decode(params, limits: limits)).result
        }
    }

    /// The handler of `method` bound to `session`, or nil when this role does not answer it.
    func handler(for method: String, session: Session) -> RoleHandler? {
        switch entries[method] {
        case .sync(let run)?:
            return .sync { params, limits throws(SearchlightError) in try run(session, params, limits) }
        case .deferred(let run)?:
            return .deferred { [session] params, limits in try await run(session, params, limits) }
        case nil:
            return nil
        }
    }
}

/// The session of a role: what it calls its own bundle, and its handlers.
protocol RoleSession: AnyObject, Sendable {
    static var handlers: HandlerTable<Self> { get }
}

extension RoleSession {
    func handler(for method: String) -> RoleHandler? { Self.handlers.handler(for: method, session: self) }
}

/// A role that donates and queries through `BundleCalls`.
protocol BundleSession: RoleSession {
    var calls: BundleCalls { get }
}

extension HandlerTable where Session: BundleSession {
    /// The index methods of DESIGN §4 (role app or extension; an administrator names the bundle).
    mutating func addIndexMethods() {
        on(IndexItems.self) { s, r throws(SearchlightError) in try s.calls.items(r) }
        on(IndexDeleteIdentifiers.self) { s, r throws(SearchlightError) in try s.calls.mutate(.deleteIdentifiers(r.identifiers), index: r.index, bundle: r.bundle) }
        on(IndexDeleteDomains.self) { s, r throws(SearchlightError) in try s.calls.mutate(.deleteDomains(r.domains), index: r.index, bundle: r.bundle) }
        on(IndexDeleteAll.self) { s, r throws(SearchlightError) in try s.calls.mutate(.deleteAll, index: r.index, bundle: r.bundle) }
        on(IndexBeginBatch.self) { s, r throws(SearchlightError) in try s.calls.beginBatch(r) }
        on(IndexEndBatch.self) { s, r throws(SearchlightError) in try s.calls.endBatch(r) }
        on(IndexFetchLastClientState.self) { s, r throws(SearchlightError) in try s.calls.fetchLastClientState(r) }
    }

    /// The query methods (`query.search`, `query.user`, `query.engaged`, `query.prepare`).
    mutating func addQueryMethods() {
        onEncoded(QuerySearch.self) { s, r throws(SearchlightError) in try s.calls.search(r) }
        onEncoded(QueryUser.self) { s, r throws(SearchlightError) in try s.calls.userQuery(r) }
        on(QueryEngaged.self) { s, r throws(SearchlightError) in try s.calls.engaged(r) }
        on(QueryPrepare.self) { s, _ throws(SearchlightError) in s.calls.prepare() }
    }

    /// An item's data from the bundle's extension (`index.fetchData`, `index.fetchFileURL`).
    mutating func addItemDataMethods() {
        onDeferred(IndexFetchData.self) { s, r in try await s.calls.fetchData(r) }
        onDeferred(IndexFetchFileURL.self) { s, r in try await s.calls.fetchFileURL(r) }
    }
}
