import Foundation
import Testing
import TestThreads
import SearchlightWire

/// The typed wire messages: each decodes its own example, reads exactly the fields it declares,
/// refuses a missing required field, and matches Docs/Protocol.md.
@Suite("Typed wire messages", .onOwnThreads)
struct WireMessageTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path

    static var requestMethods: [String] { WireMessages.requests.map { $0.method } }

    static func type(_ method: String) -> (any WireRequest.Type)? { WireMessages.requests.first { $0.method == method } }

    /// Decodes `T`'s example as the daemon would, returning the fields the decoder read.
    static func decodeExample<T: WireRequest>(_: T.Type) throws -> (decoded: T, read: Set<String>) {
        let params = try WireParams(T.example.params)
        let decoded = try T(params: params)
        return (decoded, params.read)
    }

    static func names(_ fields: [String]) -> Set<String> { Set(fields.map { $0.hasSuffix("?") ? String($0.dropLast()) : $0 }) }

    @Test("every request decodes its example back to the same params, reading exactly its declared fields", arguments: requestMethods)
    func roundTrip(method: String) throws {
        let type = try #require(Self.type(method))
        func check<T: WireRequest>(_ t: T.Type) throws {
            let (decoded, read) = try Self.decodeExample(t)
            #expect(decoded.params == T.example.params, "\(method): \(decoded.params) != \(T.example.params)")
            #expect(read == Self.names(T.fields), "\(method) reads \(read.sorted()), declares \(T.fields)")
        }
        try check(type)
    }

    @Test("every required field is required: without it the request is refused", arguments: requestMethods)
    func requiredFields(method: String) throws {
        let type = try #require(Self.type(method))
        func check<T: WireRequest>(_: T.Type) throws {
            guard case .object(let full) = T.example.params else { Issue.record("\(method): params are not an object"); return }
            for field in T.fields where !field.hasSuffix("?") && !field.contains(".") {
                var without = full
                without[field] = nil
                #expect(throws: SearchlightError.self, "\(method) without \(field)") { try T.decode(.object(without)) }
            }
        }
        try check(type)
    }

    @Test("numbers out of range are invalidParams naming the field (not a crash)")
    func numbersChecked() throws {
        for bad: JSONValue in [1e308, -1, 0, 1e9, "10"] {
            var params = AdminReindex.example.params.objectValue ?? [:]
            params["timeout"] = bad
            #expect(throws: SearchlightError.self) { try AdminReindex.decode(.object(params)) }
        }
        for bad: JSONValue in [1e308, -1, .number(1e-300 * 1e-20), 9_223_372_036_854_775_807, 2.5, "10"] {
            var search = QuerySearch.example.params.objectValue ?? [:]
            search["limit"] = bad
            do {
                _ = try QuerySearch.decode(.object(search))
                Issue.record("limit \(bad) was accepted")
            } catch {
                #expect(error.code == .invalidParams && error.message.contains("\"limit\""), "\(error)")
            }
        }
    }

    @Test("Docs/Protocol.md lists every request with exactly its fields")
    func protocolDocument() throws {
        let text = try String(contentsOfFile: Self.repository + "/Docs/Protocol.md", encoding: .utf8)
        let documented = Self.documentedFields(text)
        for type in WireMessages.requests {
            guard let fields = documented[type.method] else {
                Issue.record("Docs/Protocol.md has no table row for \(type.method)")
                continue
            }
            #expect(Set(fields) == Set(type.fields), "\(type.method): the document says \(fields.sorted()), the type \(type.fields.sorted())")
        }
    }

    /// `| \`method\` | \`{a, b?, c?: {d?, e}}\` … |` rows → method: ["a", "b?", "c?", "c.d?", "c.e"].
    static func documentedFields(_ text: String) -> [String: [String]] {
        var out: [String: [String]] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count > 3, cells[1].hasPrefix("`"), cells[1].hasSuffix("`"),
                  let open = cells[2].range(of: "`{"), let close = cells[2].range(of: "}`", options: .backwards) else { continue }
            let method = String(cells[1].dropFirst().dropLast())
            out[method] = fields(String(cells[2][open.upperBound..<close.lowerBound]), prefix: "")
        }
        return out
    }

    static func fields(_ list: String, prefix: String) -> [String] {
        var out: [String] = []
        var depth = 0, current = ""
        func flush() {
            let entry = current.trimmingCharacters(in: .whitespaces)
            current = ""
            guard !entry.isEmpty else { return }
            let name = String(entry.prefix { $0 != ":" }).trimmingCharacters(in: .whitespaces)
            out.append(prefix + name)
            if let brace = entry.firstIndex(of: "{"), let end = entry.lastIndex(of: "}") {
                let base = name.hasSuffix("?") ? String(name.dropLast()) : name
                out += fields(String(entry[entry.index(after: brace)..<end]), prefix: prefix + base + ".")
            }
        }
        for c in list {
            if c == "{" || c == "[" { depth += 1 }
            if c == "}" || c == "]" { depth -= 1 }
            if c == ",", depth == 0 { flush() } else { current.append(c) }
        }
        flush()
        return out
    }
}
