import Foundation
import SearchlightKit

/// The version of this CLI (the daemon reports its own through `admin.status`).
enum CLIVersion {
    static let string = "0.1.0"
}

/// A command: what it accepts and what it does.
struct Command: Sendable {
    let spec: CommandSpec
    let run: @Sendable (ParsedArguments, CommandContext) async throws -> Void
}

/// The failure was already reported to the user; exit with this status.
struct ExitStatus: Error, Sendable {
    let code: Int32
    static let failure = ExitStatus(code: 1)
}

/// An operation failed for a reason found by the CLI itself (exit status 1).
struct CLIFailure: Error, Sendable {
    let message: String
    init(_ message: String) { self.message = message }
}

/// The exit statuses of DESIGN §7.
enum Exit {
    static let success: Int32 = 0
    static let failure: Int32 = 1
    static let usage: Int32 = 2
    static let unreachable: Int32 = 3
    static let timedOut: Int32 = 4
}

/// Options every command takes, before or after the command name.
struct GlobalOptions: Sendable {
    var socket: String?
    var json = false
    var help = false

    static let help: [(String, String)] = [
        ("--socket PATH", "the daemon's socket (default: $SEARCHLIGHT_SOCKET, else the user daemon's, else the system daemon's)"),
        ("--json", "print machine-readable JSON"),
        ("-h, --help", "show help for the command"),
    ]

    /// Takes the global options out of `arguments`, wherever they stand (up to a `--`).
    static func extract(from arguments: [String]) throws(UsageError) -> (GlobalOptions, [String]) {
        var options = GlobalOptions()
        var rest: [String] = []
        var i = 0
        while i < arguments.count {
            let arg = arguments[i]
            i += 1
            switch arg {
            case "--":
                rest += arguments[(i - 1)...]
                return (options, rest)
            case "--json": options.json = true
            case "-h", "--help": options.help = true
            case "--socket":
                guard i < arguments.count, !ArgumentParser.isOption(arguments[i]) else {
                    throw UsageError("--socket needs a value (PATH)")
                }
                options.socket = arguments[i]
                i += 1
            default:
                if arg.hasPrefix("--socket=") {
                    options.socket = String(arg.dropFirst("--socket=".count))
                } else {
                    rest.append(arg)
                }
            }
        }
        return (options, rest)
    }
}

/// What a running command needs: where the daemon is and how to print.
struct CommandContext: Sendable {
    let socket: String
    let json: Bool

    /// An admin connection; `onNotification` receives what the daemon sends besides answers
    /// (`$/progress` while a reindex is awaited, `admin.event` after `admin.monitor`).
    func adminConnection(onNotification: SearchlightConnection.NotificationHandler? = nil) -> SearchlightConnection {
        SearchlightConnection(role: .admin, socketPath: socket, onNotification: onNotification)
    }

    func index(_ bundle: String, name: String = "") -> SearchableIndex {
        SearchableIndex(name: name, bundleIdentifier: bundle, socketPath: socket)
    }

    /// Sends a typed request (SearchlightWire's messages) on an admin connection and returns its
    /// answer; `onNotification` receives what the daemon sends meanwhile (progress).
    func admin<R: WireRequest>(_ request: R, onNotification: SearchlightConnection.NotificationHandler? = nil) async throws -> R.Response {
        let connection = adminConnection(onNotification: onNotification)
        do {
            let answer = try await connection.send(request)
            await connection.close()
            return answer
        } catch {
            await connection.close()
            throw error
        }
    }

    /// An admin method whose answer is a report read as JSON.
    func admin<R: WireRequest>(_ request: R, onNotification: SearchlightConnection.NotificationHandler? = nil) async throws -> JSONValue
        where R.Response == JSONResponse {
        let response: JSONResponse = try await admin(request, onNotification: onNotification)
        return response.result
    }
}

enum CLI {
    static let program = "searchlight"

    static let commands: [Command] = [
        StatusCommands.status, ReindexCommands.reindex, QueryCommands.query, QueryCommands.search,
        ImportCommand.command, DeleteCommands.delete, DeleteCommands.erase, StatusCommands.check,
        ReindexCommands.simulate, ReindexCommands.units, ReindexCommands.requests, ReindexCommands.monitor,
        StatusCommands.indexing, StatusCommands.owner, DesktopCommands.desktop, DesktopCommands.register, DesktopCommands.open,
        ActivityCommands.activity, StatusCommands.version,
    ]

    static func command(named name: String) -> Command? { commands.first { $0.spec.name == name } }

    /// Runs a whole invocation and returns the exit status.
    static func main(_ argv: [String]) async -> Int32 {
        var arguments = Array(argv.dropFirst())
        let invokedAs = argv.first.map { ($0 as NSString).lastPathComponent } ?? program
        if invokedAs == "mdutil" {
            do {
                arguments = try Mdutil.translate(arguments)
            } catch {
                Console.error(error.message)
                Console.errorLine(Mdutil.usage)
                return Exit.usage
            }
        }
        let global: GlobalOptions
        do {
            (global, arguments) = try GlobalOptions.extract(from: arguments)
        } catch {
            Console.error(error.message)
            Console.errorLine(overview)
            return Exit.usage
        }
        guard let name = arguments.first else {
            if global.help { Console.out(overview); return Exit.success }
            Console.error("missing command")
            Console.errorLine(overview)
            return Exit.usage
        }
        if name == "help" {
            return help(topic: arguments.dropFirst().first)
        }
        guard let command = command(named: name) else {
            Console.error("unknown command '\(name)'; run '\(program) --help' for the list of commands")
            return Exit.usage
        }
        if global.help {
            Console.out(command.spec.helpText(program: program))
            return Exit.success
        }
        return await run(command, Array(arguments.dropFirst()), global: global)
    }

    static func run(_ command: Command, _ arguments: [String], global: GlobalOptions) async -> Int32 {
        let context = CommandContext(socket: global.socket ?? DefaultPaths.clientSocket(), json: global.json)
        do {
            let parsed = try ArgumentParser.parse(arguments, for: command.spec)
            try await command.run(parsed, context)
            return Exit.success
        } catch let error as UsageError {
            Console.error(error.message)
            Console.errorLine(command.spec.usageLine(program: program))
            Console.errorLine("Run '\(program) \(command.spec.name) --help' for more.")
            return Exit.usage
        } catch {
            return report(error)
        }
    }

    /// Prints an error and maps it to an exit status.
    static func report(_ error: any Error) -> Int32 {
        switch error {
        case let status as ExitStatus:
            return status.code
        case let failure as CLIFailure:
            Console.error(failure.message)
            return Exit.failure
        case let timeout as DeadlineExceeded:
            Console.error(timeout.message)
            return Exit.timedOut
        case let e as SearchlightError:
            switch e.code {
            case .remoteConnection?:
                Console.error(e.message)
                return Exit.unreachable
            case .requestTimedOut?:
                Console.error(e.message + " (requestTimedOut)")
                return Exit.timedOut
            default:
                Console.error(e.message + " (\(e.code?.name ?? "error \(e.rawCode)"))")
                return Exit.failure
            }
        default:
            Console.error("\(error)")
            return Exit.failure
        }
    }

    static func help(topic: String?) -> Int32 {
        guard let topic else { Console.out(overview); return Exit.success }
        guard let command = command(named: topic) else {
            Console.error("no help for '\(topic)': there is no such command; run '\(program) --help' for the list")
            return Exit.usage
        }
        Console.out(command.spec.helpText(program: program))
        return Exit.success
    }

    static var overview: String {
        var lines = [
            "\(program): inspect and drive searchlightd, the private search-index service", "",
            "Usage: \(program) [--socket PATH] [--json] COMMAND [ARGUMENTS]", "", "Commands:",
        ]
        lines += CommandSpec.rows(commands.map { ($0.spec.name, $0.spec.abstract) })
        lines += ["", "Global options:"]
        lines += CommandSpec.rows(GlobalOptions.help)
        lines += [
            "", "Run '\(program) COMMAND --help' for a command's arguments.",
            "Exit status: 0 success, 1 the operation failed, 2 usage, 3 daemon unreachable, 4 timed out.",
        ]
        return lines.joined(separator: "\n")
    }
}
