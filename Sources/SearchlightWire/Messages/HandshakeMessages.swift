/// `initialize`: the first message of every connection (DESIGN §4), naming the role.
public struct Initialize: WireRequest, Equatable {
    public static let method = Method.initialize
    public static let fields = ["protocolVersion", "role", "bundleIdentifier?", "label?", "capabilities?"]
    public static let example = Initialize(role: .app, bundleIdentifier: "com.example.notes")

    /// The roles a connection may take.
    public enum Role: String, Sendable, CaseIterable {
        case app, `extension`, admin
    }

    public var protocolVersion: Int
    public var role: Role
    /// The app's bundle (role app).
    public var bundleIdentifier: String?
    /// The extension's unit label (role extension; a launched extension may leave it out).
    public var label: String?
    public var capabilities: JSONValue

    public init(protocolVersion: Int = Protocol.version, role: Role, bundleIdentifier: String? = nil, label: String? = nil,
                capabilities: JSONValue = [:]) {
        self.protocolVersion = protocolVersion
        self.role = role
        self.bundleIdentifier = bundleIdentifier
        self.label = label
        self.capabilities = capabilities
    }

    public init(params p: WireParams) throws(SearchlightError) {
        guard let version = try p.optionalInteger("protocolVersion", in: 1...NumericParameter.maxCount) else {
            throw .invalidParams("\"protocolVersion\" must be an integer (this daemon speaks \(Protocol.version))")
        }
        guard version <= Protocol.version else {
            throw SearchlightError(.invalidRequest,
                "protocolVersion \(version) is not supported; this daemon speaks \(Protocol.version): upgrade searchlightd or use an older SDK")
        }
        protocolVersion = version
        let roles = Role.allCases.map { "\"\($0.rawValue)\"" }
        guard let name = try? p.optionalString("role", maxBytes: 32), let role = Role(rawValue: name) else {
            throw .invalidParams("\"role\" must be \(roles.dropLast().joined(separator: ", ")) or \(roles.last!)")
        }
        self.role = role
        bundleIdentifier = role == .app ? try p.bundle("bundleIdentifier") : try p.optionalBundle("bundleIdentifier")
        label = try p.optionalString("label", maxBytes: 255)
        capabilities = p.value("capabilities") ?? [:]
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("protocolVersion", protocolVersion)
        b.set("role", role.rawValue)
        b.set("bundleIdentifier", bundleIdentifier)
        b.set("label", label)
        b.set("capabilities", capabilities)
        return b.json
    }

    /// The daemon's answer: its version, what it can do, its limits, and for an extension the
    /// bundle its unit serves.
    public struct Response: WireResponse, Equatable {
        public var protocolVersion: Int
        public var server: String
        public var serverVersion: String
        public var capabilities: JSONValue
        public var limits: JSONValue
        public var bundleIdentifier: String?

        public init(protocolVersion: Int = Protocol.version, server: String = "searchlightd", serverVersion: String,
                    capabilities: JSONValue, limits: JSONValue, bundleIdentifier: String? = nil) {
            self.protocolVersion = protocolVersion
            self.server = server
            self.serverVersion = serverVersion
            self.capabilities = capabilities
            self.limits = limits
            self.bundleIdentifier = bundleIdentifier
        }

        public init(result: JSONValue) throws(SearchlightError) {
            protocolVersion = result["protocolVersion"]?.intValue ?? Protocol.version
            server = result["server"]?.stringValue ?? "searchlightd"
            serverVersion = result["serverVersion"]?.stringValue ?? "?"
            capabilities = result["capabilities"] ?? [:]
            limits = result["limits"] ?? [:]
            bundleIdentifier = result["bundleIdentifier"]?.stringValue
        }

        public var result: JSONValue {
            var b = ParamsBuilder()
            b.set("protocolVersion", protocolVersion)
            b.set("server", server)
            b.set("serverVersion", serverVersion)
            b.set("capabilities", capabilities)
            b.set("limits", limits)
            b.set("bundleIdentifier", bundleIdentifier)
            return b.json
        }
    }
}
