/// The protocol's limits (DESIGN §4). The daemon takes each as a flag with these defaults.
public struct Limits: Sendable, Equatable {
    public var maxFrameBytes = 16 << 20
    public var maxItemBytes = 1 << 20
    public var maxIdentifiersPerCall = 10_000
    public var maxQueryBytes = 64 << 10
    public var maxQueryDepth = 64
    /// Distinct words of a `query.user` text (a word repeated counts once).
    public var maxQueryTerms = 64
    /// Comparisons in a `query.search` query and its filter queries together; `*` counts once per
    /// attribute it searches (`QueryCost`). Bounds the work done for every item scanned.
    public var maxQueryPredicates = 256
    /// Filter queries in one call (`filterQueries` of `query.search` and `query.user`).
    public var maxFilterQueries = 64
    public var maxClientStateBytes = 250
    public var maxItemsPerIndex = 1_000_000
    public var maxIdentifierBytes = 1024
    public var maxCustomAttributes = 256
    /// JSON nesting accepted in a frame (items are shallow; this bounds hostile input).
    public var maxJSONDepth = 128

    public init() {}
}

extension Limits {
    /// The daemon's side of a connection: answers and calls waiting for a peer that does not
    /// read them may fill two largest frames; past that the connection is closed, so a slow
    /// reader costs its own connection and some memory, never a thread of the daemon.
    public var outboxLimit: RPCConnection.OutboxLimit { .close(bytes: 2 * maxFrameBytes) }
}
