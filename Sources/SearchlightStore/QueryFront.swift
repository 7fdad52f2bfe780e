import Foundation
import SearchlightWire

/// Turns `query.search` text and filter queries into one SQL filter (parse, check limits, compile).
public enum QueryFront {
    public static func filter(query: String, filterQueries: [String] = [], limits: Limits, now: Date) throws(SearchlightError) -> SQLFilter {
        // Replaced by the parser and compiler once they land.
        throw SearchlightError(.invalidQuery, "query language not yet available", data: ["offset": 0])
    }
}
