/// The protocol's limits (DESIGN §4). The daemon takes each as a flag with these defaults.
public struct Limits: Sendable, Equatable {
    public var maxFrameBytes = 16 << 20
    public var maxItemBytes = 1 << 20
    public var maxIdentifiersPerCall = 10_000
    public var maxQueryBytes = 64 << 10
    public var maxQueryDepth = 64
    public var maxClientStateBytes = 250
    public var maxItemsPerIndex = 1_000_000
    public var maxIdentifierBytes = 1024
    public var maxCustomAttributes = 256
    /// JSON nesting accepted in a frame (items are shallow; this bounds hostile input).
    public var maxJSONDepth = 128

    public init() {}
}
