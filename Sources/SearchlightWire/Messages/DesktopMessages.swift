/// The desktop's search (DESIGN §12, Docs/Desktop.md): the settings of a bundle in it, and what
/// opening one of its items needs. The desktop's own search is `query.user` in role `desktop`
/// (its answer adds `bundles`: `QueryUser.Response.bundles`).

/// How the items of a bundle open from the desktop's search: the desktop file declared by its
/// unit (`OpenWith`, source `unit`) or registered for it (`desktop.register`, source
/// `registration`); none means the item's `contentURL` with the default handler.
public struct DesktopOpening: Sendable, Equatable {
    public enum Source: String, Sendable { case unit, registration }
    public var openWith: String
    public var source: Source
    /// The app also continues a search (unit key `ContinuesSearch`): launched with a
    /// `searchlight-query:TEXT` URI when the user asks to search in it. Written only when true.
    public var continuesSearch: Bool

    public init(openWith: String, source: Source, continuesSearch: Bool = false) {
        self.openWith = openWith
        self.source = source
        self.continuesSearch = continuesSearch
    }

    /// Written into an object as `openWith`, `openWithSource`, `continuesSearch` (when true).
    func write(into b: inout ParamsBuilder) {
        b.set("openWith", openWith)
        b.set("openWithSource", source.rawValue)
        if continuesSearch { b.set("continuesSearch", true) }
    }

    /// Read from an object's `openWith` (a valid desktop-file id; anything else reads as none).
    init?(json: JSONValue) {
        guard let id = json["openWith"]?.stringValue, Names.validDesktopFileID(id) else { return nil }
        openWith = id
        source = Source(rawValue: json["openWithSource"]?.stringValue ?? "") ?? .registration
        continuesSearch = json["continuesSearch"]?.boolValue ?? false
    }
}

/// `desktop.setHidden {hidden, bundle?}` (`searchlight desktop hide|show BUNDLE`): keeps a bundle
/// out of the desktop's search, or shows it again; its own searches are not affected. For the
/// bundle's owner (role app, its own bundle) or an administrator (names `bundle`).
public struct DesktopSetHidden: WireRequest, Equatable {
    public static let method = Method.desktopSetHidden
    public static let fields = ["hidden", "bundle?"]
    public static let example = DesktopSetHidden(hidden: true, bundle: "com.example.notes")
    public var hidden: Bool
    public var bundle: String?

    public init(hidden: Bool, bundle: String? = nil) {
        self.hidden = hidden
        self.bundle = bundle
    }

    public init(params p: WireParams) throws(SearchlightError) {
        guard let hidden = try p.optionalBool("hidden") else {
            throw .invalidParams("\"hidden\" is required: true keeps the bundle out of the desktop's search, false shows it")
        }
        self.hidden = hidden
        bundle = try p.optionalBundle()
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("hidden", hidden)
        b.set("bundle", bundle)
        return b.json
    }

    public struct Response: WireResponse, Equatable {
        public var bundle: String
        public var hidden: Bool
        public init(bundle: String, hidden: Bool) {
            self.bundle = bundle
            self.hidden = hidden
        }
        public init(result: JSONValue) throws(SearchlightError) {
            bundle = result["bundle"]?.stringValue ?? ""
            hidden = result["hidden"]?.boolValue ?? false
        }
        public var result: JSONValue { ["bundle": .string(bundle), "hidden": .bool(hidden)] }
    }
}

/// `desktop.register {openWith?, bundle?}` (`searchlight register BUNDLE --open-with ID`): the
/// desktop file a bundle's items open with, for an app without a unit; `openWith` absent or null
/// removes the registration. `continuesSearch` (`--continues-search`): the app also continues
/// the desktop's searches (`searchlight-query:TEXT`); needs `openWith`. Who may: as
/// `desktop.setHidden`.
public struct DesktopRegister: WireRequest, Equatable {
    public static let method = Method.desktopRegister
    public static let fields = ["openWith?", "bundle?", "continuesSearch?"]
    public static let example = DesktopRegister(openWith: "org.example.Notes.desktop", bundle: "com.example.notes", continuesSearch: true)
    public var openWith: String?
    public var bundle: String?
    public var continuesSearch: Bool

    public init(openWith: String?, bundle: String? = nil, continuesSearch: Bool = false) {
        self.openWith = openWith
        self.bundle = bundle
        self.continuesSearch = continuesSearch
    }

    public init(params p: WireParams) throws(SearchlightError) {
        let bad = "\"openWith\" must be a desktop-file id such as org.example.Notes.desktop (letters, digits, '.', '-', '_'; no '/'), or null to remove the registration"
        let id: String?
        do {
            id = try p.optionalString("openWith", maxBytes: 255)
        } catch {
            throw .invalidParams(bad)
        }
        if let id, !Names.validDesktopFileID(id) { throw .invalidParams(bad + "; got \"\(id.prefix(64))\"") }
        openWith = id
        bundle = try p.optionalBundle()
        continuesSearch = try p.optionalBool("continuesSearch") ?? false
        if continuesSearch, id == nil {
            throw .invalidParams("\"continuesSearch\" needs \"openWith\": the search continues in the registered app")
        }
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("openWith", openWith.map(JSONValue.string) ?? .null)
        b.set("bundle", bundle)
        if continuesSearch { b.set("continuesSearch", true) }
        return b.json
    }

    /// `unitOpenWith` and `servedBy` when a unit declares its own `OpenWith`, which wins.
    public struct Response: WireResponse, Equatable {
        public var bundle: String
        public var openWith: String?
        public var unitOpenWith: String?
        public var servedBy: String?
        /// The registered app also continues searches.
        public var continuesSearch = false
        public init(bundle: String, openWith: String?, unitOpenWith: String? = nil, servedBy: String? = nil) {
            self.bundle = bundle
            self.openWith = openWith
            self.unitOpenWith = unitOpenWith
            self.servedBy = servedBy
        }
        public init(result: JSONValue) throws(SearchlightError) {
            bundle = result["bundle"]?.stringValue ?? ""
            openWith = result["openWith"]?.stringValue
            unitOpenWith = result["unitOpenWith"]?.stringValue
            servedBy = result["servedBy"]?.stringValue
            continuesSearch = result["continuesSearch"]?.boolValue ?? false
        }
        public var result: JSONValue {
            var b = ParamsBuilder()
            b.set("bundle", bundle)
            b.set("openWith", openWith.map(JSONValue.string) ?? .null)
            b.set("unitOpenWith", unitOpenWith)
            b.set("servedBy", servedBy)
            if continuesSearch { b.set("continuesSearch", true) }
            return b.json
        }
    }
}

/// `desktop.resolve {identifier, index?, bundle?}`: the item (every attribute; absent when it does
/// not exist or expired) and how it opens. Role desktop (names `bundle`: one it may show), the
/// bundle's app, or an administrator (names `bundle`).
public struct DesktopResolve: WireRequest, Equatable {
    public static let method = Method.desktopResolve
    public static let fields = ["identifier", "index?", "bundle?"]
    public static let example = DesktopResolve(identifier: "trip-1", index: "trips", bundle: "com.example.notes")
    public var identifier: String
    public var index: String
    public var bundle: String?

    public init(identifier: String, index: String = "", bundle: String? = nil) {
        self.identifier = identifier
        self.index = index
        self.bundle = bundle
    }

    public init(params p: WireParams) throws(SearchlightError) {
        let max = p.limits.maxIdentifierBytes
        guard let id = try? p.optionalString("identifier", maxBytes: max), !id.isEmpty else {
            throw .invalidParams("\"identifier\" is required: a non-empty string of at most \(max) bytes")
        }
        identifier = id
        index = try p.index()
        bundle = try p.optionalBundle()
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("identifier", identifier)
        b.setIndex(index)
        b.set("bundle", bundle)
        return b.json
    }

    public struct Response: WireResponse, Equatable {
        public var bundle: String
        public var identifier: String
        public var item: JSONValue?
        public var opening: DesktopOpening?
        /// The uid that owns the bundle (its unit's user, or the user who claimed it), when one is
        /// recorded: a client opening the item as another uid runs what that user declared or
        /// donated, and asks first (`ItemOpener.plan`, `searchlight open --yes`).
        public var ownerUID: UInt32?
        public init(bundle: String, identifier: String, item: JSONValue?, opening: DesktopOpening?, ownerUID: UInt32? = nil) {
            self.bundle = bundle
            self.identifier = identifier
            self.item = item
            self.opening = opening
            self.ownerUID = ownerUID
        }
        public init(result: JSONValue) throws(SearchlightError) {
            bundle = result["bundle"]?.stringValue ?? ""
            identifier = result["identifier"]?.stringValue ?? ""
            item = result["item"].flatMap { $0.isNull ? nil : $0 }
            opening = DesktopOpening(json: result)
            ownerUID = result["ownerUID"]?.intValue.flatMap { UInt32(exactly: $0) }
        }
        /// The item's `contentURL`, when it has one.
        public var contentURL: String? { item?["attributeSet"]?["contentURL"]?.stringValue }
        public var result: JSONValue {
            var b = ParamsBuilder()
            b.set("bundle", bundle)
            b.set("identifier", identifier)
            b.set("item", item)
            opening?.write(into: &b)
            if let ownerUID { b.set("ownerUID", Int(ownerUID)) }
            return b.json
        }
    }
}

/// `desktop.settings {bundle?}` (`searchlight desktop status`): an app sees its own bundle's; an
/// administrator every bundle with a setting or a unit's `OpenWith`, or the one named.
public struct DesktopSettings: WireRequest, Equatable {
    public static let method = Method.desktopSettings
    public static let fields = ["bundle?"]
    public static let example = DesktopSettings(bundle: "com.example.notes")
    public var bundle: String?

    public init(bundle: String? = nil) { self.bundle = bundle }
    public init(params p: WireParams) throws(SearchlightError) { bundle = try p.optionalBundle() }
    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("bundle", bundle)
        return b.json
    }

    public struct Setting: Sendable, Equatable {
        public var bundle: String
        public var hidden: Bool
        public var opening: DesktopOpening?
        public init(bundle: String, hidden: Bool, opening: DesktopOpening?) {
            self.bundle = bundle
            self.hidden = hidden
            self.opening = opening
        }
        var json: JSONValue {
            var b = ParamsBuilder()
            b.set("bundle", bundle)
            b.set("hidden", hidden)
            opening?.write(into: &b)
            return b.json
        }
    }

    public struct Response: WireResponse, Equatable {
        public var bundles: [Setting]
        public init(bundles: [Setting]) { self.bundles = bundles }
        public init(result: JSONValue) throws(SearchlightError) {
            bundles = (result["bundles"]?.arrayValue ?? []).compactMap { o in
                guard let name = o["bundle"]?.stringValue else { return nil }
                return Setting(bundle: name, hidden: o["hidden"]?.boolValue ?? false, opening: DesktopOpening(json: o))
            }
        }
        public var result: JSONValue { ["bundles": .array(bundles.map(\.json))] }
    }
}

/// `desktop.staleItems {bundle, index?, identifiers}` (role desktop): items of a bundle the desktop
/// shows whose `file:` contentURL no longer exists, as the desktop found them at query time with
/// its user's rights (the daemon never looks at the file: as root it would see files the user
/// cannot). The daemon asks the bundle's extension to reindex them (background, throttled), or,
/// for a bundle without an extension that the caller owns, deletes them; it counts them in
/// `admin.status` (`staleItems`). At most `maxIdentifiers` per call.
public struct DesktopStaleItems: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.desktopStaleItems
    public static let fields = ["bundle", "identifiers", "index?"]
    public static let example = DesktopStaleItems(bundle: "com.example.notes", identifiers: ["trip-1"], index: "trips")
    /// The most identifiers one call reports: the desktop checks a bounded number per query.
    public static let maxIdentifiers = 64
    public var bundle: String
    public var identifiers: [String]
    public var index: String

    public init(bundle: String, identifiers: [String], index: String = "") {
        self.bundle = bundle
        self.identifiers = identifiers
        self.index = index
    }

    public init(params p: WireParams) throws(SearchlightError) {
        guard let bundle = try p.optionalBundle() else {
            throw .invalidParams("\"bundle\" is required: the bundle of the stale items")
        }
        self.bundle = bundle
        identifiers = try p.identifiers("identifiers")
        guard !identifiers.isEmpty, identifiers.count <= Self.maxIdentifiers else {
            throw .invalidParams("\"identifiers\" must list 1 to \(Self.maxIdentifiers) identifiers; report more in several calls")
        }
        index = try p.index()
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("bundle", bundle)
        b.set("identifiers", identifiers)
        b.setIndex(index)
        return b.json
    }
}
