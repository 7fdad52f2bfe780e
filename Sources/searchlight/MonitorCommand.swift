import Foundation
import SearchlightKit

extension ReindexCommands {
    static let monitor = Command(
        spec: CommandSpec(
            name: "monitor", abstract: "follow the daemon's events as they happen", usage: "[--json]",
            discussion: """
                Prints one line per event: the local time, the event and its fields as key=value
                (requests queued, sent, acknowledged, failed and retried; extensions launched, exited,
                attached and detached; units reloaded). --json prints each event as one JSON object per line.
                Runs until interrupted (exit status 0) or until searchlightd goes away (exit status 3).
                """
        ),
        run: { _, context in try await MonitorCommand.run(context) }
    )
}

/// `searchlight monitor`. It talks over a bare `RPCConnection` rather than `SearchlightConnection`,
/// because it must notice when the daemon goes away instead of reconnecting silently and missing
/// the events in between.
enum MonitorCommand {
    static func run(_ context: CommandContext) async throws {
        let connection: RPCConnection
        do {
            connection = try RPCConnection.connect(path: context.socket)
        } catch {
            throw SearchlightError(.remoteConnection,
                "cannot reach searchlightd at \(context.socket) (\(error)); start it (`make run`, or `systemctl --user start searchlightd`) or set SEARCHLIGHT_SOCKET")
        }
        let (closed, closing) = AsyncStream.makeStream(of: RPCConnection.CloseReason.self)
        let printer = EventPrinter(json: context.json)
        connection.start(name: "searchlight-monitor", onMessage: { rpc, message in
            switch message {
            case .notification(let method, let params) where method == Method.adminEvent:
                printer.print(params)
            case .request(let id, let method, _):
                rpc.reply(to: id, .failure(SearchlightError(.methodNotFound, "searchlight monitor serves no requests (\(method))")))
            default:
                break
            }
        }, onClose: { _, reason in
            closing.yield(reason)
            closing.finish()
        })
        defer { connection.close() }
        _ = try await connection.call(Initialize.method, Initialize(role: .admin).params)
        _ = try await connection.call(AdminMonitor.method, AdminMonitor().params)
        let socket = context.socket
        let ended = try await Interrupt.race { () -> RPCConnection.CloseReason in
            // On stderr, so stdout carries only events; it also tells a script the stream has
            // begun. Inside the race, so that Ctrl-C is handled from the moment it is offered
            // (printed before, a SIGINT right after it killed the CLI: SignalTests, 1 run in 4).
            Console.errorLine("following the events of searchlightd at \(socket); press Ctrl-C to stop")
            for await reason in closed { return reason }
            return .closedLocally
        }
        guard let reason = ended else { return }  // interrupted: the normal way to stop
        Console.error("searchlightd went away (\(reason)); no more events. Start it again and rerun `searchlight monitor`")
        throw ExitStatus(code: Exit.unreachable)
    }
}

/// Writes each `admin.event` as it arrives (on the connection's reader thread, one at a time),
/// straight to the stdout descriptor so that a pipe sees every line at once.
struct EventPrinter: Sendable {
    let json: Bool

    /// Fields shown first, in this order; the rest follow by name, `message` last.
    static let leading = ["label", "bundle", "index", "requestId", "pid", "status", "completed", "total", "attempts"]

    func print(_ event: JSONValue) {
        let line = json ? event.jsonString : Self.line(event)
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    /// `HH:MM:SS event key=value …` with local time.
    static func line(_ event: JSONValue) -> String {
        let fields = event.objectValue ?? [:]
        let time = fields["time"]?.stringValue.flatMap(ISO8601.parse) ?? Date()
        var parts = [Format.clock(time), fields["event"]?.stringValue ?? "event"]
        let rest = fields.keys.filter { !["time", "event", "message"].contains($0) && !leading.contains($0) }.sorted()
        for key in leading + rest + ["message"] {
            guard let value = fields[key], !value.isNull else { continue }
            parts.append("\(key)=\(text(value))")
        }
        return parts.joined(separator: " ")
    }

    /// A value that stays one token: plain when it can, else quoted as JSON. Fractions (elapsed
    /// seconds) are shown to the millisecond.
    static func text(_ value: JSONValue) -> String {
        if let n = value.doubleValue, n.isFinite, n.rounded() != n {
            return (n * 1000).rounded() / 1000 == n ? value.jsonString : String(format: "%.3f", n)
        }
        guard let s = value.stringValue else { return value.jsonString }
        let plain = !s.isEmpty && s.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value != 0x7F && !"\"=\\".unicodeScalars.contains($0) }
        return plain ? s : value.jsonString
    }
}
