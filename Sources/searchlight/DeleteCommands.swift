import Foundation
import SearchlightKit

/// `delete` (items, as the app would) and `erase` (a whole bundle, as an administrator).
enum DeleteCommands {
    static let delete = Command(
        spec: CommandSpec(
            name: "delete", abstract: "delete items from an app's index",
            usage: "BUNDLE (--identifiers ID... | --domains D... | --all) [--index NAME]",
            positionals: [.required("BUNDLE", "the app whose items to delete")],
            options: [
                .upToNextOption("identifiers", "ID", "delete the items with these identifiers"),
                .upToNextOption("domains", "D", "delete the items of these domains and their subdomains (a removes a.b, not ab)"),
                .flag("all", "delete every item of the index and its client state"),
                .value("index", "NAME", "a named index of the app (default: its default index)"),
            ]
        ),
        run: { args, context in
            let bundle = args.positionals[0]
            let identifiers = args.values("identifiers"), domains = args.values("domains")
            let chosen = [!identifiers.isEmpty, !domains.isEmpty, args.flag("all")].filter { $0 }.count
            guard chosen == 1 else {
                throw UsageError(chosen == 0 ? "say what to delete: --identifiers, --domains or --all" : "give only one of --identifiers, --domains and --all")
            }
            let index = context.index(bundle, name: args.value("index") ?? "")
            let what: String
            let kind: String, count: Int
            let perCall = Limits().maxIdentifiersPerCall
            if !identifiers.isEmpty {
                for start in stride(from: 0, to: identifiers.count, by: perCall) {
                    try await index.deleteSearchableItems(withIdentifiers: Array(identifiers[start..<min(start + perCall, identifiers.count)]))
                }
                what = "\(identifiers.count) identifier\(identifiers.count == 1 ? "" : "s")"
                (kind, count) = ("identifiers", identifiers.count)
            } else if !domains.isEmpty {
                for start in stride(from: 0, to: domains.count, by: perCall) {
                    try await index.deleteSearchableItems(withDomainIdentifiers: Array(domains[start..<min(start + perCall, domains.count)]))
                }
                what = "the items of \(domains.count) domain\(domains.count == 1 ? "" : "s")"
                (kind, count) = ("domains", domains.count)
            } else {
                try await index.deleteAllSearchableItems()
                what = "all items"
                (kind, count) = ("all", 0)
            }
            await index.close()
            if context.json {
                Console.out(["bundle": .string(bundle), "index": .string(args.value("index") ?? ""), "deleted": .string(kind), "count": .number(Double(count))])
            } else {
                Console.out("deleted \(what) from \(bundle)")
            }
        }
    )

    static let erase = Command(
        spec: CommandSpec(
            name: "erase", abstract: "erase every index of an app (mdutil -E)", usage: "BUNDLE [--reindex]",
            positionals: [.required("BUNDLE", "the app whose indexes to erase")],
            options: [.flag("reindex", "then ask the app's index extension to rebuild everything (refused, erasing nothing, when no extension serves the app)")]
        ),
        run: { args, context in
            let bundle = args.positionals[0]
            // The daemon refuses --reindex before erasing when no extension could rebuild the app.
            let answer = try await context.admin(AdminErase(bundle: bundle, reindex: args.flag("reindex")))
            if context.json {
                Console.out(answer)
            } else {
                let n = answer["erased"]?.intValue ?? 0
                var line = "erased \(bundle) (\(n) index\(n == 1 ? "" : "es"))"
                if let label = answer["label"]?.stringValue { line += "; \(label) asked to rebuild it (`searchlight requests` shows progress)" }
                Console.out(line)
            }
        }
    )
}
