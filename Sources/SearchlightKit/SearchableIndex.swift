import Foundation
import Synchronization

/// Apple-platform developers know this as `CSIndexErrorCode`; here every failure is a
/// `SearchlightError` carrying the wire code (`error.code`) and a message that says what to do.
public typealias SearchableIndexError = SearchlightError

/// An app's index in `searchlightd` (CSSearchableIndex). Every call returns once its effect is
/// committed to disk. Each instance an app creates has its own connection, so batches are per
/// instance. (The indexes an extension is handed share its one connection; a batch left open when
/// its handler returns or throws is discarded by the daemon, nothing of it applied.)
public final class SearchableIndex: Sendable {
    /// The index name ("" is the bundle's default index).
    public let name: String
    public let bundleIdentifier: String
    let connection: SearchlightConnection
    /// The supervisor request this index was handed to an extension for (progress is reported on it).
    let requestID: String?
    /// False for the indexes an extension is handed: they share the extension's one connection.
    let ownsConnection: Bool
    /// Under `--dump`: where donations are printed instead of sent.
    let dump: ItemDump?
    /// The request's progress as last reported (an extension's request index).
    private let progress = Mutex<(completed: Int, total: Int?)>((0, nil))

    public init(name: String = "", bundleIdentifier: String, socketPath: String? = nil) {
        self.name = name
        self.bundleIdentifier = bundleIdentifier
        connection = SearchlightConnection(role: .app(bundleIdentifier: bundleIdentifier), socketPath: socketPath)
        requestID = nil
        ownsConnection = true
        dump = nil
    }

    /// The index an extension works on while it answers one supervisor request.
    init(name: String, bundleIdentifier: String, connection: SearchlightConnection, requestID: String?) {
        self.name = name
        self.bundleIdentifier = bundleIdentifier
        self.connection = connection
        self.requestID = requestID
        ownsConnection = false
        dump = nil
    }

    /// The index an extension is handed under `--dump`: donations go to standard output.
    init(name: String, dump: ItemDump) {
        self.name = name
        bundleIdentifier = ""
        connection = SearchlightConnection(role: .admin, socketPath: "/dev/null")
        requestID = nil
        ownsConnection = false
        self.dump = dump
    }

    /// Inside an extension's reindex handler: tells the supervisor how far the request has come.
    /// It shows in `searchlight reindex` and `searchlight monitor`, and, like every donation, it
    /// resets the acknowledgement inactivity timer. Elsewhere it does nothing.
    ///
    /// You rarely need it: after each committed call of `indexSearchableItems` the SDK reports the
    /// items committed so far on this index. Report once with `completed: 0, total: N` before
    /// donating and the progress has its total; report yourself during long work that donates
    /// nothing. A count you report is where the SDK's own counting goes on from.
    public func reportProgress(completed: Int, total: Int? = nil) async {
        let state = progress.withLock { state in
            state.completed = max(0, completed)
            if let total { state.total = total }
            return state
        }
        await sendProgress(state)
    }

    /// Items committed by `indexSearchableItems`: counted into the progress, which is reported.
    func itemsCommitted(_ count: Int) async {
        guard requestID != nil, dump == nil else { return }
        let state = progress.withLock { state in
            state.completed += count
            return state
        }
        await sendProgress(state)
    }

    private func sendProgress(_ state: (completed: Int, total: Int?)) async {
        guard let requestID, dump == nil else { return }
        let progress = RequestProgress(requestId: requestID, completed: state.completed, total: state.total.map { max($0, state.completed) })
        try? await connection.notify(RequestProgress.method, progress.params)
    }

    /// Sends a typed request for this index (under `--dump`, answered as `ItemDump` says).
    func send<R: WireRequest>(_ request: R) async throws -> R.Response {
        if let dump { return try R.Response(result: try dump.answer(R.method)) }
        return try await connection.send(request)
    }

    /// Sends a query whose answer is read straight into a typed result (`SearchPageAnswer`,
    /// `UserQueryAnswer`), in one pass over the answer; under `--dump`, from the `JSONValue`
    /// answer written out.
    func send<R: WireRequest, T: WireResultDecodable>(_ request: R, as type: T.Type) async throws -> T {
        if let dump { return try dump.answer(R.method).serialized().withUnsafeBufferPointer { try T.decode($0, maxDepth: 128) } }
        return try await connection.call(R.method, request.params, as: type)
    }

    /// A `query.search` call, its params written straight into the frame (`QuerySearch.encodedParams`).
    func sendPage(_ request: QuerySearch) async throws -> SearchPageAnswer {
        if let dump { return try dump.answer(QuerySearch.method).serialized().withUnsafeBufferPointer { try SearchPageAnswer.decode($0, maxDepth: 128) } }
        return try await connection.call(QuerySearch.method, encodedParams: request.encodedParams, as: SearchPageAnswer.self)
    }

    /// Adds or replaces items (or merges those marked `isUpdate`), from any sequence: an array, a
    /// lazy sequence over a file being parsed, a `map` of your records. The SDK sends them in
    /// calls of at most 1 000 items or 4 MiB and keeps a few calls in flight while it reads on,
    /// so a million items take constant memory and the daemon commits one call while the next is
    /// built. Returns once every item is committed. An invalid item fails its call with
    /// `invalidItem` (naming it) and nothing of that call is applied, but calls before it are;
    /// wrap the donation in a batch (`beginBatch`/`endBatch`) to apply all or nothing.
    public func indexSearchableItems<Items: Sequence>(_ items: Items) async throws where Items.Element == SearchableItem {
        var sender = ItemSender(index: self)
        for item in items { try await sender.add(item) }
        try await sender.finish()
    }

    /// Adds or replaces items as an async sequence produces them (items read from a network
    /// source, say), in calls of at most 1 000 items or 4 MiB with a few in flight, as above.
    public func indexSearchableItems<Items: AsyncSequence>(_ items: Items) async throws where Items.Element == SearchableItem {
        var sender = ItemSender(index: self)
        for try await item in items { try await sender.add(item) }
        try await sender.finish()
    }

    public func deleteSearchableItems(withIdentifiers identifiers: [String]) async throws {
        _ = try await send(IndexDeleteIdentifiers(identifiers: identifiers, index: name))
    }

    /// Deletes the items of these domains and of their subdomains (`a` removes `a.b`, not `ab`).
    public func deleteSearchableItems(withDomainIdentifiers domains: [String]) async throws {
        _ = try await send(IndexDeleteDomains(domains: domains, index: name))
    }

    /// Deletes every item of this index and its client state.
    public func deleteAllSearchableItems() async throws {
        _ = try await send(IndexDeleteAll(index: name))
    }

    /// Starts a batch: the calls until `endBatch` commit together with the new client state, or not at all.
    public func beginBatch() async throws {
        _ = try await send(IndexBeginBatch(index: name))
    }

    /// Ends the batch. With `expectedClientState`, it applies only if the stored state still equals
    /// it (else `mismatchedClientState` and nothing is applied); pass `.some(nil)` to expect none.
    public func endBatch(expectedClientState: Data?? = nil, newClientState: Data) async throws {
        let expected: [UInt8]?? = expectedClientState.map { $0.map { Array($0) } }
        _ = try await send(IndexEndBatch(newClientState: Array(newClientState), expectedClientState: expected, index: name))
    }

    /// The client state stored by the last successful batch, or nil.
    public func fetchLastClientState() async throws -> Data? {
        try await send(IndexFetchLastClientState(index: name)).clientState
    }

    /// The item's data in the representation `contentType` (a UTI), provided by the bundle's index
    /// extension (CSSearchableIndex.fetchData); `unknownExtension` when none serves the bundle.
    public func fetchData(forItemIdentifier identifier: String, contentType: String) async throws -> Data {
        try await send(IndexFetchData(identifier: identifier, typeIdentifier: contentType, index: name)).data
    }

    /// A file holding the item in the representation `contentType`, from the bundle's index
    /// extension; `inPlace` asks for the original file rather than a copy.
    public func fetchFileURL(forItemIdentifier identifier: String, contentType: String, inPlace: Bool = false) async throws -> URL {
        try await send(IndexFetchFileURL(identifier: identifier, typeIdentifier: contentType, inPlace: inPlace, index: name)).url
    }

    /// Drops the connection to the daemon; the next call reconnects. (An extension's index shares
    /// the extension's connection, which stays open.)
    public func close() async {
        if ownsConnection { await connection.close() }
    }

    /// The limits of the daemon this index talks to (its handshake), for chunking donations.
    func serverLimits() async -> (items: Int, bytes: Int) {
        guard dump == nil, let info = try? await connection.open() else { return (1000, 4 << 20) }
        let frame = info["limits"]?["maxFrameBytes"]?.intValue ?? (16 << 20)
        let ids = info["limits"]?["maxIdentifiersPerCall"]?.intValue ?? 10_000
        return (max(1, min(1000, ids)), max(64 << 10, min(4 << 20, frame / 4)))
    }
}

extension SearchableItem {
    /// Reads an item as the daemon returns it (already validated on the way in).
    public init?(wire: JSONValue) {
        guard let id = wire["uniqueIdentifier"]?.stringValue else { return nil }
        self.init(uniqueIdentifier: id, domainIdentifier: wire["domainIdentifier"]?.stringValue,
            attributeSet: AttributeSet(validatedValues: wire["attributeSet"]?.objectValue ?? [:]))
        expirationDate = wire["expirationDate"]?.stringValue.flatMap(ISO8601.parse)
    }
}
