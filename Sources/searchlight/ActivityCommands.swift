import Foundation
import SearchlightKit

/// `activity save|list|delete BUNDLE`: an app's user activities (DESIGN §13) from the terminal, as
/// the app itself would write them (`UserActivity`): the command connects as an app of BUNDLE,
/// under the same rules as the app (its uid must own the bundle; root may not write a history into
/// a bundle another user owns, so none can be forged for them).
enum ActivityCommands {
    static let activity = Command(
        spec: CommandSpec(
            name: "activity", abstract: "save, list or delete an app's user activities, as the app would",
            usage: "save|list|delete BUNDLE [--type T --title TEXT [--id ID] [--keywords K...] [--url URL] [--related ID] [--expires S] [--current]] [--limit N] [--identifiers ID... | --all]",
            positionals: [.required("save|list|delete", "what to do"), .required("BUNDLE", "the app whose history it is")],
            options: [
                .value("type", "T", "save: the activity type, reverse DNS (com.example.notes.view)"),
                .value("title", "TEXT", "save: what the user sees and searches"),
                .value("id", "ID", "save: its persistent identifier (default: a new one, printed)"),
                .upToNextOption("keywords", "K", "save: words it is also found by"),
                .value("url", "URL", "save: its webpageURL (http or https): what opens when the app declares no OpenWith"),
                .value("related", "ID", "save: the item it shows (relatedUniqueIdentifier): shown once, as that item"),
                .value("expires", "S", "save: leaves the history after S seconds (default: the daemon's item default, 30 days)"),
                .flag("current", "save: as becomeCurrent() (counts as engagement); resigned when the command exits, like an app that quits"),
                .value("limit", "N", "list: at most N, most recently used first (default 100, at most 1000)"),
                .upToNextOption("identifiers", "ID", "delete: these persistent identifiers"),
                .flag("all", "delete: the whole history of the app"),
            ],
            discussion: """
                save keeps an activity in the app's searchable history (isEligibleForSearch); `searchlight search`
                and the desktop's search find it. The command speaks as an app of BUNDLE: your user must own the
                bundle (or claim a new name), as for donations.
                """
        ),
        run: { args, context in
            let action = args.positionals[0], bundle = args.positionals[1]
            guard Names.validBundle(bundle) else { throw UsageError("'\(bundle)' is not a bundle identifier (e.g. com.example.notes)") }
            let connection = SearchlightConnection(role: .app(bundleIdentifier: bundle), socketPath: context.socket)
            do {
                switch action {
                case "save": try await save(bundle, args, connection, context)
                case "list": try await list(bundle, args, connection, context)
                case "delete": try await delete(bundle, args, connection, context)
                default: throw UsageError("say 'save', 'list' or 'delete', not '\(action)'")
                }
                await connection.close()
            } catch {
                await connection.close()
                throw error
            }
        }
    )

    private static func save(_ bundle: String, _ args: ParsedArguments, _ connection: SearchlightConnection, _ context: CommandContext) async throws {
        guard let type = args.value("type") else { throw UsageError("save needs --type T (the activity type, e.g. \(bundle).view)") }
        guard let title = args.value("title") else { throw UsageError("save needs --title TEXT") }
        let a = UserActivity(activityType: type, configuration: .init(bundleIdentifier: bundle, socketPath: context.socket))
        a.title = title
        a.isEligibleForSearch = true
        if let id = args.value("id") { a.persistentIdentifier = id }
        let keywords = args.values("keywords")
        if !keywords.isEmpty { a.keywords = Set(keywords) }
        if let url = args.value("url") {
            guard ActivityCheck.isWebURL(url), let parsed = URL(string: url) else { throw UsageError("--url must be an http or https URL with a host, not '\(url)'") }
            a.webpageURL = parsed
        }
        if let related = args.value("related") {
            var set = AttributeSet()
            set.relatedUniqueIdentifier = related
            a.contentAttributeSet = set
        }
        if let expires = args.value("expires") {
            guard let seconds = Double(expires), seconds > 0, seconds.isFinite else { throw UsageError("--expires takes a number of seconds, not '\(expires)'") }
            a.expirationDate = Date().addingTimeInterval(seconds)
        }
        let request: ActivitySave
        do {
            request = try a.saveRequest(current: args.flag("current"))
        } catch let error as SearchlightError {
            throw UsageError(error.message)
        }
        let answer = try await connection.send(request)
        if context.json {
            Console.out(answer.result)
        } else {
            let how = answer.shownAs == "item" ? " (shown as its related item)" : ""
            Console.out("saved activity \(answer.persistentIdentifier) of \(bundle)\(how)")
        }
    }

    private static func list(_ bundle: String, _ args: ParsedArguments, _ connection: SearchlightConnection, _ context: CommandContext) async throws {
        var limit = 100
        if let text = args.value("limit") {
            guard let n = Int(text), (1...1000).contains(n) else { throw UsageError("--limit takes 1 to 1000, not '\(text)'") }
            limit = n
        }
        let answer = try await connection.send(ActivityList(limit: limit))
        if context.json {
            Console.out(answer.result)
            return
        }
        let activities = answer.result["activities"]?.arrayValue ?? []
        if activities.isEmpty { Console.out("\(bundle) has no saved activities") }
        for item in activities {
            let attributes = item["attributeSet"]
            let id = item["uniqueIdentifier"]?.stringValue ?? "?"
            let title = attributes?["title"]?.stringValue ?? "(untitled)"
            let used = attributes?["lastUsedDate"]?.stringValue ?? "-"
            let current = attributes?["custom"]?["activityCurrent"] == true ? "  (current)" : ""
            Console.out("\(id)  \(title)  last used \(used)\(current)")
        }
    }

    private static func delete(_ bundle: String, _ args: ParsedArguments, _ connection: SearchlightConnection, _ context: CommandContext) async throws {
        let identifiers = args.values("identifiers")
        guard identifiers.isEmpty != !args.flag("all") else {
            throw UsageError(identifiers.isEmpty ? "say what to delete: --identifiers ID... or --all" : "give only one of --identifiers and --all")
        }
        var deleted = 0
        if args.flag("all") {
            deleted = try await connection.send(ActivityDeleteAll()).result["deleted"]?.intValue ?? 0
        } else {
            for start in stride(from: 0, to: identifiers.count, by: ActivityLimits.deleteIdentifiers) {
                let part = Array(identifiers[start..<min(identifiers.count, start + ActivityLimits.deleteIdentifiers)])
                deleted += try await connection.send(ActivityDelete(persistentIdentifiers: part)).result["deleted"]?.intValue ?? 0
            }
        }
        if context.json {
            Console.out(["bundle": .string(bundle), "deleted": .number(Double(deleted))])
        } else {
            Console.out("deleted \(deleted) activit\(deleted == 1 ? "y" : "ies") of \(bundle)")
        }
    }
}
