import Foundation
import SearchlightKit

extension ReindexCommands {
    static let requests = Command(
        spec: CommandSpec(
            name: "requests", abstract: "list the journaled reindex requests and poisoned identifiers", usage: "[--json]",
            discussion: """
                A request stays journaled until its extension acknowledges it. A failed request is retried
                at NEXT: after a crash or hang of the extension, when it may be launched again (its launch
                backoff, the time `searchlight units` shows); after a negative acknowledgement, after the
                request's own retry backoff. Both start at 10 s and double to 5 min. An identifier that made
                the extension fail on its own is poisoned: it is no longer requested and is listed here.
                """
        ),
        run: { _, context in
            let answer = try await context.admin(AdminRequests())
            if context.json {
                Console.out(answer)
            } else {
                RequestsCommand.print(answer)
            }
        }
    )
}

/// Renders `admin.requests`.
enum RequestsCommand {
    static func print(_ answer: JSONValue) {
        let requests = answer["requests"]?.arrayValue ?? []
        let poisoned = answer["poisoned"]?.arrayValue ?? []
        if requests.isEmpty {
            Console.out("no reindex requests are journaled")
        } else {
            table(requests).print()
            let failures = requests.filter { $0["lastError"]?.stringValue != nil }
            if !failures.isEmpty {
                Console.out("")
                for r in failures { Console.out("request \(text(r["id"])): \(Format.clip(r["lastError"]?.stringValue ?? "", 300))") }
            }
        }
        guard !poisoned.isEmpty else { return }
        Console.out("")
        Console.out("poisoned identifiers (no longer requested):")
        var table = Table([.left, .left, .left, .left, .left])
        table.append(["BUNDLE", "INDEX", "IDENTIFIER", "SINCE", "ERROR"])
        for p in poisoned {
            table.append([
                text(p["bundle"]), Format.indexName(p["index"]?.stringValue ?? ""), Format.clip(text(p["identifier"]), 60),
                p["at"]?.stringValue.flatMap(ISO8601.parse).map { Format.relative($0) } ?? "-",
                Format.clip(text(p["error"]), 120),
            ])
        }
        table.print()
    }

    static func table(_ requests: [JSONValue], now: Date = Date()) -> Table {
        var table = Table([.right, .left, .left, .left, .left, .left, .right, .right, .left])
        table.append(["ID", "EXTENSION", "INDEX", "ITEMS", "REASON", "STATE", "ATTEMPTS", "PROGRESS", "NEXT"])
        for r in requests {
            let items = r["kind"]?.stringValue == "all" ? "all" : "\(r["identifierCount"]?.intValue ?? 0) ids"
            let background = r["background"]?.boolValue == true && r["reason"]?.stringValue != "background" ? ", background" : ""
            table.append([
                text(r["id"]), r["label"]?.stringValue ?? text(r["bundle"]),
                Format.indexName(r["index"]?.stringValue ?? ""), items,
                text(r["reason"]) + background, text(r["state"]),
                r["attempts"]?.intValue.map(String.init) ?? "0", progress(r["progress"]),
                next(r, now: now),
            ])
        }
        return table
    }

    /// When a pending request goes next, and which clock says so: `in 13s (launch backoff)` after
    /// the extension crashed or hung (the time `units` shows), `in 2m 43s (retry backoff)` after a
    /// negative acknowledgement.
    static func next(_ r: JSONValue, now: Date) -> String {
        guard let at = r["notBefore"]?.stringValue.flatMap(ISO8601.parse) else { return "-" }
        let clock: String = switch r["retryAfter"]?.stringValue {
        case "launchBackoff": " (launch backoff)"
        case "retryBackoff": " (retry backoff)"
        default: ""
        }
        return Format.relative(at, now: now) + clock
    }

    static func progress(_ value: JSONValue?) -> String {
        guard let completed = value?["completed"]?.intValue else { return "-" }
        guard let total = value?["total"]?.intValue, total > 0 else { return "\(completed)" }
        return "\(completed)/\(total)"
    }

    /// A string or number field as plain text; `-` when absent.
    static func text(_ value: JSONValue?) -> String {
        guard let value, !value.isNull else { return "-" }
        return value.stringValue ?? value.jsonString
    }
}
