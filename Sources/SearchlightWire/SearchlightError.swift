/// The error codes of the wire protocol (DESIGN §4). They mirror CSIndexErrorCode and
/// CSSearchQueryErrorCode, then Searchlight's own, then JSON-RPC's standard codes.
public enum ErrorCode: Int, Sendable, CaseIterable {
    case indexUnavailable = -1000
    case invalidItem = -1001
    case invalidClientState = -1002
    case remoteConnection = -1003
    case quotaExceeded = -1004
    case indexingUnsupported = -1005
    case mismatchedClientState = -1006
    case indexUnreachable = -2001
    case invalidQuery = -2002
    case cancelled = -2003
    case permissionDenied = -3001
    case unknownExtension = -3002
    case extensionFailed = -3003
    case requestTimedOut = -3004
    case parseError = -32700
    case invalidRequest = -32600
    case methodNotFound = -32601
    case invalidParams = -32602
    case internalError = -32603

    public var name: String {
        switch self {
        case .indexUnavailable: "indexUnavailable"
        case .invalidItem: "invalidItem"
        case .invalidClientState: "invalidClientState"
        case .remoteConnection: "remoteConnection"
        case .quotaExceeded: "quotaExceeded"
        case .indexingUnsupported: "indexingUnsupported"
        case .mismatchedClientState: "mismatchedClientState"
        case .indexUnreachable: "indexUnreachable"
        case .invalidQuery: "invalidQuery"
        case .cancelled: "cancelled"
        case .permissionDenied: "permissionDenied"
        case .unknownExtension: "unknownExtension"
        case .extensionFailed: "extensionFailed"
        case .requestTimedOut: "requestTimedOut"
        case .parseError: "parseError"
        case .invalidRequest: "invalidRequest"
        case .methodNotFound: "methodNotFound"
        case .invalidParams: "invalidParams"
        case .internalError: "internalError"
        }
    }
}

/// An error with a wire code, a message that says what was wrong and what to do, and optional
/// structured data (for example the byte `offset` of a query syntax error).
public struct SearchlightError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The raw code as received; `code` is nil when a newer peer sent one we do not know.
    public var rawCode: Int
    public var message: String
    public var data: JSONValue?

    public var code: ErrorCode? { ErrorCode(rawValue: rawCode) }

    public init(_ code: ErrorCode, _ message: String, data: JSONValue? = nil) {
        self.rawCode = code.rawValue
        self.message = message
        self.data = data
    }

    public init(rawCode: Int, message: String, data: JSONValue? = nil) {
        self.rawCode = rawCode
        self.message = message
        self.data = data
    }

    public var description: String {
        let name = code?.name ?? "error"
        return "\(name) (\(rawCode)): \(message)"
    }

    public static func invalidParams(_ message: String) -> SearchlightError { .init(.invalidParams, message) }
}
