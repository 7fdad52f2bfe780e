import Foundation
import SearchlightDesktop
import SearchlightKit

/// `desktop`, `register` and `open`: the desktop's search (DESIGN §12, Docs/Desktop.md). The
/// settings of a bundle are its owner's: these connect as that bundle's app (root may act on any).
enum DesktopCommands {
    static let desktop = Command(
        spec: CommandSpec(
            name: "desktop", abstract: "hide an app's items from the desktop's search, or show them again",
            usage: "hide|show BUNDLE | status [BUNDLE] [--json]",
            positionals: [
                .required("hide|show|status", "what to do"),
                .optional("BUNDLE", "the app (status without BUNDLE lists every setting, as admin)"),
            ],
            discussion: """
                A hidden app's items never appear in GNOME Shell's or KRunner's search (searchlight-desktop); the app's
                own searches and `searchlight search` are not affected. Only the app's owner (or root) may change it.
                """
        ),
        run: { args, context in
            let action = args.positionals[0]
            let bundle = args.positionals.count > 1 ? args.positionals[1] : nil
            switch action {
            case "hide", "show":
                guard let bundle else { throw UsageError("say which app: searchlight desktop \(action) BUNDLE") }
                let answer = try await appCall(bundle, DesktopSetHidden(hidden: action == "hide"), context)
                if context.json { Console.out(answer.result); return }
                Console.out(action == "hide"
                    ? "\(bundle) is hidden from the desktop's search (its own searches still work)"
                    : "\(bundle) appears in the desktop's search")
            case "status":
                let answer: DesktopSettings.Response = if let bundle {
                    try await appCall(bundle, DesktopSettings(), context)
                } else {
                    try await context.admin(DesktopSettings())
                }
                if context.json { Console.out(answer.result); return }
                let bundles = answer.bundles
                if bundles.isEmpty { Console.out("every app appears in the desktop's search; none declares how its items open"); return }
                var table = Table([.left])
                table.append(["BUNDLE", "DESKTOP SEARCH", "OPENS WITH"])
                for b in bundles {
                    let opens = b.opening.map { "\($0.openWith) (\($0.source.rawValue))" } ?? "contentURL"
                    table.append([b.bundle, b.hidden ? "hidden" : "shown", opens])
                }
                table.print()
            default:
                throw UsageError("say hide, show or status, not '\(action)'")
            }
        }
    )

    static let register = Command(
        spec: CommandSpec(
            name: "register", abstract: "declare the desktop file an app's items open with (apps without an extension)",
            usage: "BUNDLE (--open-with DESKTOP_ID [--continues-search] | --no-open-with) [--json]",
            positionals: [.required("BUNDLE", "the app")],
            options: [
                .value("open-with", "DESKTOP_ID", "the app's desktop-file id, e.g. org.example.Notes.desktop"),
                .flag("no-open-with", "remove the registration (items open their contentURL)"),
                .flag("continues-search", "the app also continues the desktop's searches (launched with searchlight-query:TEXT)"),
            ],
            discussion: """
                Opening one of the app's items from the desktop's search launches that desktop file with the item's
                searchlight-item:BUNDLE/IDENTIFIER URI (Docs/Desktop.md). An extension declares it in its unit instead
                (key OpenWith), which takes precedence. With --continues-search, GNOME Shell's "search in the app"
                launches it with searchlight-query:TEXT when its result comes first (unit key ContinuesSearch).
                """
        ),
        run: { args, context in
            let bundle = args.positionals[0]
            let id = args.value("open-with")
            if args.flag("continues-search"), id == nil {
                throw UsageError("--continues-search needs --open-with DESKTOP_ID: the search continues in that app")
            }
            guard (id != nil) != args.flag("no-open-with") else {
                throw UsageError("give --open-with DESKTOP_ID, or --no-open-with to remove the registration")
            }
            if let id, !Names.validDesktopFileID(id) {
                throw UsageError("'\(id)' is not a desktop-file id: the name of the app's .desktop file, e.g. org.example.Notes.desktop (no path)")
            }
            let answer = try await appCall(bundle, DesktopRegister(openWith: id, continuesSearch: args.flag("continues-search")), context)
            if context.json { Console.out(answer.result); return }
            Console.out(id.map { "\(bundle)'s items open with \($0)" + (answer.continuesSearch ? ", which also continues searches" : "") }
                        ?? "\(bundle)'s items open their contentURL")
            if let declared = answer.unitOpenWith {
                Console.out("while \(answer.servedBy ?? "its unit") serves it, the unit's OpenWith (\(declared)) is the one used")
            }
        }
    )

    static let open = Command(
        spec: CommandSpec(
            name: "open", abstract: "open an item in its app, as the desktop's search does",
            usage: "BUNDLE IDENTIFIER [--activity] [--dry-run] [--json]",
            positionals: [.required("BUNDLE", "the app"), .required("IDENTIFIER", "the item's uniqueIdentifier")],
            options: [.flag("dry-run", "say what would be run, run nothing, record nothing"),
                      .flag("yes", "open an item of another user's bundle (root): run what that user declared, as you"),
                      .flag("activity", "IDENTIFIER is a user activity's persistent identifier (the default when no item has it)")],
            discussion: """
                Launches the app's desktop file (unit key OpenWith, or `searchlight register`) with the item's
                searchlight-item:BUNDLE/IDENTIFIER URI, else opens its contentURL with the default handler (gio open,
                else xdg-open), and records the engagement (query.engaged) so the item ranks higher.
                An item of a bundle another user owns is not opened: what would run is printed, and --yes runs it
                (as you: check it first). A desktop file the bundle's unit declares is an administrator's and exempt.
                A user activity (no item with that identifier, or --activity) opens with its
                searchlight-activity:BUNDLE/ID URI, else its webpageURL; its engagement ranks it higher in the history.
                """
        ),
        run: { args, context in
            let bundle = args.positionals[0], identifier = args.positionals[1]
            guard Names.validBundle(bundle) else { throw UsageError("'\(bundle)' is not a bundle identifier (e.g. com.example.notes)") }
            let connection = SearchlightConnection(role: .app(bundleIdentifier: bundle), socketPath: context.socket)
            do {
                try await openItem(bundle, identifier, on: connection, dryRun: args.flag("dry-run"), yes: args.flag("yes"),
                                   activity: args.flag("activity"), context)
                await connection.close()
            } catch {
                await connection.close()
                throw error
            }
        }
    )

    private static func openItem(_ bundle: String, _ identifier: String, on connection: SearchlightConnection, dryRun: Bool,
                                 yes: Bool, activity isActivity: Bool, _ context: CommandContext) async throws {
            var resolved = try await connection.send(DesktopResolve(identifier: identifier))
            let activity = SearchableItemActivity(bundleIdentifier: bundle, uniqueIdentifier: identifier)
            var uri: String?
            if isActivity || resolved.item == nil {
                let saved = try await connection.send(ActivityResolve(persistentIdentifier: identifier))
                if saved.item != nil || isActivity {
                    resolved = saved
                    uri = UserActivity.uriScheme + ":" + activity.resultID
                }
            }
            guard resolved.item != nil else {
                throw CLIFailure("\(bundle) has no item \(identifier), nor a user activity of that persistent identifier (or it expired); `searchlight search \(bundle) TEXT` finds them")
            }
            let openWith = resolved.opening?.openWith
            let contentURL = resolved.contentURL
            var opener = ItemOpener()
            // --dry-run runs nothing, so it shows another user's item's plan without --yes.
            opener.allowOtherUsersItems = yes || dryRun
            let owner = resolved.ownerUID, fromUnit = resolved.opening?.source == .unit
            do {
                if dryRun {
                    let (action, note) = try opener.plan(activity, openWith: openWith, contentURL: contentURL, ownerUID: owner, fromUnit: fromUnit, uri: uri)
                    report(action, command: nil, note: note, context)
                    return
                }
                let opened = try opener.open(activity, openWith: openWith, contentURL: contentURL, ownerUID: owner, fromUnit: fromUnit, uri: uri)
                _ = try await connection.send(QueryEngaged(target: .identifier(identifier), interaction: .select, activity: uri != nil))
                report(opened.action, command: opened.command, note: opened.note, context)
            } catch let failure as ItemOpener.Failure {
                throw CLIFailure(failure.description)
            }
    }

    private static func report(_ action: ItemOpener.Action, command: [String]?, note: String?, _ context: CommandContext) {
        var o: [String: JSONValue] = [:]
        let line: String
        switch action {
        case .application(let id, let path, let uri):
            o = ["opensWith": .string(id), "desktopFile": .string(path), "uri": .string(uri)]
            line = "\(command == nil ? "would launch" : "launched") \(id) (\(path)) with \(uri)"
        case .contentURL(let url):
            o = ["contentURL": .string(url)]
            line = "\(command == nil ? "would open" : "opened") \(url) with the default handler"
        }
        if let command { o["command"] = .array(command.map(JSONValue.string)) }
        if let note { o["note"] = .string(note) }
        if context.json { Console.out(.object(o)); return }
        if let note { Console.errorLine("note: \(note); opening its contentURL instead") }
        Console.out(line)
    }

    /// One call on a connection as the bundle's app (its owner, or root).
    private static func appCall<R: WireRequest>(_ bundle: String, _ request: R, _ context: CommandContext) async throws -> R.Response {
        guard Names.validBundle(bundle) else { throw UsageError("'\(bundle)' is not a bundle identifier (e.g. com.example.notes)") }
        let connection = SearchlightConnection(role: .app(bundleIdentifier: bundle), socketPath: context.socket)
        do {
            let answer = try await connection.send(request)
            await connection.close()
            return answer
        } catch {
            await connection.close()
            throw error
        }
    }
}
