/// A JSON-RPC 2.0 request id: a number or a string.
public enum RPCID: Sendable, Hashable, CustomStringConvertible {
    case number(Int)
    case string(String)

    public var json: JSONValue {
        switch self {
        case .number(let n): .number(Double(n))
        case .string(let s): .string(s)
        }
    }

    public var description: String {
        switch self {
        case .number(let n): String(n)
        case .string(let s): s
        }
    }
}

/// One JSON-RPC 2.0 message. Batches (JSON arrays) are not part of this protocol.
public enum RPCMessage: Sendable, Equatable {
    case request(id: RPCID, method: String, params: JSONValue)
    case notification(method: String, params: JSONValue)
    case response(id: RPCID, result: Result<JSONValue, SearchlightError>)

    public var json: JSONValue {
        switch self {
        case .request(let id, let method, let params):
            return ["jsonrpc": "2.0", "id": id.json, "method": .string(method), "params": params]
        case .notification(let method, let params):
            return ["jsonrpc": "2.0", "method": .string(method), "params": params]
        case .response(let id, .success(let result)):
            return ["jsonrpc": "2.0", "id": id.json, "result": result]
        case .response(let id, .failure(let error)):
            var e: [String: JSONValue] = ["code": .number(Double(error.rawCode)), "message": .string(error.message)]
            if let data = error.data { e["data"] = data }
            return ["jsonrpc": "2.0", "id": id.json, "error": .object(e)]
        }
    }

    /// The message as one NDJSON frame, newline included: the same JSON as `json`, written
    /// straight into the frame (no envelope dictionary per answer). `nullID` writes the id as
    /// `null` (an error answer to a frame whose id could not be read).
    public func frame(nullID: Bool = false) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(512)
        out.append(contentsOf: #"{"jsonrpc":"2.0""#.utf8)
        func writeID(_ id: RPCID) {
            out.append(contentsOf: #","id":"#.utf8)
            if nullID {
                out.append(contentsOf: "null".utf8)
                return
            }
            switch id {
            case .number(let n): out.append(contentsOf: String(n).utf8)
            case .string(let s): JSONValue.writeString(s, to: &out)
            }
        }
        switch self {
        case .request(let id, let method, let params):
            writeID(id)
            out.append(contentsOf: #","method":"#.utf8)
            JSONValue.writeString(method, to: &out)
            out.append(contentsOf: #","params":"#.utf8)
            params.write(to: &out)
        case .notification(let method, let params):
            out.append(contentsOf: #","method":"#.utf8)
            JSONValue.writeString(method, to: &out)
            out.append(contentsOf: #","params":"#.utf8)
            params.write(to: &out)
        case .response(let id, .success(let result)):
            writeID(id)
            out.append(contentsOf: #","result":"#.utf8)
            result.write(to: &out)
        case .response(let id, .failure):
            writeID(id)
            out.append(contentsOf: #","error":"#.utf8)
            (json["error"] ?? .null).write(to: &out)
        }
        out.append(UInt8(ascii: "}"))
        out.append(0x0A)
        return out
    }
}

extension RPCMessage {
    /// The frame of a request whose params are already written (`params`: a JSON object's
    /// bytes), newline included: the same bytes as `RPCMessage.request(id:method:params:).frame()`
    /// of their value, without building it.
    public static func requestFrame(id: RPCID, method: String, encodedParams params: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(params.count + method.utf8.count + 48)
        out.append(contentsOf: #"{"jsonrpc":"2.0","id":"#.utf8)
        switch id {
        case .number(let n): out.append(contentsOf: String(n).utf8)
        case .string(let s): JSONValue.writeString(s, to: &out)
        }
        out.append(contentsOf: #","method":"#.utf8)
        JSONValue.writeString(method, to: &out)
        out.append(contentsOf: #","params":"#.utf8)
        out.append(contentsOf: params)
        out.append(UInt8(ascii: "}"))
        out.append(0x0A)
        return out
    }
}

/// Why a frame could not be read as a JSON-RPC message. `id` is set when the frame was a request
/// whose id could still be read, so the error can be answered to it.
public struct RPCDecodeError: Error, Sendable {
    public var id: RPCID?
    public var error: SearchlightError
    /// The frame was a (malformed) response: it must not be answered, or two peers that each
    /// cannot read the other's error answers would trade them forever.
    public var isResponse = false

    public init(id: RPCID?, error: SearchlightError, isResponse: Bool = false) {
        self.id = id
        self.error = error
        self.isResponse = isResponse
    }
}

extension RPCMessage {
    /// Decodes one frame (without its newline).
    public static func decode(_ frame: some Collection<UInt8>, maxDepth: Int = 128) throws(RPCDecodeError) -> RPCMessage {
        let value: JSONValue
        do {
            value = try JSONValue.parse(frame, maxDepth: maxDepth)
        } catch {
            throw RPCDecodeError(id: nil, error: SearchlightError(.parseError, "\(error); send one JSON object per line"))
        }
        return try decode(value)
    }

    public static func decode(_ value: JSONValue) throws(RPCDecodeError) -> RPCMessage {
        guard case .object(let object) = value else {
            throw RPCDecodeError(id: nil, error: .init(.invalidRequest, "a message must be a JSON object, not \(value.typeName)"))
        }
        var id: RPCID?
        switch object["id"] {
        case nil, .null?: id = nil
        case .string(let s)?: id = .string(s)
        case .number? where object["id"]?.intValue != nil: id = .number(object["id"]!.intValue!)
        default:
            throw RPCDecodeError(id: nil, error: .init(.invalidRequest, "\"id\" must be an integer or a string"))
        }
        guard object["jsonrpc"] == "2.0" else {
            throw RPCDecodeError(id: id, error: .init(.invalidRequest, "\"jsonrpc\" must be \"2.0\""))
        }
        if let methodValue = object["method"] {
            guard case .string(let method) = methodValue, !method.isEmpty else {
                throw RPCDecodeError(id: id, error: .init(.invalidRequest, "\"method\" must be a non-empty string"))
            }
            let params = object["params"] ?? .object([:])
            switch params {
            case .object, .array: break
            default:
                throw RPCDecodeError(id: id, error: .init(.invalidRequest, "\"params\" must be an object"))
            }
            if let id { return .request(id: id, method: method, params: params) }
            return .notification(method: method, params: params)
        }
        let looksLikeResponse = object["result"] != nil || object["error"] != nil
        guard let id else {
            throw RPCDecodeError(id: nil, error: .init(.invalidRequest, "a message needs \"method\" or \"id\""), isResponse: looksLikeResponse)
        }
        if let error = object["error"] {
            guard let code = error["code"]?.intValue, let message = error["message"]?.stringValue else {
                throw RPCDecodeError(id: id, error: .init(.invalidRequest, "\"error\" needs an integer code and a message"), isResponse: true)
            }
            return .response(id: id, result: .failure(SearchlightError(rawCode: code, message: message, data: error["data"])))
        }
        return .response(id: id, result: .success(object["result"] ?? .null))
    }
}
