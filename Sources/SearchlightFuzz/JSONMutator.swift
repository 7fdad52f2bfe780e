import SearchlightWire

/// Structural mutations of a JSON document: one value somewhere in the tree replaced by another
/// type or an extreme of its own (empty, huge, negative, fractional, 10 001 entries), a key
/// removed or added. The result still parses, so it reaches the code behind the parser: each
/// method's parameter decoding.
public struct JSONMutator: Sendable {
    public init() {}

    public func mutate(_ value: JSONValue, random: inout FuzzRandom) -> JSONValue {
        var value = value
        for _ in 0...random.below(3) { value = mutateOnce(value, random: &random, depth: 0) }
        return value
    }

    /// Mutates a JSON-RPC request's `params` three times in four, else the whole message.
    public func mutateRequest(_ message: JSONValue, random: inout FuzzRandom) -> JSONValue {
        guard case .object(var o) = message, let params = o["params"], random.below(4) > 0 else {
            return mutate(message, random: &random)
        }
        if case .object(var p) = params, !p.isEmpty, random.below(4) > 0 {
            let key = p.keys.sorted()[random.below(p.count)]
            p[key] = mutate(p[key]!, random: &random)
            o["params"] = .object(p)
        } else {
            o["params"] = mutate(params, random: &random)
        }
        return .object(o)
    }

    func mutateOnce(_ value: JSONValue, random: inout FuzzRandom, depth: Int) -> JSONValue {
        // Go down into a container two times in three (deeper values are where params live).
        switch value {
        case .object(var o) where !o.isEmpty && random.below(3) > 0:
            let key = o.keys.sorted()[random.below(o.count)]
            switch random.below(6) {
            case 0: o[key] = nil
            case 1: o[random.pick(["id", "index", "items", "identifiers", "query", "limit", "cursor", "x", ""])] = replacement(&random)
            default: o[key] = mutateOnce(o[key]!, random: &random, depth: depth + 1)
            }
            return .object(o)
        case .array(var a) where !a.isEmpty && random.below(3) > 0:
            let k = random.below(a.count)
            a[k] = mutateOnce(a[k], random: &random, depth: depth + 1)
            return .array(a)
        default:
            return replacement(&random)
        }
    }

    func replacement(_ random: inout FuzzRandom) -> JSONValue {
        switch random.below(14) {
        case 0: return .null
        case 1: return .bool(random.oneIn(2))
        case 2: return .number(random.pick([0, -1, 1.5, -0.0, 1e300, -1e300, 9.007_199_254_740_993e15, .leastNonzeroMagnitude, 2_147_483_648, 1e16]))
        case 3: return .string("")
        case 4: return .string(String(repeating: random.pick(["a", "é", "\u{0}", "星", ".", "*"]), count: random.pick([1, 255, 256, 1025, 70_000])))
        case 5: return .string(random.pick(["..", "a..b", ".a", "a.", "../../etc", "com.example.other", "$time.now", "\"", "\\", "\u{FEFF}x"]))
        case 6: return .array([])
        case 7: return .array((0..<random.pick([1, 3, 10_001])).map { .string("id-\($0)") })
        case 8: return .array([.null, 1, "x", [:]])
        case 9: return .object([:])
        case 10: return ["uniqueIdentifier": "u", "attributeSet": ["title": .string("t"), "rankingHint": 101]]
        case 11: return ["$date": .string(random.pick(["2026-13-01T00:00:00Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z", "x"]))]
        case 12: return .string(random.pick(["2026-11-22T10:00:00.000Z", "2026-11-22", "9999-99-99T99:99:99Z", "1970-01-01T00:00:00+25:00"]))
        default: return .number(Double(random.below(1000)) - 500)
        }
    }
}
