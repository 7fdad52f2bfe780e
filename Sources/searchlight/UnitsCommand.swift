import Foundation
import SearchlightKit

extension ReindexCommands {
    static let units = Command(
        spec: CommandSpec(
            name: "units", abstract: "list the extension units, or check unit files", usage: "[--verify FILE...] [--json]",
            options: [.upToNextOption("verify", "FILE", "check these unit files without the daemon, and report every error")],
            discussion: """
                Without --verify, asks searchlightd to reload the unit directories and lists each unit with
                its extension's state, then the unit files it refused and why.
                With --verify, checks the files here, as searchlightd would load them (as root: the system
                rules); searchlightd need not run. Exits with status 1 when a file has a problem.
                """
        ),
        run: { args, context in
            let files = args.values("verify")
            if files.isEmpty {
                try await UnitsCommand.list(context)
            } else {
                try UnitVerifier.verify(files, json: context.json)
            }
        }
    )
}

/// Renders `admin.units` and the extension rows of `admin.status`.
enum UnitsCommand {
    static func list(_ context: CommandContext) async throws {
        let answer = try await context.admin(Method.adminUnits)
        if context.json {
            Console.out(answer)
            return
        }
        let directories = (answer["directories"]?.arrayValue ?? []).compactMap(\.stringValue)
        let units = answer["units"]?.arrayValue ?? []
        let places = directories.isEmpty ? "(no unit directories)" : directories.joined(separator: ", ")
        if units.isEmpty {
            Console.out("no extension units in \(places)")
        } else {
            Console.out("units from \(places)")
            Console.out("")
            table(units).print()
        }
        let problems = answer["problems"]?.arrayValue ?? []
        if !problems.isEmpty {
            Console.out("")
            Console.out("\(problems.count) unit file\(problems.count == 1 ? "" : "s") refused:")
            for problem in problems { Console.out(line(problem: problem)) }
        }
    }

    /// One row per extension unit; the shape is `admin.units`' `units[]` and `admin.status`' `extensions[]`.
    static func table(_ units: [JSONValue]) -> Table {
        var table = Table([.left, .left, .left, .right, .right, .right, .left])
        table.append(["LABEL", "BUNDLE", "STATE", "PID", "LAUNCHES", "CRASHES", "LAST EXIT"])
        for unit in units {
            table.append([
                unit["label"]?.stringValue ?? "?",
                unit["bundleIdentifier"]?.stringValue ?? "?",
                state(of: unit),
                unit["pid"]?.intValue.map(String.init) ?? "-",
                unit["launches"]?.intValue.map(String.init) ?? "-",
                unit["crashes"]?.intValue.map(String.init) ?? "-",
                unit["lastExit"]?.stringValue ?? "-",
            ])
        }
        return table
    }

    /// The state, with when a unit in backoff launches next.
    static func state(of unit: JSONValue) -> String {
        if unit["disabled"]?.boolValue == true { return "disabled" }
        let state = unit["state"]?.stringValue ?? "?"
        if let next = unit["nextLaunch"]?.stringValue.flatMap(ISO8601.parse) {
            return "\(state), next launch \(Format.relative(next))"
        }
        return state
    }

    /// `file: key: message`, or `file: message` when the problem is not about one key.
    static func line(problem: JSONValue) -> String {
        let parts = [problem["file"]?.stringValue ?? "?", problem["key"]?.stringValue, problem["message"]?.stringValue ?? "?"]
        return parts.compactMap { $0 }.joined(separator: ": ")
    }
}

extension Format {
    /// A moment relative to now: `in 8s`, `12s ago`, `now`.
    static func relative(_ date: Date, now: Date = Date()) -> String {
        let seconds = date.timeIntervalSince(now)
        if abs(seconds) < 0.5 { return "now" }
        return seconds > 0 ? "in \(duration(seconds))" : "\(duration(-seconds)) ago"
    }

    /// `HH:MM:SS` in local time.
    static func clock(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        localtime_r(&seconds, &parts)
        return String(format: "%02d:%02d:%02d", parts.tm_hour, parts.tm_min, parts.tm_sec)
    }
}
