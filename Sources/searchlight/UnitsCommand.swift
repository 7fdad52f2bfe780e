import Foundation
import SearchlightKit

extension ReindexCommands {
    static let units = Command(
        spec: CommandSpec(
            name: "units", abstract: "list the extension units, restart an extension, or check unit files",
            usage: "[restart LABEL] [--verify FILE...] [--json]",
            positionals: [
                .optional("restart", "restart the extension LABEL: stop its running copy gracefully and launch it again"),
                .optional("LABEL", "the extension to restart"),
            ],
            options: [.upToNextOption("verify", "FILE", "check these unit files without the daemon, and report every error")],
            discussion: """
                Without arguments, asks searchlightd to reload the unit directories and lists each unit with
                its extension's state, then the unit files it refused and why.
                `units restart LABEL` (launchctl's kickstart -k) is for after a rebuild: the running copy is
                asked to exit (SIGKILL after its ExitTimeOut) and launched again at once; this is not a
                crash, so no backoff follows, and a request it was serving is resent, not failed.
                With --verify, checks the files here, as searchlightd would load them (as root: the system
                rules); searchlightd need not run. Exits with status 1 when a file has a problem.
                """
        ),
        run: { args, context in
            let files = args.values("verify")
            switch (args.positionals.first, files.isEmpty) {
            case (nil, true):
                try await UnitsCommand.list(context)
            case (nil, false):
                try UnitVerifier.verify(files, json: context.json)
            case ("restart"?, true):
                guard args.positionals.count == 2 else { throw UsageError("say which extension: searchlight units restart LABEL") }
                try await UnitsCommand.restart(args.positionals[1], context)
            case (let action?, _):
                throw UsageError(action == "restart" ? "--verify does not go with restart" : "unknown units action '\(action)'; did you mean 'restart LABEL'?")
            }
        }
    )
}

/// Renders `admin.units` and the extension rows of `admin.status`.
enum UnitsCommand {
    static func list(_ context: CommandContext) async throws {
        let answer = try await context.admin(AdminUnits())
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
            printExitNotes(units)
        }
        let problems = answer["problems"]?.arrayValue ?? []
        if !problems.isEmpty {
            Console.out("")
            Console.out("\(problems.count) unit file\(problems.count == 1 ? "" : "s") refused:")
            for problem in problems { Console.out(line(problem: problem)) }
        }
    }

    static func restart(_ label: String, _ context: CommandContext) async throws {
        let answer = try await context.admin(AdminRestartExtension(label: label))
        if context.json {
            Console.out(answer)
            return
        }
        let pid = answer["pid"].map { Format.value($0) } ?? "?"
        if let previous = answer["previousPid"] {
            Console.out("\(label) restarted: pid \(Format.value(previous)) stopped, pid \(pid) running")
        } else {
            Console.out("\(label) was not running; started as pid \(pid)")
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

    /// Under the table: for each extension whose last run ended with stderr lines kept, how it
    /// ended and those lines (what an author needs after a crash, without digging in the log).
    static func printExitNotes(_ units: [JSONValue]) {
        for unit in units {
            guard let lines = unit["lastStderr"]?.arrayValue?.compactMap(\.stringValue), !lines.isEmpty else { continue }
            Console.out("")
            let at = unit["lastExitAt"]?.stringValue.flatMap(ISO8601.parse).map { " (\(Format.relative($0)))" } ?? ""
            Console.out("\(unit["label"]?.stringValue ?? "?") last exited\(at): \(unit["lastExit"]?.stringValue ?? "?"); its last lines on stderr:")
            for line in lines { Console.out("  \(Format.clip(line, 200))") }
        }
    }

    /// The state, with when a unit in backoff launches next.
    static func state(of unit: JSONValue) -> String {
        if unit["disabled"]?.boolValue == true { return "disabled" }
        let state = unit["state"]?.stringValue ?? "?"
        if let next = unit["nextLaunch"]?.stringValue.flatMap(ISO8601.parse) {
            let streak = unit["crashStreak"]?.intValue.map { $0 == 1 ? " after 1 crash" : " after \($0) crashes in a row" } ?? ""
            return "\(state)\(streak), next launch \(Format.relative(next))"
        }
        if unit["programChanged"]?.boolValue == true {
            return "\(state) (program rebuilt since launch: `searchlight units restart \(unit["label"]?.stringValue ?? "LABEL")`)"
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
