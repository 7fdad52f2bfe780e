import Foundation

/// User activities (DESIGN §13, Docs/Protocol.md "User activities"): what an app marks as the
/// user's current activity (NSUserActivity's search side), kept per bundle as its recent history.
extension Method {
    /// `activity.save {persistentIdentifier, activityType, …, current?}`: records an activity
    /// (`becomeCurrent()` sends `current: true`, and counts as engagement).
    public static let activitySave = "activity.save"
    /// `activity.resign {persistentIdentifier}`: the activity is no longer the current one.
    public static let activityResign = "activity.resign"
    /// `activity.delete {persistentIdentifiers}`: `deleteSavedUserActivities(withPersistentIdentifiers:)`.
    public static let activityDelete = "activity.delete"
    /// `activity.deleteAll {}`: `deleteAllSavedUserActivities()`.
    public static let activityDeleteAll = "activity.deleteAll"
    /// `activity.resolve {persistentIdentifier, bundle?}`: the saved activity and how it opens.
    public static let activityResolve = "activity.resolve"
    /// `activity.list {limit?}`: the app's saved history, most recently used first.
    public static let activityList = "activity.list"
}

extension Names {
    /// The index that holds a bundle's activity history (`_activities.sqlite`). It starts with
    /// `_`, so no client may name it as an `index`: only the `activity.*` methods write it.
    public static let activityIndex = "_activities"

    /// An index name as stored: a client's (`validIndex`) or the activity history.
    public static func validStoredIndex(_ s: String) -> Bool { validIndex(s) || s == activityIndex }
}

/// The limits of one activity, checked by both ends (a hostile peer gets a clear error).
public enum ActivityLimits {
    public static let activityTypeBytes = 256
    public static let titleBytes = 4096
    public static let keywords = 64
    public static let keywordBytes = 256
    /// `userInfo`, encoded as JSON.
    public static let userInfoBytes = 16 << 10
    public static let userInfoDepth = 16
    public static let webpageURLBytes = 4096
    /// Persistent identifiers per `activity.delete`.
    public static let deleteIdentifiers = 1000
    /// The furthest an expirationDate may lie ahead (a year).
    public static let maximumLifetime: TimeInterval = 366 * 86_400
}

/// `activity.save`: one activity as the app describes it. The daemon stores it as an item of the
/// bundle's activity history (`Names.activityIndex`): `persistentIdentifier` is its identifier.
public struct ActivitySave: WireRequest, Equatable {
    public static let method = Method.activitySave
    public static let fields = ["persistentIdentifier", "activityType", "title?", "keywords?", "userInfo?", "attributeSet?",
                                "expirationDate?", "webpageURL?", "eligibleForSearch?", "current?"]
    public static var example: ActivitySave {
        var a = ActivitySave(persistentIdentifier: "trip-1-view", activityType: "com.example.notes.view")
        a.title = "Natural Bridges"
        a.keywords = ["utah"]
        a.userInfo = ["note": "trip-1"]
        var attributes = AttributeSet()
        attributes.relatedUniqueIdentifier = "trip-1"
        a.attributeSet = attributes
        a.expirationDate = Date(timeIntervalSince1970: 1_900_000_000)
        a.webpageURL = "https://example.com/trips/1"
        a.eligibleForSearch = true
        a.current = true
        return a
    }

    public var persistentIdentifier: String
    public var activityType: String
    public var title: String?
    public var keywords: [String]?
    /// JSON values (an object), at most `ActivityLimits.userInfoBytes` encoded.
    public var userInfo: JSONValue?
    public var attributeSet: AttributeSet?
    public var expirationDate: Date?
    /// `http:` or `https:` only.
    public var webpageURL: String?
    public var eligibleForSearch: Bool = true
    /// Sent by `becomeCurrent()`: the activity is the app's current one (counted as engagement).
    public var current: Bool = false

    public init(persistentIdentifier: String, activityType: String) {
        self.persistentIdentifier = persistentIdentifier
        self.activityType = activityType
    }

    public init(params p: WireParams) throws(SearchlightError) {
        persistentIdentifier = try ActivityCheck.identifier(p.optionalString("persistentIdentifier", maxBytes: p.limits.maxIdentifierBytes),
                                                            field: "persistentIdentifier", limits: p.limits)
        guard let type = try p.optionalString("activityType", maxBytes: ActivityLimits.activityTypeBytes), !type.isEmpty,
              type.utf8.allSatisfy(Names.isNameByte) else {
            throw .invalidParams("\"activityType\" is required: 1 to \(ActivityLimits.activityTypeBytes) bytes of letters, digits, '.', '-', '_' (reverse DNS, e.g. com.example.notes.view)")
        }
        activityType = type
        title = try p.optionalString("title", maxBytes: ActivityLimits.titleBytes)
        keywords = try p.optionalStrings("keywords", maxCount: ActivityLimits.keywords, maxBytes: ActivityLimits.keywordBytes)
        if let info = p.value("userInfo") {
            guard case .object = info else { throw .invalidParams("\"userInfo\" must be an object of JSON values") }
            guard ActivityCheck.depth(info) <= ActivityLimits.userInfoDepth else {
                throw .invalidParams("\"userInfo\" is nested deeper than \(ActivityLimits.userInfoDepth); flatten it")
            }
            let size = info.serializedByteCount
            guard size <= ActivityLimits.userInfoBytes else {
                throw .invalidParams("\"userInfo\" is \(size) bytes encoded; the limit is \(ActivityLimits.userInfoBytes): keep only what restores the activity")
            }
            userInfo = info
        }
        if let attributes = p.value("attributeSet") {
            let probe: JSONValue = ["uniqueIdentifier": "activity", "attributeSet": attributes]
            do {
                attributeSet = try ItemValidator(limits: p.limits).validate(item: probe).attributeSet
            } catch {
                throw .invalidParams("\"attributeSet\" (the contentAttributeSet) is invalid: \(error.message)")
            }
        }
        if let s = try p.optionalString("expirationDate", maxBytes: 64) {
            guard let d = ISO8601.parse(s) else {
                throw .invalidParams("\"expirationDate\" must be ISO 8601 with a zone, e.g. 2026-12-31T00:00:00.000Z")
            }
            expirationDate = d
        }
        if let url = try p.optionalString("webpageURL", maxBytes: ActivityLimits.webpageURLBytes) {
            guard ActivityCheck.isWebURL(url) else {
                throw .invalidParams("\"webpageURL\" must be an http: or https: URL with a host, without spaces or control characters")
            }
            webpageURL = url
        }
        eligibleForSearch = try p.bool("eligibleForSearch", default: true)
        current = try p.bool("current", default: false)
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("persistentIdentifier", persistentIdentifier)
        b.set("activityType", activityType)
        b.set("title", title)
        b.set("keywords", keywords)
        b.set("userInfo", userInfo)
        b.set("attributeSet", attributeSet?.json)
        b.set("expirationDate", expirationDate.map(ISO8601.format))
        b.set("webpageURL", webpageURL)
        b.set("eligibleForSearch", eligibleForSearch)
        b.set("current", current)
        return b.json
    }

    /// `{persistentIdentifier, shownAs}`: `activity` (in the history), `item` (the related item
    /// stands for it), or `none` (not eligible for search: nothing kept).
    public struct Response: WireResponse, Equatable {
        public var persistentIdentifier: String
        public var shownAs: String
        public init(persistentIdentifier: String, shownAs: String) {
            self.persistentIdentifier = persistentIdentifier
            self.shownAs = shownAs
        }
        public init(result: JSONValue) throws(SearchlightError) {
            persistentIdentifier = result["persistentIdentifier"]?.stringValue ?? ""
            shownAs = result["shownAs"]?.stringValue ?? ""
        }
        public var result: JSONValue { ["persistentIdentifier": .string(persistentIdentifier), "shownAs": .string(shownAs)] }
    }
}

/// `activity.resign {persistentIdentifier}`.
public struct ActivityResign: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.activityResign
    public static let fields = ["persistentIdentifier"]
    public static let example = ActivityResign(persistentIdentifier: "trip-1-view")
    public var persistentIdentifier: String
    public init(persistentIdentifier: String) { self.persistentIdentifier = persistentIdentifier }
    public init(params p: WireParams) throws(SearchlightError) {
        persistentIdentifier = try ActivityCheck.identifier(p.optionalString("persistentIdentifier", maxBytes: p.limits.maxIdentifierBytes),
                                                            field: "persistentIdentifier", limits: p.limits)
    }
    public var params: JSONValue { ["persistentIdentifier": .string(persistentIdentifier)] }
}

/// `activity.delete {persistentIdentifiers}` -> `{deleted}`.
public struct ActivityDelete: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.activityDelete
    public static let fields = ["persistentIdentifiers"]
    public static let example = ActivityDelete(persistentIdentifiers: ["trip-1-view"])
    public var persistentIdentifiers: [String]
    public init(persistentIdentifiers: [String]) { self.persistentIdentifiers = persistentIdentifiers }
    public init(params p: WireParams) throws(SearchlightError) {
        let ids = try p.identifiers("persistentIdentifiers")
        guard ids.count <= ActivityLimits.deleteIdentifiers else {
            throw .invalidParams("\"persistentIdentifiers\" has \(ids.count) entries; send at most \(ActivityLimits.deleteIdentifiers) per call")
        }
        persistentIdentifiers = ids
    }
    public var params: JSONValue { ["persistentIdentifiers": .array(persistentIdentifiers.map(JSONValue.string))] }
}

/// `activity.deleteAll {}` -> `{deleted}`.
public struct ActivityDeleteAll: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.activityDeleteAll
    public static let fields: [String] = []
    public static let example = ActivityDeleteAll()
    public init() {}
    public init(params p: WireParams) throws(SearchlightError) {}
    public var params: JSONValue { [:] }
}

/// `activity.resolve {persistentIdentifier, bundle?}` -> `desktop.resolve`'s answer, the item
/// being the stored activity: what opening an activity result needs (roles desktop, app, admin).
public struct ActivityResolve: WireRequest, Equatable {
    public typealias Response = DesktopResolve.Response
    public static let method = Method.activityResolve
    public static let fields = ["persistentIdentifier", "bundle?"]
    public static let example = ActivityResolve(persistentIdentifier: "trip-1-view", bundle: "com.example.notes")
    public var persistentIdentifier: String
    public var bundle: String?
    public init(persistentIdentifier: String, bundle: String? = nil) {
        self.persistentIdentifier = persistentIdentifier
        self.bundle = bundle
    }
    public init(params p: WireParams) throws(SearchlightError) {
        persistentIdentifier = try ActivityCheck.identifier(p.optionalString("persistentIdentifier", maxBytes: p.limits.maxIdentifierBytes),
                                                            field: "persistentIdentifier", limits: p.limits)
        bundle = try p.optionalBundle()
    }
    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("persistentIdentifier", persistentIdentifier)
        b.set("bundle", bundle)
        return b.json
    }
}

/// `activity.list {limit?}` -> `{activities: [item]}`: the bundle's saved activities (not
/// expired), most recently used first, each as `activity.resolve`'s item (role app: its own).
public struct ActivityList: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.activityList
    public static let fields = ["limit?"]
    public static let example = ActivityList(limit: 20)
    public var limit: Int
    public init(limit: Int = 100) { self.limit = limit }
    public init(params p: WireParams) throws(SearchlightError) {
        limit = try p.integer("limit", in: 1...1000, default: 100)
    }
    public var params: JSONValue { ["limit": .number(Double(limit))] }
}

/// Checks shared by the activity messages and the SDK.
public enum ActivityCheck {
    static func identifier(_ s: String?, field: String, limits: Limits) throws(SearchlightError) -> String {
        guard let s, !s.isEmpty, !s.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw .invalidParams("\"\(field)\" is required: 1 to \(limits.maxIdentifierBytes) bytes without control characters")
        }
        return s
    }

    /// An `http:`/`https:` URL with a host: what a browser may open for the activity.
    public static func isWebURL(_ s: String) -> Bool {
        guard s.utf8.count <= ActivityLimits.webpageURLBytes,
              !s.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }),
              let url = URL(string: s), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = url.host, !host.isEmpty else { return false }
        return true
    }

    /// How deeply a JSON value nests (a scalar is 0).
    static func depth(_ v: JSONValue) -> Int {
        var deepest = 0
        var stack: [(JSONValue, Int)] = [(v, 0)]
        while let (value, d) = stack.popLast() {
            deepest = max(deepest, d)
            if deepest > ActivityLimits.userInfoDepth { return deepest }
            if let a = value.arrayValue { for e in a { stack.append((e, d + 1)) } }
            if let o = value.objectValue { for e in o.values { stack.append((e, d + 1)) } }
        }
        return deepest
    }
}
