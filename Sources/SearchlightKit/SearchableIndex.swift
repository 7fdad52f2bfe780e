import Foundation

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

    public init(name: String = "", bundleIdentifier: String, socketPath: String? = nil) {
        self.name = name
        self.bundleIdentifier = bundleIdentifier
        connection = SearchlightConnection(role: .app(bundleIdentifier: bundleIdentifier), socketPath: socketPath)
        requestID = nil
        ownsConnection = true
    }

    /// The index an extension works on while it answers one supervisor request.
    init(name: String, bundleIdentifier: String, connection: SearchlightConnection, requestID: String?) {
        self.name = name
        self.bundleIdentifier = bundleIdentifier
        self.connection = connection
        self.requestID = requestID
        ownsConnection = false
    }

    /// Inside an extension's reindex handler: tells the supervisor how far the request has come.
    /// It shows in `searchlight reindex` and `searchlight monitor`, and, like every donation, it
    /// resets the acknowledgement inactivity timer. Elsewhere it does nothing.
    public func reportProgress(completed: Int, total: Int? = nil) async {
        guard let requestID else { return }
        var params: [String: JSONValue] = ["requestId": .string(requestID), "completed": .number(Double(completed))]
        if let total { params["total"] = .number(Double(total)) }
        try? await connection.notify(Method.progress, .object(params))
    }

    func call(_ method: String, _ params: [String: JSONValue] = [:]) async throws -> JSONValue {
        var p = params
        if !name.isEmpty { p["index"] = .string(name) }
        return try await connection.call(method, .object(p))
    }

    /// Adds or replaces items (or merges those marked `isUpdate`). One invalid item fails the call
    /// and nothing is applied.
    public func indexSearchableItems(_ items: [SearchableItem]) async throws {
        _ = try await call(Method.indexItems, ["items": .array(items.map(\.json))])
    }

    public func deleteSearchableItems(withIdentifiers identifiers: [String]) async throws {
        _ = try await call(Method.indexDeleteIdentifiers, ["identifiers": .array(identifiers.map(JSONValue.string))])
    }

    /// Deletes the items of these domains and of their subdomains (`a` removes `a.b`, not `ab`).
    public func deleteSearchableItems(withDomainIdentifiers domains: [String]) async throws {
        _ = try await call(Method.indexDeleteDomains, ["domains": .array(domains.map(JSONValue.string))])
    }

    /// Deletes every item of this index and its client state.
    public func deleteAllSearchableItems() async throws {
        _ = try await call(Method.indexDeleteAll)
    }

    /// Starts a batch: the calls until `endBatch` commit together with the new client state, or not at all.
    public func beginBatch() async throws {
        _ = try await call(Method.indexBeginBatch)
    }

    /// Ends the batch. With `expectedClientState`, it applies only if the stored state still equals
    /// it (else `mismatchedClientState` and nothing is applied); pass `.some(nil)` to expect none.
    public func endBatch(expectedClientState: Data?? = nil, newClientState: Data) async throws {
        var params: [String: JSONValue] = ["newClientState": .string(newClientState.base64EncodedString())]
        if let expected = expectedClientState {
            params["expectedClientState"] = expected.map { .string($0.base64EncodedString()) } ?? .null
        }
        _ = try await call(Method.indexEndBatch, params)
    }

    /// The client state stored by the last successful batch, or nil.
    public func fetchLastClientState() async throws -> Data? {
        let r = try await call(Method.indexFetchLastClientState)
        return r["clientState"]?.stringValue.flatMap { Data(base64Encoded: $0) }
    }

    /// The item's data in the representation `contentType` (a UTI), provided by the bundle's index
    /// extension (CSSearchableIndex.fetchData); `unknownExtension` when none serves the bundle.
    public func fetchData(forItemIdentifier identifier: String, contentType: String) async throws -> Data {
        let r = try await call(Method.indexFetchData, ["identifier": .string(identifier), "typeIdentifier": .string(contentType)])
        guard let data = r["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }) else {
            throw SearchlightError(.extensionFailed, "the extension answered without data")
        }
        return data
    }

    /// A file holding the item in the representation `contentType`, from the bundle's index
    /// extension; `inPlace` asks for the original file rather than a copy.
    public func fetchFileURL(forItemIdentifier identifier: String, contentType: String, inPlace: Bool = false) async throws -> URL {
        let r = try await call(Method.indexFetchFileURL, ["identifier": .string(identifier), "typeIdentifier": .string(contentType), "inPlace": .bool(inPlace)])
        guard let url = r["url"]?.stringValue.flatMap(URL.init(string:)) else {
            throw SearchlightError(.extensionFailed, "the extension answered without a URL")
        }
        return url
    }

    /// Drops the connection to the daemon; the next call reconnects. (An extension's index shares
    /// the extension's connection, which stays open.)
    public func close() async {
        if ownsConnection { await connection.close() }
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
