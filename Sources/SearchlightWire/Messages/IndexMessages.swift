import Foundation

// The index methods (role app or extension; an administrator adds `bundle`). Each names the
// index with `index` ("" or absent: the bundle's default index).

/// What a donation or deletion did: counts, or `batched` when it joined an open batch.
public struct MutationResponse: WireResponse, Equatable {
    public var indexed = 0
    public var updatesDropped = 0
    public var deleted = 0
    /// The call joined the open batch: nothing is applied until `index.endBatch`.
    public var batched = false

    public init(indexed: Int = 0, updatesDropped: Int = 0, deleted: Int = 0, batched: Bool = false) {
        self.indexed = indexed
        self.updatesDropped = updatesDropped
        self.deleted = deleted
        self.batched = batched
    }

    public init(result: JSONValue) throws(SearchlightError) {
        indexed = result["indexed"]?.intValue ?? 0
        updatesDropped = result["updatesDropped"]?.intValue ?? 0
        deleted = result["deleted"]?.intValue ?? 0
        batched = result["batched"]?.boolValue ?? false
    }

    public var result: JSONValue {
        if batched { return ["batched": true] }
        return ["indexed": .number(Double(indexed)), "updatesDropped": .number(Double(updatesDropped)), "deleted": .number(Double(deleted))]
    }
}

/// `index.items {items, index?}`: adds or replaces items; one invalid item fails the call.
public struct IndexItems: WireRequest {
    public typealias Response = MutationResponse
    public static let method = Method.indexItems
    public static let fields = ["items", "index?", "bundle?"]
    public static var example: IndexItems {
        var attributes = AttributeSet(contentType: "public.plain-text")
        attributes.title = "Natural Bridges"
        return IndexItems(items: [SearchableItem(uniqueIdentifier: "trip-1", attributeSet: attributes)], index: "trips", bundle: "com.example.notes")
    }

    public var items: [SearchableItem]
    public var index: String
    public var bundle: String?

    public init(items: [SearchableItem], index: String = "", bundle: String? = nil) {
        self.items = items
        self.index = index
        self.bundle = bundle
    }

    public init(params p: WireParams) throws(SearchlightError) {
        items = try ItemValidator(limits: p.limits).validate(items: p.value("items"))
        index = try p.index()
        bundle = try p.optionalBundle()
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("items", .array(items.map(\.json)))
        b.setIndex(index)
        b.set("bundle", bundle)
        return b.json
    }
}

/// `index.deleteIdentifiers {identifiers, index?}` (at most `maxIdentifiersPerCall`).
public struct IndexDeleteIdentifiers: WireRequest, Equatable {
    public typealias Response = MutationResponse
    public static let method = Method.indexDeleteIdentifiers
    public static let fields = ["identifiers", "index?", "bundle?"]
    public static let example = IndexDeleteIdentifiers(identifiers: ["trip-1"], index: "trips", bundle: "com.example.notes")

    public var identifiers: [String]
    public var index: String
    public var bundle: String?

    public init(identifiers: [String], index: String = "", bundle: String? = nil) {
        self.identifiers = identifiers
        self.index = index
        self.bundle = bundle
    }

    public init(params p: WireParams) throws(SearchlightError) {
        identifiers = try p.identifiers("identifiers")
        index = try p.index()
        bundle = try p.optionalBundle()
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("identifiers", identifiers)
        b.setIndex(index)
        b.set("bundle", bundle)
        return b.json
    }
}

/// `index.deleteDomains {domains, index?}`: recursive on dot components (`a` removes `a.b`).
public struct IndexDeleteDomains: WireRequest, Equatable {
    public typealias Response = MutationResponse
    public static let method = Method.indexDeleteDomains
    public static let fields = ["domains", "index?", "bundle?"]
    public static let example = IndexDeleteDomains(domains: ["trips.2019"], index: "trips", bundle: "com.example.notes")

    public var domains: [String]
    public var index: String
    public var bundle: String?

    public init(domains: [String], index: String = "", bundle: String? = nil) {
        self.domains = domains
        self.index = index
        self.bundle = bundle
    }

    public init(params p: WireParams) throws(SearchlightError) {
        domains = try p.identifiers("domains")
        let validator = ItemValidator(limits: p.limits)
        for d in domains where !validator.validDomain(d) {
            throw .invalidParams("domain \"\(d.prefix(80))\" must be dot-separated non-empty components")
        }
        index = try p.index()
        bundle = try p.optionalBundle()
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("domains", domains)
        b.setIndex(index)
        b.set("bundle", bundle)
        return b.json
    }
}

/// A method whose only parameters are the index (and an administrator's bundle).
public protocol IndexOnlyRequest: WireRequest {
    var index: String { get }
    var bundle: String? { get }
    init(index: String, bundle: String?)
}

extension IndexOnlyRequest {
    public static var fields: [String] { ["index?", "bundle?"] }
    public static var example: Self { Self(index: "trips", bundle: "com.example.notes") }

    public init(params p: WireParams) throws(SearchlightError) {
        self.init(index: try p.index(), bundle: try p.optionalBundle())
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.setIndex(index)
        b.set("bundle", bundle)
        return b.json
    }
}

/// `index.deleteAll {index?}`: every item, and the client state.
public struct IndexDeleteAll: IndexOnlyRequest, Equatable {
    public typealias Response = MutationResponse
    public static let method = Method.indexDeleteAll
    public var index: String
    public var bundle: String?
    public init(index: String = "", bundle: String? = nil) {
        self.index = index
        self.bundle = bundle
    }
}

/// `index.beginBatch {index?}`: the calls until `index.endBatch` commit together, or not at all.
public struct IndexBeginBatch: IndexOnlyRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.indexBeginBatch
    public var index: String
    public var bundle: String?
    public init(index: String = "", bundle: String? = nil) {
        self.index = index
        self.bundle = bundle
    }
}

/// `index.fetchLastClientState {index?}` → `{clientState: base64 | null}`.
public struct IndexFetchLastClientState: IndexOnlyRequest, Equatable {
    public static let method = Method.indexFetchLastClientState
    public var index: String
    public var bundle: String?
    public init(index: String = "", bundle: String? = nil) {
        self.index = index
        self.bundle = bundle
    }

    public struct Response: WireResponse, Equatable {
        public var clientState: Data?
        public init(clientState: Data?) { self.clientState = clientState }
        public init(result: JSONValue) throws(SearchlightError) {
            clientState = result["clientState"]?.stringValue.flatMap { Data(base64Encoded: $0) }
        }
        public var result: JSONValue { ["clientState": clientState.map { .string($0.base64EncodedString()) } ?? .null] }
    }
}

/// `index.endBatch {newClientState, expectedClientState?, index?}`: applies the batch with the
/// new client state, only if the stored one equals `expectedClientState` when that is given
/// (`null`: none stored).
public struct IndexEndBatch: WireRequest, Equatable {
    public typealias Response = MutationResponse
    public static let method = Method.indexEndBatch
    public static let fields = ["newClientState", "expectedClientState?", "index?", "bundle?"]
    public static let example = IndexEndBatch(newClientState: Array("42".utf8), expectedClientState: .some(nil), index: "trips",
                                              bundle: "com.example.notes")

    public var newClientState: [UInt8]
    /// nil: any state; `.some(nil)`: none may be stored; `.some(x)`: `x` must be.
    public var expectedClientState: [UInt8]??
    public var index: String
    public var bundle: String?

    public init(newClientState: [UInt8], expectedClientState: [UInt8]?? = nil, index: String = "", bundle: String? = nil) {
        self.newClientState = newClientState
        self.expectedClientState = expectedClientState
        self.index = index
        self.bundle = bundle
    }

    public init(params p: WireParams) throws(SearchlightError) {
        guard let state = try p.clientState("newClientState") else {
            throw SearchlightError(.invalidClientState, "\"newClientState\" is required (base64, at most \(p.limits.maxClientStateBytes) bytes)")
        }
        newClientState = state
        expectedClientState = p.has("expectedClientState") ? .some(try p.clientState("expectedClientState")) : nil
        index = try p.index()
        bundle = try p.optionalBundle()
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("newClientState", Data(newClientState).base64EncodedString())
        if let expected = expectedClientState {
            b.set("expectedClientState", expected.map { JSONValue.string(Data($0).base64EncodedString()) } ?? .null)
        }
        b.setIndex(index)
        b.set("bundle", bundle)
        return b.json
    }
}

/// `index.fetchData {identifier, typeIdentifier}` → `{data: base64}`, and `index.fetchFileURL
/// {identifier, typeIdentifier, inPlace?}` → `{url}`: an item's data from the bundle's extension.
public struct IndexFetchData: WireRequest, Equatable {
    public static let method = Method.indexFetchData
    public static let fields = ["identifier", "typeIdentifier", "index?", "bundle?"]
    public static let example = IndexFetchData(identifier: "trip-1", typeIdentifier: "public.plain-text", index: "trips", bundle: "com.example.notes")

    public var identifier: String
    public var typeIdentifier: String
    public var index: String
    public var bundle: String?

    public init(identifier: String, typeIdentifier: String, index: String = "", bundle: String? = nil) {
        self.identifier = identifier
        self.typeIdentifier = typeIdentifier
        self.index = index
        self.bundle = bundle
    }

    public init(params p: WireParams) throws(SearchlightError) {
        (identifier, typeIdentifier) = try Self.item(p)
        index = try p.index()
        bundle = try p.optionalBundle()
    }

    /// The item and the representation asked for, checked as both fetch methods check them.
    static func item(_ p: WireParams) throws(SearchlightError) -> (String, String) {
        guard let identifier = try? p.optionalString("identifier", maxBytes: p.limits.maxIdentifierBytes), !identifier.isEmpty else {
            throw .invalidParams("\"identifier\" must be a non-empty string of at most \(p.limits.maxIdentifierBytes) bytes")
        }
        guard let type = try? p.optionalString("typeIdentifier", maxBytes: 255), !type.isEmpty else {
            throw .invalidParams("\"typeIdentifier\" must be a UTI string such as \"public.plain-text\"")
        }
        return (identifier, type)
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("identifier", identifier)
        b.set("typeIdentifier", typeIdentifier)
        b.setIndex(index)
        b.set("bundle", bundle)
        return b.json
    }

    public struct Response: WireResponse, Equatable {
        public var data: Data
        public init(data: Data) { self.data = data }
        public init(result: JSONValue) throws(SearchlightError) {
            guard let data = result["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }) else {
                throw SearchlightError(.extensionFailed, "the extension answered without data")
            }
            self.data = data
        }
        public var result: JSONValue { ["data": .string(data.base64EncodedString())] }
    }
}

/// `index.fetchFileURL {identifier, typeIdentifier, inPlace?}` → `{url}`.
public struct IndexFetchFileURL: WireRequest, Equatable {
    public static let method = Method.indexFetchFileURL
    public static let fields = ["identifier", "typeIdentifier", "inPlace?", "index?", "bundle?"]
    public static let example = IndexFetchFileURL(identifier: "trip-1", typeIdentifier: "public.plain-text", inPlace: true, index: "trips",
                                                  bundle: "com.example.notes")

    public var identifier: String
    public var typeIdentifier: String
    public var inPlace: Bool
    public var index: String
    public var bundle: String?

    public init(identifier: String, typeIdentifier: String, inPlace: Bool = false, index: String = "", bundle: String? = nil) {
        self.identifier = identifier
        self.typeIdentifier = typeIdentifier
        self.inPlace = inPlace
        self.index = index
        self.bundle = bundle
    }

    public init(params p: WireParams) throws(SearchlightError) {
        (identifier, typeIdentifier) = try IndexFetchData.item(p)
        inPlace = try p.bool("inPlace", default: false)
        index = try p.index()
        bundle = try p.optionalBundle()
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("identifier", identifier)
        b.set("typeIdentifier", typeIdentifier)
        b.set("inPlace", inPlace)
        b.setIndex(index)
        b.set("bundle", bundle)
        return b.json
    }

    public struct Response: WireResponse, Equatable {
        public var url: URL
        public init(url: URL) { self.url = url }
        public init(result: JSONValue) throws(SearchlightError) {
            guard let url = result["url"]?.stringValue.flatMap(URL.init(string:)) else {
                throw SearchlightError(.extensionFailed, "the extension answered without a URL")
            }
            self.url = url
        }
        public var result: JSONValue { ["url": .string(url.absoluteString)] }
    }
}
