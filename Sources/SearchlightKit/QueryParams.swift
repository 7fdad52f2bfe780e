import Foundation

// The params of the SDK's `query.search` calls written straight into bytes, as `submit` sends a
// chunk of items: building the `JSONValue` tree (a dictionary, an array per list, each key hashed)
// and writing it out again cost 6-10 k of a term call's ~155 k instructions on the client (`git
// show 8eae301:Docs/Performance.md`, "The SDK's CPU per call"). The same members as the types'
// `params` (tests compare the two); the daemon does not depend on their order. (`query.user` keeps
// its tree: its context's JSON is SearchlightWire's own.)

extension QuerySearch {
    /// `params`, written.
    var encodedParams: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(query.utf8.count + 96)
        out.append(UInt8(ascii: "{"))
        var w = JSONObjectWriter()
        w.key("query", &out)
        JSONValue.writeString(query, to: &out)
        if let fetchAttributes {
            w.key("fetchAttributes", &out)
            Self.writeStrings(fetchAttributes, to: &out)
        }
        if !filterQueries.isEmpty {
            w.key("filterQueries", &out)
            Self.writeStrings(filterQueries, to: &out)
        }
        w.key("limit", &out)
        // `params` holds it as a Double: the same text for every Int it can hold exactly.
        JSONValue.writeNumber(Double(limit), to: &out)
        if let cursor {
            w.key("cursor", &out)
            JSONValue.writeString(cursor, to: &out)
        }
        if !index.isEmpty {
            w.key("index", &out)
            JSONValue.writeString(index, to: &out)
        }
        if let bundle {
            w.key("bundle", &out)
            JSONValue.writeString(bundle, to: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func writeStrings(_ strings: [String], to out: inout [UInt8]) {
        out.append(UInt8(ascii: "["))
        for (i, s) in strings.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            JSONValue.writeString(s, to: &out)
        }
        out.append(UInt8(ascii: "]"))
    }
}
