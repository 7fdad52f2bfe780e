import Foundation

/// One request of the wire protocol (DESIGN §4): its method, its parameters decoded and checked
/// here, in one place, and its answer. Compiled into the daemon, the SDK and the CLI alike
/// (sourcekit-lsp's `Requests/*.swift`, SwiftPM's `PluginMessages.swift`): the daemon decodes a
/// request with `init(params:)`, a client builds one and sends its `params`.
public protocol WireRequest: Sendable {
    associatedtype Response: WireResponse
    /// The method name on the wire.
    static var method: String { get }
    /// The fields of `params`, each with `?` when it may be left out, in Docs/Protocol.md's
    /// spelling (`{items, index?}`); a test checks both against the decoder and the document.
    static var fields: [String] { get }
    /// A request with every field set, for the documentation check and round-trip tests.
    static var example: Self { get }
    /// Decodes and checks the parameters: a field of the wrong type, out of range or missing is
    /// `invalidParams` (or the method's own code) naming it, its range, and what to do.
    init(params: WireParams) throws(SearchlightError)
    /// The parameters as sent.
    var params: JSONValue { get }
}

/// The answer of a request.
public protocol WireResponse: Sendable {
    init(result: JSONValue) throws(SearchlightError)
    var result: JSONValue { get }
}

/// A notification of the wire protocol: no answer.
public protocol WireNotification: Sendable {
    static var method: String { get }
    static var fields: [String] { get }
    static var example: Self { get }
    init(params: WireParams) throws(SearchlightError)
    var params: JSONValue { get }
}

/// An answer with nothing in it worth a type: `{}`, or one the caller reads as JSON (status
/// reports, whose fields are additive and documented in Docs/Protocol.md).
public struct JSONResponse: WireResponse, Equatable {
    public var result: JSONValue
    public init(result: JSONValue) { self.result = result }
    public static let empty = JSONResponse(result: [:])
}

extension WireRequest {
    /// Decodes `params` as the daemon received them.
    public static func decode(_ params: JSONValue, limits: Limits = Limits()) throws(SearchlightError) -> Self {
        try Self(params: try WireParams(params, limits: limits))
    }
}

extension WireNotification {
    public static func decode(_ params: JSONValue, limits: Limits = Limits()) throws(SearchlightError) -> Self {
        try Self(params: try WireParams(params, limits: limits))
    }
}

/// The parameters of one message, read field by field. Each accessor checks the field's type
/// (and range, and size) and names it in the error; absent and `null` are the same. The fields
/// read are remembered (`read`), so a message's decoder can be checked against its declared
/// `fields`. `limits` are the daemon's (`Limits()` on a client).
public final class WireParams {
    public let object: [String: JSONValue]
    public let limits: Limits
    /// The prefix of nested fields in messages (`context.` for `query.user`'s context).
    private let path: String
    /// The names read, in this object and its nested ones (with their prefix).
    public var read: Set<String> { Set(readNames.map { $0.path + $0.name }) }
    /// The same, as read: every call decodes its params, and a set of joined names cost a
    /// `query.user` call about 40 000 instructions (hashing, and a string per nested name).
    private var readNames: [(path: String, name: String)] = []
    private weak var parent: WireParams?

    public init(_ params: JSONValue, limits: Limits = Limits()) throws(SearchlightError) {
        guard case .object(let object) = params else { throw .invalidParams("\"params\" must be an object") }
        self.object = object
        self.limits = limits
        path = ""
    }

    private init(object: [String: JSONValue], limits: Limits, path: String, parent: WireParams) {
        self.object = object
        self.limits = limits
        self.path = path
        self.parent = parent
    }

    private func take(_ name: String) -> JSONValue? {
        note(path, name)
        guard let value = object[name], !value.isNull else { return nil }
        return value
    }

    private func note(_ path: String, _ name: String) {
        readNames.append((path, name))
        parent?.note(path, name)
    }

    /// The field as given, unchecked (the message checks it itself: items, client states).
    public func value(_ name: String) -> JSONValue? { take(name) }

    public func optionalString(_ name: String, maxBytes: Int = 1 << 20) throws(SearchlightError) -> String? {
        guard let value = take(name) else { return nil }
        guard let s = value.stringValue else { throw .invalidParams("\"\(path + name)\" must be a string") }
        guard s.utf8.count <= maxBytes else { throw .invalidParams("\"\(path + name)\" is longer than \(maxBytes) bytes") }
        return s
    }

    public func string(_ name: String, maxBytes: Int = 1 << 20) throws(SearchlightError) -> String {
        guard let s = try optionalString(name, maxBytes: maxBytes) else { throw .invalidParams("\"\(path + name)\" is required (a string)") }
        return s
    }

    public func optionalBool(_ name: String) throws(SearchlightError) -> Bool? {
        guard let value = take(name) else { return nil }
        guard let b = value.boolValue else { throw .invalidParams("\"\(path + name)\" must be true or false") }
        return b
    }

    public func bool(_ name: String, default defaultValue: Bool) throws(SearchlightError) -> Bool {
        try optionalBool(name) ?? defaultValue
    }

    public func optionalInteger(_ name: String, in range: ClosedRange<Int>) throws(SearchlightError) -> Int? {
        try NumericParameter.integer(take(name), field: path + name, in: range)
    }

    public func integer(_ name: String, in range: ClosedRange<Int>, default defaultValue: Int) throws(SearchlightError) -> Int {
        try optionalInteger(name, in: range) ?? defaultValue
    }

    public func integer(_ name: String, in range: ClosedRange<Int>) throws(SearchlightError) -> Int {
        guard let n = try optionalInteger(name, in: range) else {
            throw .invalidParams("\"\(path + name)\" is required (an integer from \(range.lowerBound) to \(range.upperBound))")
        }
        return n
    }

    /// A finite number in `range`.
    public func optionalNumber(_ name: String, in range: ClosedRange<Double>) throws(SearchlightError) -> Double? {
        try NumericParameter.number(take(name), field: path + name, in: range)
    }

    /// A finite number of seconds in `range` (safe to turn into a `Duration`).
    public func optionalSeconds(_ name: String, in range: ClosedRange<Double>) throws(SearchlightError) -> Double? {
        try NumericParameter.seconds(take(name), field: path + name, in: range)
    }

    /// An array of strings, at most `maxCount` of them, each at most `maxBytes`.
    public func optionalStrings(_ name: String, maxCount: Int = 10_000, maxBytes: Int = 1 << 16) throws(SearchlightError) -> [String]? {
        guard let value = take(name) else { return nil }
        guard let array = value.arrayValue else { throw .invalidParams("\"\(path + name)\" must be an array of strings") }
        guard array.count <= maxCount else {
            throw .invalidParams("\"\(path + name)\" has \(array.count) entries; send at most \(maxCount)")
        }
        var out: [String] = []
        out.reserveCapacity(array.count)
        for (i, v) in array.enumerated() {
            guard let s = v.stringValue, s.utf8.count <= maxBytes else {
                throw .invalidParams("\(path + name)[\(i)] must be a string of at most \(maxBytes) bytes")
            }
            out.append(s)
        }
        return out
    }

    /// Item identifiers (or domains): a non-empty array of non-empty strings within the limits of
    /// a call (`maxIdentifiersPerCall`, `maxIdentifierBytes`).
    public func identifiers(_ name: String) throws(SearchlightError) -> [String] {
        guard let value = take(name), let array = value.arrayValue else { throw .invalidParams("\"\(path + name)\" must be an array of strings") }
        guard array.count <= limits.maxIdentifiersPerCall else {
            throw .invalidParams("\"\(path + name)\" has \(array.count) entries; send at most \(limits.maxIdentifiersPerCall) per call")
        }
        var out: [String] = []
        out.reserveCapacity(array.count)
        for (i, v) in array.enumerated() {
            guard let s = v.stringValue, !s.isEmpty, s.utf8.count <= limits.maxIdentifierBytes else {
                throw .invalidParams("\(path + name)[\(i)] must be a non-empty string of at most \(limits.maxIdentifierBytes) bytes")
            }
            out.append(s)
        }
        return out
    }

    /// A bundle identifier (`Names.validBundle`).
    public func optionalBundle(_ name: String = "bundle") throws(SearchlightError) -> String? {
        guard let value = take(name) else { return nil }
        return try Names.bundle(value, field: path + name)
    }

    public func bundle(_ name: String = "bundle") throws(SearchlightError) -> String {
        try Names.bundle(take(name), field: path + name)
    }

    /// The index name (`index`, default `""`: the bundle's default index).
    public func index() throws(SearchlightError) -> String {
        try Names.index(take("index"))
    }

    /// A client state: base64 of at most `maxClientStateBytes`; nil when absent or null.
    public func clientState(_ name: String) throws(SearchlightError) -> [UInt8]? {
        switch take(name) {
        case nil: return nil
        case .string(let s)?:
            guard let data = Data(base64Encoded: s) else {
                throw SearchlightError(.invalidClientState, "\"\(path + name)\" must be base64")
            }
            guard data.count <= limits.maxClientStateBytes else {
                throw SearchlightError(.invalidClientState, "\"\(path + name)\" is \(data.count) bytes; the limit is \(limits.maxClientStateBytes)")
            }
            return Array(data)
        default: throw SearchlightError(.invalidClientState, "\"\(path + name)\" must be a base64 string")
        }
    }

    /// Whether the field is present (even as `null`): `expectedClientState: null` means "none".
    public func has(_ name: String) -> Bool {
        note(path, name)
        return object[name] != nil
    }

    /// A nested object; an absent one reads as empty.
    public func nested(_ name: String) throws(SearchlightError) -> WireParams {
        switch take(name) {
        case nil: return WireParams(object: [:], limits: limits, path: path + name + ".", parent: self)
        case .object(let o)?: return WireParams(object: o, limits: limits, path: path + name + ".", parent: self)
        default: throw .invalidParams("\"\(path + name)\" must be an object")
        }
    }
}

/// Builds a message's params: only the fields that are set.
public struct ParamsBuilder {
    public private(set) var object: [String: JSONValue] = [:]
    public init() {}
    public mutating func set(_ name: String, _ value: JSONValue?) { if let value { object[name] = value } }
    public mutating func set(_ name: String, _ value: String?) { set(name, value.map(JSONValue.string)) }
    public mutating func set(_ name: String, _ value: Bool?) { set(name, value.map(JSONValue.bool)) }
    public mutating func set(_ name: String, _ value: Int?) { set(name, value.map { JSONValue.number(Double($0)) }) }
    public mutating func set(_ name: String, _ value: Double?) { set(name, value.map(JSONValue.number)) }
    public mutating func set(_ name: String, _ value: [String]?) { set(name, value.map { JSONValue.array($0.map(JSONValue.string)) }) }
    /// `index` only when it names an index ("" is the default index, left out).
    public mutating func setIndex(_ index: String) { if !index.isEmpty { object["index"] = .string(index) } }
    public var json: JSONValue { .object(object) }
}
