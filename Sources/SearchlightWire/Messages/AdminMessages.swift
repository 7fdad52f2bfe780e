// The admin methods (role admin: root, the daemon's user, members of `--admin-group`). Their
// answers are reports read as JSON (`JSONResponse`): fields are additive, documented in
// Docs/Protocol.md.

/// A request with only an optional `bundle`.
public protocol BundleFilterRequest: WireRequest where Response == JSONResponse {
    var bundle: String? { get }
    init(bundle: String?)
}

extension BundleFilterRequest {
    public static var fields: [String] { ["bundle?"] }
    public static var example: Self { Self(bundle: "com.example.notes") }
    public init(params p: WireParams) throws(SearchlightError) { self.init(bundle: try p.optionalBundle()) }
    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("bundle", bundle)
        return b.json
    }
}

/// A request with no parameters.
public protocol ParameterlessRequest: WireRequest where Response == JSONResponse {
    init()
}

extension ParameterlessRequest {
    public static var fields: [String] { [] }
    public static var example: Self { Self() }
    public init(params _: WireParams) throws(SearchlightError) { self.init() }
    public var params: JSONValue { [:] }
}

/// `admin.status {bundle?}`: the daemon, its bundles and indexes, extensions, throttle, requests.
public struct AdminStatus: BundleFilterRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.adminStatus
    public var bundle: String?
    public init(bundle: String? = nil) { self.bundle = bundle }
}

/// `admin.units {}`: re-reads the unit files and lists them with their extension's state.
public struct AdminUnits: ParameterlessRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.adminUnits
    public init() {}
}

/// `admin.requests {}`: the request journal and the poisoned identifiers.
public struct AdminRequests: ParameterlessRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.adminRequests
    public init() {}
}

/// `admin.monitor {}`: events stream as `admin.event` notifications until the connection closes.
public struct AdminMonitor: ParameterlessRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.adminMonitor
    public init() {}
}

/// `admin.erase {bundle, reindex?}`: deletes every index file of the bundle (then, with
/// `reindex`, asks its extension for a reindex-all of each index).
public struct AdminErase: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.adminErase
    public static let fields = ["bundle", "reindex?"]
    public static let example = AdminErase(bundle: "com.example.notes", reindex: true)
    public var bundle: String
    public var reindex: Bool
    public init(bundle: String, reindex: Bool = false) {
        self.bundle = bundle
        self.reindex = reindex
    }
    public init(params p: WireParams) throws(SearchlightError) {
        guard let bundle = try p.optionalBundle() else { throw .invalidParams("\"bundle\" is required") }
        self.bundle = bundle
        reindex = try p.bool("reindex", default: false)
    }
    public var params: JSONValue { ["bundle": .string(bundle), "reindex": .bool(reindex)] }
}

/// `admin.check {bundle?, repair?}`: integrity of the indexes (all, or one bundle's).
public struct AdminCheck: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.adminCheck
    public static let fields = ["bundle?", "repair?"]
    public static let example = AdminCheck(bundle: "com.example.notes", repair: true)
    public var bundle: String?
    public var repair: Bool
    public init(bundle: String? = nil, repair: Bool = false) {
        self.bundle = bundle
        self.repair = repair
    }
    public init(params p: WireParams) throws(SearchlightError) {
        bundle = try p.optionalBundle()
        repair = try p.bool("repair", default: false)
    }
    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("bundle", bundle)
        b.set("repair", repair)
        return b.json
    }
}

/// `admin.setIndexing {bundle, enabled}` (`searchlight indexing on|off BUNDLE`).
public struct AdminSetIndexing: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.adminSetIndexing
    public static let fields = ["bundle", "enabled"]
    public static let example = AdminSetIndexing(bundle: "com.example.notes", enabled: false)
    public var bundle: String
    public var enabled: Bool
    public init(bundle: String, enabled: Bool) {
        self.bundle = bundle
        self.enabled = enabled
    }
    public init(params p: WireParams) throws(SearchlightError) {
        guard let bundle = try p.optionalBundle() else { throw .invalidParams("\"bundle\" is required") }
        self.bundle = bundle
        guard let enabled = try? p.optionalBool("enabled") else { throw .invalidParams("\"enabled\" must be true or false") }
        self.enabled = enabled
    }
    public var params: JSONValue { ["bundle": .string(bundle), "enabled": .bool(enabled)] }
}

/// `admin.setOwner {bundle, uid}` (`searchlight owner BUNDLE USER`): gives a bundle an owner.
public struct AdminSetOwner: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.adminSetOwner
    public static let fields = ["bundle", "uid"]
    public static let example = AdminSetOwner(bundle: "com.example.notes", uid: 1000)
    public var bundle: String
    public var uid: UInt32
    public init(bundle: String, uid: UInt32) {
        self.bundle = bundle
        self.uid = uid
    }
    public init(params p: WireParams) throws(SearchlightError) {
        guard let bundle = try p.optionalBundle() else { throw .invalidParams("\"bundle\" is required") }
        self.bundle = bundle
        guard let uid = try p.optionalInteger("uid", in: 0...Int(UInt32.max - 1)) else {
            throw .invalidParams("\"uid\" is required: the numeric uid of the new owner")
        }
        self.uid = UInt32(uid)
    }
    public var params: JSONValue { ["bundle": .string(bundle), "uid": .number(Double(uid))] }
}

/// `admin.simulate {event, bundle?, wait?}`: fires a trigger of DESIGN §6 by hand.
public struct AdminSimulate: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.adminSimulate
    public static let fields = ["event", "bundle?", "wait?"]
    public static let example = AdminSimulate(event: .idle, bundle: "com.example.notes", wait: false)
    public enum Event: String, Sendable { case migration, corruption, idle }
    public var event: Event
    public var bundle: String?
    /// For `idle`: answer with the run's summary when it ends, sending `$/progress` meanwhile
    /// (true, the default, as before the field existed), or answer once the run is accepted
    /// (false); the run goes on either way. Migration and corruption always answer once started.
    public var wait: Bool
    public init(event: Event, bundle: String? = nil, wait: Bool = true) {
        self.event = event
        self.bundle = bundle
        self.wait = wait
    }
    public init(params p: WireParams) throws(SearchlightError) {
        guard let name = try? p.optionalString("event", maxBytes: 1 << 16) else {
            throw SearchlightError(.invalidParams, "admin.simulate needs \"event\": migration, corruption or idle")
        }
        guard let event = Event(rawValue: name) else {
            throw SearchlightError(.invalidParams, "admin.simulate: unknown event \"\(name.prefix(64))\"; use migration, corruption or idle")
        }
        self.event = event
        bundle = try p.optionalBundle()
        wait = try p.bool("wait", default: true)
    }
    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("event", event.rawValue)
        b.set("bundle", bundle)
        if !wait { b.set("wait", false) }
        return b.json
    }
}

/// `admin.restartExtension {label}` (`searchlight units restart LABEL`).
public struct AdminRestartExtension: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.adminRestartExtension
    public static let fields = ["label"]
    public static let example = AdminRestartExtension(label: "org.example.notes.indexer")
    public var label: String
    public init(label: String) { self.label = label }
    public init(params p: WireParams) throws(SearchlightError) {
        guard let label = try? p.optionalString("label", maxBytes: 1 << 16), !label.isEmpty else {
            throw SearchlightError.invalidParams("\"label\" must name an extension unit's label")
        }
        self.label = String(label.prefix(255))
    }
    public var params: JSONValue { ["label": .string(label)] }
}

/// `admin.reindex {target, all | identifiers, index?, reason?, background?, wait?, timeout?}`:
/// journals a reindex request for the extension `target` (its label or bundle) and, with `wait`,
/// answers with its outcome.
public struct AdminReindex: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.adminReindex
    public static let fields = ["target", "all?", "identifiers?", "index?", "reason?", "background?", "wait?", "timeout?"]
    public static let example = AdminReindex(target: "org.example.notes.indexer", selection: .identifiers(["note-1"]), index: "notes",
                                             reason: "manual", background: false, wait: true, timeout: 60)
    /// The longest `timeout` (a week).
    public static let maxWait: Double = 7 * 86400

    public enum Selection: Sendable, Equatable {
        case all
        case identifiers([String])
    }

    public var target: String
    public var selection: Selection
    public var index: String
    /// Why (`manual`, `background`, …), at most 32 characters.
    public var reason: String
    /// Background work: throttled under load like the automatic triggers.
    public var background: Bool
    /// Answer with the outcome (acknowledged, failed) instead of at once.
    public var wait: Bool
    /// With `wait`: answer `requestTimedOut` after this many seconds (the request stays journaled).
    public var timeout: Double?

    public init(target: String, selection: Selection, index: String = "", reason: String? = nil, background: Bool = false,
                wait: Bool = false, timeout: Double? = nil) {
        self.target = target
        self.selection = selection
        self.index = index
        self.reason = reason ?? (background ? "background" : "manual")
        self.background = background
        self.wait = wait
        self.timeout = timeout
    }

    public init(params p: WireParams) throws(SearchlightError) {
        guard let target = try? p.optionalString("target", maxBytes: 1 << 16), !target.isEmpty else {
            throw SearchlightError.invalidParams("\"target\" must name an extension's label or its bundle")
        }
        self.target = target
        index = try p.index()
        if try p.bool("all", default: false) {
            selection = .all
        } else if p.has("identifiers") {
            let ids = try p.identifiers("identifiers")
            guard !ids.isEmpty else { throw SearchlightError.invalidParams("\"identifiers\" is empty; name at least one, or send \"all\": true") }
            selection = .identifiers(ids)
        } else {
            throw SearchlightError.invalidParams("send \"all\": true or \"identifiers\": [..]")
        }
        background = try p.bool("background", default: false)
        reason = try p.optionalString("reason", maxBytes: 1 << 16).map { String($0.prefix(32)) } ?? (background ? "background" : "manual")
        wait = try p.bool("wait", default: false)
        timeout = try p.optionalSeconds("timeout", in: 0.001...Self.maxWait)
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("target", target)
        switch selection {
        case .all: b.set("all", true)
        case .identifiers(let ids): b.set("identifiers", ids)
        }
        b.setIndex(index)
        b.set("reason", reason)
        b.set("background", background)
        b.set("wait", wait)
        b.set("timeout", timeout)
        return b.json
    }
}
