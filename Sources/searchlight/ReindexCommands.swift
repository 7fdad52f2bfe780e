import Foundation
import SearchlightKit

/// The commands that drive index extensions: `reindex` and `simulate` here; `units`,
/// `requests` and `monitor` in their own files. They forward to the admin methods of DESIGN §4.
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
                .value("timeout", "S", "give up waiting after S seconds (exit status 4); the request stays journaled"),
                .flag("background", "treat it as background work: throttled under load like the automatic triggers"),
            ],
            discussion: """
                The request is journaled by searchlightd before it is sent, so it survives a restart of
                the daemon or of the extension. Without --no-wait the command waits for the extension's
                acknowledgement and shows its progress. A negative acknowledgement, a crash or a hang of
                the extension exits with status 1 (the request stays journaled and is retried later);
                --timeout elapsing exits with status 4. Interrupting the wait leaves the request queued.
                """
        ),
        run: { args, context in try await ReindexRun(args).run(context) }
    )

    static let simulate = Command(
        spec: CommandSpec(
            name: "simulate", abstract: "fire a trigger by hand: migration, corruption or idle",
            usage: "migration|corruption|idle [BUNDLE] [--wait | --no-wait]",
            positionals: [
                .required("EVENT", "migration, corruption or idle"),
                .optional("BUNDLE", "the app it concerns (default: all)"),
            ],
            options: [
                .flag("wait", "idle: wait for the run to end, showing its progress (the default)"),
                .flag("no-wait", "idle: return once searchlightd accepted the run; it goes on in the background"),
            ],
            discussion: """
                idle runs the idle maintenance now, whatever the load: purge expired items, ask for the
                refresh of items expiring within a day, scrub, optimize, refine the semantic vectors,
                checkpoint. By default the command waits until the run ends, however long it takes
                (refinement of a large index takes minutes), shows which index it is on and the
                refinement's progress, then prints the summary. Interrupting the wait (Ctrl-C) leaves the
                run going in searchlightd; `searchlight status` shows "maintenance running" until it ends,
                and `searchlight monitor` its maintenance.finished event.
                migration and corruption start the rebuild and return; follow it with `searchlight status`.
                """
        ),
        run: { args, context in
            let event = args.positionals[0]
            guard let kind = AdminSimulate.Event(rawValue: event) else {
                throw UsageError("the event must be migration, corruption or idle, not '\(event)'")
            }
            if args.flag("wait"), args.flag("no-wait") { throw UsageError("give --wait or --no-wait, not both") }
            if kind != .idle, args.flag("wait") || args.flag("no-wait") {
                throw UsageError("--wait and --no-wait are for idle; \(event) returns once the rebuild started (follow it with `searchlight status`)")
            }
            let bundle = args.positionals.count > 1 ? args.positionals[1] : nil
            if kind == .idle {
                try await SimulateIdleRun(bundle: bundle, wait: !args.flag("no-wait")).run(context)
                return
            }
            let answer = try await context.admin(AdminSimulate(event: kind, bundle: bundle))
            if context.json || answer.objectValue?.isEmpty == false {
                Console.out(answer)
            } else {
                Console.out("simulated \(event)")
            }
        }
    )
}

/// One `searchlight reindex` invocation: checks the arguments, sends `admin.reindex` (in parts of
/// at most `Limits.maxIdentifiersPerCall` identifiers), shows progress and reports the answer.
struct ReindexRun {
    enum Selection {
        case all
        case identifiers([String])
    }

    /// Extra time the CLI waits past `--timeout` for the daemon's own requestTimedOut answer, which
    /// says more than a client-side deadline can.
    static let answerGrace: Double = 5

    let args: ParsedArguments
    var target: String { args.positionals[0] }
    var wait: Bool { !args.flag("no-wait") }

    init(_ args: ParsedArguments) { self.args = args }

    func run(_ context: CommandContext) async throws {
        let selection = try self.selection()
        let timeout = try args.seconds("timeout")
        if !wait, timeout != nil {
            throw UsageError("--timeout limits the wait for the acknowledgement; it does nothing with --no-wait")
        }
        let deadline = timeout.map { ContinuousClock.now + .seconds($0) }
        let parts = Self.parts(of: selection)
        for (number, part) in parts.enumerated() {
            // What is left of --timeout, to the millisecond (the first part gets all of it).
            let remaining = deadline.map { deadline in
                let seconds = ContinuousClock.now.duration(to: deadline).seconds
                return max((seconds * 1000).rounded() / 1000, 0.001)
            }
            let suffix = parts.count > 1 ? " (part \(number + 1) of \(parts.count))" : ""
            let answer = try await send(request(part, timeout: remaining), context, timeout: remaining, suffix: suffix)
            report(answer, context, suffix: suffix)
        }
    }

    func selection() throws -> Selection {
        let given = [args.flag("all"), !args.values("identifiers").isEmpty, args.value("identifiers-from") != nil]
        switch given.filter({ $0 }).count {
        case 0: throw UsageError("say what to rebuild: --all, --identifiers or --identifiers-from")
        case 1: break
        default: throw UsageError("give only one of --all, --identifiers and --identifiers-from")
        }
        if args.flag("all") { return .all }
        if let file = args.value("identifiers-from") { return .identifiers(try Self.readIdentifiers(file)) }
        return .identifiers(args.values("identifiers"))
    }

    /// The `admin.reindex` request of one part.
    func request(_ part: Selection, timeout: Double?) -> AdminReindex {
        let selection: AdminReindex.Selection = switch part {
        case .all: .all
        case .identifiers(let ids): .identifiers(ids)
        }
        return AdminReindex(target: target, selection: selection, index: args.value("index") ?? "",
            background: args.flag("background"), wait: wait, timeout: timeout)
    }

    /// A long identifier list goes in several requests: one call may carry at most
    /// `maxIdentifiersPerCall` identifiers (DESIGN §4 limits).
    static func parts(of selection: Selection) -> [Selection] {
        guard case .identifiers(let ids) = selection else { return [selection] }
        let size = Limits().maxIdentifiersPerCall
        return stride(from: 0, to: ids.count, by: size).map { .identifiers(Array(ids[$0..<min($0 + size, ids.count)])) }
    }

    /// Sends one request; while waiting, shows the `$/progress` the daemon relays.
    func send(_ request: AdminReindex, _ context: CommandContext, timeout: Double?, suffix: String) async throws -> JSONValue {
        guard wait else { return try await context.admin(request) }
        let progress = ReindexProgress(label: "reindex \(target)\(suffix)")
        defer { progress.finish() }
        let call: @Sendable () async throws -> JSONValue = {
            try await context.admin(request) { method, params in
                guard method == Method.progress else { return }
                if let message = params["message"]?.stringValue { progress.note("\(target): \(message)") }
                // Counts out of range (relayed from an extension by an older daemon) are dropped, not drawn.
                guard let completed = try? NumericParameter.integer(params["completed"], field: "completed", in: 0...NumericParameter.maxCount)
                else { return }
                let total = try? NumericParameter.integer(params["total"], field: "total", in: 0...NumericParameter.maxCount)
                progress.update(completed: completed, total: total)
            }
        }
        let outcome: JSONValue?
        do {
            outcome = try await Interrupt.race { try await withDeadline(timeout.map { $0 + Self.answerGrace }, "reindex", call) }
        } catch is DeadlineExceeded {
            throw DeadlineExceeded(message: "no acknowledgement of the reindex of \(target) within \(Format.duration(timeout ?? 0)), and no answer from searchlightd; the request stays journaled (see `searchlight requests`)")
        }
        guard let answer = outcome else {
            progress.finish()
            Console.error("stopped waiting; the reindex request for \(target) stays journaled and will still be sent (see `searchlight requests`)")
            throw ExitStatus(code: 130)
        }
        return answer
    }

    func report(_ answer: JSONValue, _ context: CommandContext, suffix: String) {
        if context.json {
            Console.out(answer)
            return
        }
        let label = answer["label"]?.stringValue ?? target
        let request = answer["requestId"].map { Format.value($0) } ?? "?"
        if wait {
            let elapsed = answer["elapsed"]?.doubleValue.map { String(format: "%.2f s", $0) } ?? "?"
            Console.out("reindex of \(label)\(suffix) acknowledged in \(elapsed)")
        } else if let message = answer["message"]?.stringValue {
            Console.out("reindex of \(label)\(suffix) queued: \(message)")
        } else if let into = answer["coalescedInto"], !into.isNull {
            Console.out("reindex of \(label)\(suffix) queued: merged into pending request \(Format.value(into))")
        } else {
            Console.out("reindex of \(label)\(suffix) queued as request \(request)")
        }
    }

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
}
