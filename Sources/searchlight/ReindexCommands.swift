import Foundation
import SearchlightKit

/// The commands that drive index extensions: `reindex`, `simulate`, `units`, `requests`,
/// `monitor`. They forward to the admin methods of DESIGN §4; the daemon decides what it supports.
enum ReindexCommands {
    static let reindex = Command(
        spec: CommandSpec(
            name: "reindex", abstract: "ask an index extension to rebuild items (mdutil -cr LABEL)",
            usage: "LABEL|BUNDLE (--all | --identifiers ID... | --identifiers-from FILE) [--index NAME] [--no-wait] [--timeout S] [--background]",
            positionals: [.required("LABEL|BUNDLE", "the extension's label, or the app whose extension to ask")],
            options: [
                .flag("all", "rebuild every item (reindexAllSearchableItems)"),
                .upToNextOption("identifiers", "ID", "rebuild these items (reindexSearchableItems)"),
                .value("identifiers-from", "FILE", "read the identifiers from FILE, one per line (- is stdin)"),
                .value("index", "NAME", "a named index (default: the default index)"),
                .flag("no-wait", "return once the request is journaled, without waiting for the acknowledgement"),
                .value("timeout", "S", "give up waiting after S seconds (exit status 4); the request stays queued"),
                .flag("background", "treat it as background work: throttled under load like the automatic triggers"),
            ]
        ),
        run: { args, context in
            var params: [String: JSONValue] = [
                "target": .string(args.positionals[0]), "wait": .bool(!args.flag("no-wait")),
                "reason": args.flag("background") ? "background" : "manual",
            ]
            let choices = [args.flag("all"), !args.values("identifiers").isEmpty, args.value("identifiers-from") != nil].filter { $0 }.count
            guard choices == 1 else {
                throw UsageError(choices == 0 ? "say what to rebuild: --all, --identifiers or --identifiers-from" : "give only one of --all, --identifiers and --identifiers-from")
            }
            var identifiers = args.values("identifiers")
            if let file = args.value("identifiers-from") { identifiers += try readIdentifiers(file) }
            if args.flag("all") { params["all"] = true } else { params["identifiers"] = .array(identifiers.map(JSONValue.string)) }
            if let index = args.value("index") { params["index"] = .string(index) }
            let timeout = try args.seconds("timeout")
            if let timeout { params["timeout"] = .number(timeout) }
            let request = params
            let answer = try await withDeadline(timeout, "the reindex request") { try await context.admin(Method.adminReindex, request) }
            printAnswer(answer, context, done: "reindex request for \(args.positionals[0]) \(args.flag("no-wait") ? "queued" : "acknowledged")")
        }
    )

    static func readIdentifiers(_ path: String) throws -> [String] {
        let reader = try LineReader(path: path)
        var out: [String] = []
        while let line = try reader.next() {
            let id = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespaces)
            if !id.isEmpty { out.append(id) }
        }
        guard !out.isEmpty else { throw CLIFailure("\(reader.name) has no identifiers; put one per line") }
        return out
    }

    static let simulate = Command(
        spec: CommandSpec(
            name: "simulate", abstract: "fire a trigger by hand: migration, corruption or idle",
            usage: "migration|corruption|idle [BUNDLE]",
            positionals: [
                .required("EVENT", "migration, corruption or idle"),
                .optional("BUNDLE", "the app it concerns (default: all, for idle)"),
            ]
        ),
        run: { args, context in
            let event = args.positionals[0]
            guard ["migration", "corruption", "idle"].contains(event) else {
                throw UsageError("the event must be migration, corruption or idle, not '\(event)'")
            }
            var params: [String: JSONValue] = ["event": .string(event)]
            if args.positionals.count > 1 { params["bundle"] = .string(args.positionals[1]) }
            let answer = try await context.admin(Method.adminSimulate, params)
            printAnswer(answer, context, done: "simulated \(event)")
        }
    )

    static let units = Command(
        spec: CommandSpec(
            name: "units", abstract: "list the extension units, or check unit files", usage: "[--verify FILE...] [--json]",
            options: [.upToNextOption("verify", "FILE", "check these unit files and report every error")]
        ),
        run: { args, context in
            var params: [String: JSONValue] = [:]
            let files = args.values("verify")
            if !files.isEmpty {
                // The daemon resolves paths from its own directory: send them absolute.
                let cwd = FileManager.default.currentDirectoryPath
                params["verify"] = .array(files.map { .string($0.hasPrefix("/") ? $0 : cwd + "/" + $0) })
            }
            printAnswer(try await context.admin(Method.adminUnits, params), context, done: "units")
        }
    )

    static let requests = Command(
        spec: CommandSpec(name: "requests", abstract: "list the journaled reindex requests", usage: "[--json]"),
        run: { _, context in printAnswer(try await context.admin(Method.adminRequests), context, done: "requests") }
    )

    static let monitor = Command(
        spec: CommandSpec(name: "monitor", abstract: "follow the daemon's events", usage: "",
            discussion: "Calls admin.monitor and prints its answer; the events that follow are not shown yet."),
        run: { _, context in printAnswer(try await context.admin(Method.adminMonitor), context, done: "monitor") }
    )

    /// Until these methods have their own renderings, their answers are shown as JSON.
    static func printAnswer(_ answer: JSONValue, _ context: CommandContext, done: String) {
        if context.json || answer.objectValue?.isEmpty == false || answer.arrayValue != nil {
            Console.out(answer)
        } else {
            Console.out(done)
        }
    }
}
