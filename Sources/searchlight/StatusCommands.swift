import Foundation
import SearchlightKit

/// `status`, `check`, `indexing` and `version`: what the daemon holds and whether it is healthy.
enum StatusCommands {
    static let status = Command(
        spec: CommandSpec(
            name: "status", abstract: "show the daemon and its indexes (mdutil -s)", usage: "[BUNDLE] [--json]",
            positionals: [.optional("BUNDLE", "show only this app's indexes")],
            discussion: "--json prints admin.status's answer as one JSON object."
        ),
        run: { args, context in
            let bundle = args.positionals.first
            let answer = try await context.admin(AdminStatus(bundle: bundle))
            if context.json {
                Console.out(answer)
                return
            }
            printStatus(answer)
            let extensions = printExtensions(answer, bundle: bundle)
            let bundles = answer["bundles"]?.arrayValue ?? []
            if let bundle, bundles.isEmpty, extensions == 0 {
                throw CLIFailure("searchlightd has no index and no extension for \(bundle); check the name, or import items first")
            }
        }
    )

    /// `throttle normal|throttled|paused since … (reason; cpu 3.1 % io 0.4 % memory 0 % from psi)`;
    /// nil for daemons that do not report it.
    static func throttleLine(_ t: JSONValue?) -> String? {
        guard let t, let state = t["state"]?.stringValue else { return nil }
        var line = "throttle \(state)"
        if let since = t["since"]?.stringValue { line += " since \(since)" }
        var detail: [String] = []
        if let reason = t["reason"]?.stringValue { detail.append(reason) }
        if let source = t["source"]?.stringValue {
            let figures = ["cpu", "io", "memory"].map { k in "\(k) \(t[k]?.doubleValue.map { String(format: "%.1f", $0) } ?? "-") %" }
            detail.append(figures.joined(separator: " ") + " from \(source)")
        }
        if !detail.isEmpty { line += " (" + detail.joined(separator: "; ") + ")" }
        return line
    }

    /// `power on battery at 23 % (below 50 %): background work deferred`, `power on AC power`;
    /// nil for daemons that do not report it.
    static func powerLine(_ p: JSONValue?) -> String? {
        guard let p, let state = p["state"]?.stringValue, let reason = p["reason"]?.stringValue else { return nil }
        return "power " + reason + (state == "deferred" ? ": background work deferred" : "")
    }

    /// `stale items: 3 reported by the desktop (file gone): 2 reindex requested, 1 deleted, 0 kept`;
    /// nil until the desktop reported one (or for daemons that do not count them).
    static func staleItemsLine(_ s: JSONValue?) -> String? {
        guard let s, let reported = s["reported"]?.intValue, reported > 0 else { return nil }
        let n = { (k: String) in s[k]?.intValue ?? 0 }
        return "stale items: \(reported) reported by the desktop (file gone): \(n("reindexRequested")) reindex requested, \(n("deleted")) deleted, \(n("kept")) kept"
    }

    static func printStatus(_ answer: JSONValue) {
        let uptime = answer["uptimeSeconds"]?.doubleValue.map(Format.duration) ?? "-"
        Console.out("searchlightd \(answer["version"]?.stringValue ?? "?")  mode \(answer["mode"]?.stringValue ?? "?")  pid \(answer["pid"]?.intValue ?? 0)  up \(uptime)")
        Console.out("socket \(answer["socket"]?.stringValue ?? "-")")
        Console.out("state  \(answer["stateDirectory"]?.stringValue ?? "-")")
        if let line = throttleLine(answer["throttle"]) { Console.out(line) }
        if let line = powerLine(answer["power"]) { Console.out(line) }
        for line in MaintenanceOutput.statusLines(answer["maintenance"]) { Console.out(line) }
        if let line = semanticLine(answer["semantic"]) { Console.out(line) }
        if let line = staleItemsLine(answer["staleItems"]) { Console.out(line) }
        let bundles = answer["bundles"]?.arrayValue ?? []
        guard !bundles.isEmpty else {
            Console.out("no indexes yet")
            return
        }
        Console.out("")
        var table = Table([.left, .left, .left, .right, .right, .right])
        table.append(["BUNDLE", "INDEX", "STATE", "ITEMS", "SIZE", "VECTORS"])
        var notes: [String] = []
        for b in bundles {
            let name = b["bundle"]?.stringValue ?? "?"
            let off = b["indexingEnabled"]?.boolValue == false ? ", indexing off" : ""
            let indexes = b["indexes"]?.arrayValue ?? []
            if indexes.isEmpty { table.append([name, "-", "empty" + off, "0", "-", "-"]) }
            for index in indexes {
                table.append([
                    name, Format.indexName(index["name"]?.stringValue ?? ""),
                    (index["state"]?.stringValue ?? "?") + progress(index) + off,
                    index["items"]?.intValue.map(String.init) ?? "-",
                    index["bytes"]?.intValue.map(Format.bytes) ?? "-",
                    vectors(index),
                ])
                if let reason = index["reason"]?.stringValue {
                    notes.append("\(name) \(Format.indexName(index["name"]?.stringValue ?? "")) \(index["state"]?.stringValue ?? ""): \(reason)")
                }
                if let ranked = index["rankedIndex"], let pending = ranked["pending"]?.intValue, pending > 0 || ranked["lastError"] != nil {
                    // Queries answer exhaustively (slower, same results) for the items the ranked index lacks.
                    var note = "\(name) \(Format.indexName(index["name"]?.stringValue ?? "")): ranked index holds \(ranked["items"]?.intValue ?? 0) items, \(pending) waiting for its next build"
                    if let e = ranked["lastError"]?.stringValue { note += "; last build failed: \(e)" }
                    notes.append(note)
                }
                if let error = index["migrationError"]?.stringValue {
                    notes.append("\(name) \(Format.indexName(index["name"]?.stringValue ?? "")): last migration failed, the old index stays in service: \(error)")
                }
            }
        }
        table.print()
        // Why an index is migrating or recovering (the quarantined file, a failed refill, ...).
        if !notes.isEmpty { Console.out("") }
        for note in notes { Console.out(note) }
        printQuarantine(answer)
    }

    /// `semantic search: loaded (model /path)`, `semantic search: static table only (…reason)` or
    /// `semantic search: unavailable (reason)`; nil for daemons that do not report it.
    static func semanticLine(_ s: JSONValue?) -> String? {
        guard let s, let state = s["state"]?.stringValue else { return nil }
        let dir = s["modelDirectory"]?.stringValue ?? "-"
        let reason = s["reason"]?.stringValue.map { "; \($0)" } ?? ""
        switch state {
        case "loaded": return "semantic search: on, transformer loaded (model \(dir))"
        case "unloaded": return "semantic search: on, static table (transformer not loaded; model \(dir)\(reason))"
        default: return "semantic search: unavailable (model \(dir)\(reason))"
        }
    }

    /// `41210`, or `41210 (3000 refined)` once the transformer refined some.
    static func vectors(_ index: JSONValue) -> String {
        guard let n = index["vectors"]?.intValue else { return "-" }
        let refined = index["refined"]?.intValue ?? 0
        return refined > 0 ? "\(n) (\(refined) refined)" : "\(n)"
    }

    /// The damaged files set aside, whose names are hashes: the bundle and index they held.
    static func printQuarantine(_ answer: JSONValue) {
        let files = answer["quarantine"]?.arrayValue ?? []
        guard !files.isEmpty else { return }
        Console.out("")
        Console.out("quarantine (\(answer["stateDirectory"]?.stringValue ?? "<state>")/quarantine): \(files.count) damaged file\(files.count == 1 ? "" : "s")")
        var table = Table([.left, .left, .left, .left])
        for f in files {
            table.append([
                f["file"]?.stringValue ?? "?", f["bundle"]?.stringValue ?? "(unknown)",
                Format.indexName(f["index"]?.stringValue ?? ""),
                f["pinned"]?.boolValue == true ? "kept until its rows are restored" : "",
            ])
        }
        table.print()
    }

    /// ` 40/100` while the request filling a migrating or recovering index reports progress.
    static func progress(_ index: JSONValue) -> String {
        guard let p = index["progress"], let done = p["completed"]?.intValue else { return "" }
        return p["total"]?.intValue.map { " \(done)/\($0)" } ?? " \(done)"
    }

    /// The extension rows and the request counts that `admin.status` carries when the daemon
    /// hosts extensions (absent from older daemons: then nothing is printed). Returns how many
    /// extension rows were shown.
    @discardableResult
    static func printExtensions(_ answer: JSONValue, bundle: String?) -> Int {
        var extensions = answer["extensions"]?.arrayValue ?? []
        if let bundle { extensions = extensions.filter { $0["bundleIdentifier"]?.stringValue == bundle } }
        if answer["extensions"] != nil {
            Console.out("")
            if extensions.isEmpty {
                Console.out(bundle.map { "no index extension for \($0)" } ?? "no index extensions")
            } else {
                UnitsCommand.table(extensions).print()
                UnitsCommand.printExitNotes(extensions)
            }
        }
        if let requests = answer["reindexRequests"], requests.objectValue != nil {
            let count = { (key: String) in requests[key]?.intValue ?? 0 }
            Console.out("")
            Console.out("reindex requests: \(count("pending")) pending, \(count("running")) running, \(count("failed")) failed, \(count("poisoned")) poisoned identifiers")
        }
        return extensions.count
    }

    static let check = Command(
        spec: CommandSpec(
            name: "check", abstract: "verify the integrity of indexes", usage: "[BUNDLE] [--repair] [--json]",
            positionals: [.optional("BUNDLE", "check only this app's indexes (default: all)")],
            options: [.flag("repair", "repair what can be repaired (rebuild the full-text index, drop damaged items)")],
            discussion: "Exits with status 1 when a problem remains."
        ),
        run: { args, context in
            let answer = try await context.admin(AdminCheck(bundle: args.positionals.first, repair: args.flag("repair")))
            let indexes = answer["indexes"]?.arrayValue ?? []
            if context.json {
                Console.out(answer)
            } else if indexes.isEmpty {
                Console.out("no indexes to check")
            } else {
                for index in indexes { printCheck(index) }
            }
            if answer["ok"]?.boolValue != true {
                throw CLIFailure("problems found; run `searchlight check\(args.positionals.first.map { " " + $0 } ?? "") --repair`, or erase the bundle and import again")
            }
        }
    )

    static func printCheck(_ index: JSONValue) {
        let name = "\(index["bundle"]?.stringValue ?? "?") \(Format.indexName(index["index"]?.stringValue ?? ""))"
        let ok = index["ok"]?.boolValue == true
        Console.out("\(name): \(ok ? "ok" : "DAMAGED")")
        for problem in index["problems"]?.arrayValue ?? [] { Console.out("  problem: \(Format.value(problem, limit: 200))") }
        for fix in index["repaired"]?.arrayValue ?? [] { Console.out("  repaired: \(Format.value(fix, limit: 200))") }
    }

    static let indexing = Command(
        spec: CommandSpec(
            name: "indexing", abstract: "turn donations to an app's indexes on or off (mdutil -i)", usage: "on|off BUNDLE",
            positionals: [.required("on|off", "whether the app may donate items"), .required("BUNDLE", "the app")],
            discussion: "While indexing is off, donations fail with indexingUnsupported; queries keep answering."
        ),
        run: { args, context in
            let setting = args.positionals[0]
            guard setting == "on" || setting == "off" else { throw UsageError("say 'on' or 'off', not '\(setting)'") }
            let bundle = args.positionals[1]
            let answer = try await context.admin(AdminSetIndexing(bundle: bundle, enabled: setting == "on"))
            if context.json { Console.out(answer) } else { Console.out("indexing is \(setting) for \(bundle)") }
        }
    )

    static let owner = Command(
        spec: CommandSpec(
            name: "owner", abstract: "give a bundle an owner (a user name or uid)", usage: "BUNDLE USER|UID",
            positionals: [.required("BUNDLE", "the app"), .required("USER|UID", "the user who may read and write it from now on")],
            discussion: "A bundle written before owners were recorded on every write has none: only administrators may "
                + "use it until one is given. While an extension unit serves the bundle, the unit's user stays its owner."
        ),
        run: { args, context in
            let bundle = args.positionals[0], user = args.positionals[1]
            let uid: UInt32
            if let n = UInt32(user), n < UInt32.max {
                uid = n
            } else if let pw = getpwnam(user) {
                uid = pw.pointee.pw_uid
            } else {
                throw UsageError("no user named '\(user)'; give a user name or a numeric uid")
            }
            let answer = try await context.admin(AdminSetOwner(bundle: bundle, uid: UInt32(uid)))
            if context.json {
                Console.out(answer)
                return
            }
            Console.out("\(bundle) now belongs to uid \(uid)")
            if let label = answer["servedBy"]?.stringValue, let unitOwner = answer["unitOwnerUID"]?.intValue, unitOwner != Int(uid) {
                Console.out("while \(label) serves it, its unit's user (uid \(unitOwner)) is the owner that counts")
            }
        }
    )

    static let version = Command(
        spec: CommandSpec(
            name: "version", abstract: "show the versions of this CLI and of the daemon", usage: "[--json]",
            discussion: "The daemon's version is shown when it can be reached; its absence is not an error."
        ),
        run: { _, context in
            var daemon: String?
            var why = ""
            do {
                daemon = try await context.admin(AdminStatus())["version"]?.stringValue
            } catch let error as SearchlightError {
                why = error.code == .remoteConnection ? "not reachable at \(context.socket)" : error.message
            }
            if context.json {
                Console.out(["cli": .string(CLIVersion.string), "daemon": daemon.map(JSONValue.string) ?? .null])
                return
            }
            Console.out("searchlight \(CLIVersion.string)")
            Console.out("searchlightd " + (daemon ?? "unknown (\(why))"))
        }
    )
}
