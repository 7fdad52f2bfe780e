import Foundation

// Supervisor → extension requests (the answer is the acknowledgement), and the notifications of
// the protocol. A request id on these messages is the journal's id as a decimal string; the
// admin methods carry it as a number (both are accepted where a client sends one back).

/// The journaled request an extension works on: its id, why, and which index.
public struct ExtensionRequestHeader: Sendable, Equatable {
    public var requestId: String
    /// `manual`, `initial`, `migration`, `corruption`, `idle`, `background`, …
    public var reason: String
    public var index: String

    public init(requestId: String, reason: String, index: String) {
        self.requestId = requestId
        self.reason = reason
        self.index = index
    }

    init(_ p: WireParams) throws(SearchlightError) {
        requestId = try p.string("requestId", maxBytes: 64)
        // Always sent by searchlightd; a reader that needs none does not insist (additive fields).
        reason = try p.optionalString("reason", maxBytes: 64) ?? ""
        guard p.has("index") else { throw .invalidParams("\"index\" is required (\"\" for the default index)") }
        index = try p.index()
    }

    func write(to b: inout ParamsBuilder) {
        b.set("requestId", requestId)
        b.set("reason", reason)
        b.set("index", index)
    }
}

/// `extension.reindexAll {requestId, reason, index}`: donate every item of the index.
public struct ExtensionReindexAll: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.extensionReindexAll
    public static let fields = ["requestId", "reason?", "index"]
    public static let example = ExtensionReindexAll(ExtensionRequestHeader(requestId: "12", reason: "initial", index: "notes"))
    public var header: ExtensionRequestHeader
    public init(_ header: ExtensionRequestHeader) { self.header = header }
    public init(params p: WireParams) throws(SearchlightError) { header = try ExtensionRequestHeader(p) }
    public var params: JSONValue {
        var b = ParamsBuilder()
        header.write(to: &b)
        return b.json
    }
}

/// `extension.reindexIdentifiers {requestId, reason, index, identifiers}`: donate those that
/// exist, delete those that vanished (at most `MaximumIdentifiersPerRequest` at a time).
public struct ExtensionReindexIdentifiers: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.extensionReindexIdentifiers
    public static let fields = ["requestId", "reason?", "index", "identifiers"]
    public static let example = ExtensionReindexIdentifiers(ExtensionRequestHeader(requestId: "12", reason: "idle", index: "notes"),
                                                            identifiers: ["note-1"])
    public var header: ExtensionRequestHeader
    public var identifiers: [String]
    public init(_ header: ExtensionRequestHeader, identifiers: [String]) {
        self.header = header
        self.identifiers = identifiers
    }
    public init(params p: WireParams) throws(SearchlightError) {
        header = try ExtensionRequestHeader(p)
        guard let ids = try? p.identifiers("identifiers") else {
            throw .invalidParams("\"identifiers\" must be an array of strings")
        }
        identifiers = ids
    }
    public var params: JSONValue {
        var b = ParamsBuilder()
        header.write(to: &b)
        b.set("identifiers", identifiers)
        return b.json
    }
}

/// `extension.dataForItem {identifier, typeIdentifier}` → `{data: base64}`.
public struct ExtensionDataForItem: WireRequest, Equatable {
    public typealias Response = IndexFetchData.Response
    public static let method = Method.extensionDataForItem
    public static let fields = ["identifier", "typeIdentifier"]
    public static let example = ExtensionDataForItem(identifier: "note-1", typeIdentifier: "public.plain-text")
    public var identifier: String
    public var typeIdentifier: String
    public init(identifier: String, typeIdentifier: String) {
        self.identifier = identifier
        self.typeIdentifier = typeIdentifier
    }
    public init(params p: WireParams) throws(SearchlightError) {
        guard let id = try? p.optionalString("identifier"), let type = try? p.optionalString("typeIdentifier") else {
            throw .invalidParams("\"identifier\" and \"typeIdentifier\" must be strings")
        }
        identifier = id
        typeIdentifier = type
    }
    public var params: JSONValue { ["identifier": .string(identifier), "typeIdentifier": .string(typeIdentifier)] }
}

/// `extension.fileURLForItem {identifier, typeIdentifier, inPlace}` → `{url}`.
public struct ExtensionFileURLForItem: WireRequest, Equatable {
    public typealias Response = IndexFetchFileURL.Response
    public static let method = Method.extensionFileURLForItem
    public static let fields = ["identifier", "typeIdentifier", "inPlace"]
    public static let example = ExtensionFileURLForItem(identifier: "note-1", typeIdentifier: "public.plain-text", inPlace: true)
    public var identifier: String
    public var typeIdentifier: String
    public var inPlace: Bool
    public init(identifier: String, typeIdentifier: String, inPlace: Bool) {
        self.identifier = identifier
        self.typeIdentifier = typeIdentifier
        self.inPlace = inPlace
    }
    public init(params p: WireParams) throws(SearchlightError) {
        guard let id = try? p.optionalString("identifier"), let type = try? p.optionalString("typeIdentifier") else {
            throw .invalidParams("\"identifier\" and \"typeIdentifier\" must be strings")
        }
        identifier = id
        typeIdentifier = type
        guard let inPlace = try p.optionalBool("inPlace") else { throw .invalidParams("\"inPlace\" must be true or false") }
        self.inPlace = inPlace
    }
    public var params: JSONValue {
        ["identifier": .string(identifier), "typeIdentifier": .string(typeIdentifier), "inPlace": .bool(inPlace)]
    }
}

// MARK: - Notifications

/// `$/progress {requestId, completed?, total?, message?}`: from an extension, how far its request
/// has come; from the daemon to an admin waiting for a reindex, the same (and what a manual
/// request joined, in `message`).
public struct RequestProgress: WireNotification, Equatable {
    public static let method = Method.progress
    public static let fields = ["requestId", "completed?", "total?", "message?"]
    public static let example = RequestProgress(requestId: "12", completed: 500, total: 2000, message: "joined request 12 (initial)")

    public var requestId: String
    public var completed: Int?
    public var total: Int?
    public var message: String?

    public init(requestId: String, completed: Int? = nil, total: Int? = nil, message: String? = nil) {
        self.requestId = requestId
        self.completed = completed
        self.total = total
        self.message = message
    }

    public init(params p: WireParams) throws(SearchlightError) {
        // A string from extensions, a number from the daemon's admin answers: both are the id.
        switch p.value("requestId") {
        case .string(let s)?: requestId = String(s.prefix(64))
        case .number?: requestId = try p.optionalInteger("requestId", in: 0...Int(Int64.max / 2)).map(String.init) ?? ""
        default: throw .invalidParams("\"requestId\" must be the request's id")
        }
        completed = try p.optionalInteger("completed", in: 0...NumericParameter.maxCount)
        total = try p.optionalInteger("total", in: 0...NumericParameter.maxCount)
        message = try p.optionalString("message", maxBytes: 4096)
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("requestId", requestId)
        b.set("completed", completed)
        b.set("total", total)
        b.set("message", message)
        return b.json
    }
}

/// A notification with no parameters.
public protocol ParameterlessNotification: WireNotification {
    init()
}

extension ParameterlessNotification {
    public static var fields: [String] { [] }
    public static var example: Self { Self() }
    public init(params _: WireParams) throws(SearchlightError) { self.init() }
    public var params: JSONValue { [:] }
}

/// `extension.shutdown`: exit soon (SIGKILL follows after `ExitTimeOut`).
public struct ExtensionShutdown: ParameterlessNotification, Equatable {
    public static let method = Method.extensionShutdown
    public init() {}
}

/// `extension.didThrottle`: the machine is busy; slow down background work.
public struct ExtensionDidThrottle: ParameterlessNotification, Equatable {
    public static let method = Method.extensionDidThrottle
    public init() {}
}

/// `extension.didFinishThrottle`: it no longer is.
public struct ExtensionDidFinishThrottle: ParameterlessNotification, Equatable {
    public static let method = Method.extensionDidFinishThrottle
    public init() {}
}

/// Every message type of the protocol, for the checks that compare them with Docs/Protocol.md.
public enum WireMessages {
    public static let requests: [any WireRequest.Type] = [
        Initialize.self,
        IndexItems.self, IndexDeleteIdentifiers.self, IndexDeleteDomains.self, IndexDeleteAll.self, IndexBeginBatch.self,
        IndexEndBatch.self, IndexFetchLastClientState.self, IndexFetchData.self, IndexFetchFileURL.self,
        QuerySearch.self, QueryUser.self, QueryEngaged.self, QueryPrepare.self,
        AdminStatus.self, AdminReindex.self, AdminErase.self, AdminCheck.self, AdminSimulate.self, AdminUnits.self,
        AdminRequests.self, AdminMonitor.self, AdminSetIndexing.self, AdminSetOwner.self, AdminRestartExtension.self,
        DesktopSetHidden.self, DesktopRegister.self, DesktopResolve.self, DesktopSettings.self, DesktopStaleItems.self,
        ActivitySave.self, ActivityResign.self, ActivityDelete.self, ActivityDeleteAll.self, ActivityResolve.self, ActivityList.self,
        ExtensionReindexAll.self, ExtensionReindexIdentifiers.self, ExtensionDataForItem.self, ExtensionFileURLForItem.self,
    ]

    public static let notifications: [any WireNotification.Type] = [
        RequestProgress.self, ExtensionShutdown.self, ExtensionDidThrottle.self, ExtensionDidFinishThrottle.self,
    ]
}
