import Foundation
import SearchlightKit

/// `import`: donates the items of a JSON Lines file as the app would. Every line is validated
/// before anything is sent, so a bad file imports nothing instead of half of itself.
enum ImportCommand {
    static let command = Command(
        spec: CommandSpec(
            name: "import", abstract: "donate the items of a JSON Lines file to an app's index",
            usage: "BUNDLE FILE.jsonl [--index NAME] [--batch N] [--client-state S]",
            positionals: [
                .required("BUNDLE", "the app whose index receives the items"),
                .required("FILE", "one item per line in the wire shape; - reads stdin; a .gz file is decompressed"),
            ],
            options: [
                .value("index", "NAME", "a named index of the app (default: its default index)"),
                .value("batch", "N", "items per call (default 500, at most 10000)"),
                .value("client-state", "S", "apply everything atomically with this client state (at most 250 bytes)"),
            ],
            discussion: """
                A line is {"uniqueIdentifier": "...", "domainIdentifier": "...", "attributeSet": {...}}.
                Every line is checked first; if any is bad, the bad lines are listed with their numbers and
                nothing is imported (exit status 1). Without --client-state, items are committed call by call;
                with it, they commit together with the new client state, or not at all.
                """
        ),
        run: { args, context in try await run(args, context) }
    )

    /// The most bad lines listed; the rest are only counted.
    static let maxReportedLines = 20
    /// Calls stay well under the daemon's 16 MiB frame limit whatever --batch says.
    static let maxCallBytes = 8 << 20

    struct Loaded {
        var items: [SearchableItem] = []
        var sizes: [Int] = []
        var badLines = 0
        var lines = 0
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) async throws {
        let bundle = args.positionals[0], path = args.positionals[1]
        let batch = try args.integer("batch", in: 1...10_000) ?? 500
        let clientState = args.value("client-state").map { Data($0.utf8) }
        if let clientState, clientState.count > Limits().maxClientStateBytes {
            throw UsageError("--client-state is \(clientState.count) bytes; the limit is \(Limits().maxClientStateBytes)")
        }
        let loaded = try load(path)
        guard loaded.badLines == 0 else {
            let more = loaded.badLines > maxReportedLines ? " (the first \(maxReportedLines) are listed)" : ""
            throw CLIFailure("\(loaded.badLines) of \(loaded.lines) lines are invalid\(more); nothing was imported. Fix them and run the import again")
        }
        if loaded.items.isEmpty, clientState == nil {
            Console.errorLine("\(path == "-" ? "stdin" : path) has no items; nothing to import")
            return
        }
        let indexName = args.value("index") ?? ""
        let index = context.index(bundle, name: indexName)
        var progress = ProgressReporter(total: loaded.items.count, label: "importing")
        var sent = 0
        do {
            if clientState != nil { try await index.beginBatch() }
            for chunk in chunks(loaded, batch: batch) {
                try await index.indexSearchableItems(Array(loaded.items[chunk]))
                sent = chunk.upperBound
                progress.update(sent)
            }
            if let clientState { try await index.endBatch(newClientState: clientState) }
        } catch {
            progress.finish()
            Console.errorLine(clientState != nil || sent == 0
                ? "searchlight: nothing was imported"
                : "searchlight: \(sent) of \(loaded.items.count) items were imported before this failure:")
            throw error
        }
        progress.finish()
        await index.close()
        let seconds = progress.elapsed
        if context.json {
            Console.out([
                "bundle": .string(bundle), "index": .string(indexName), "items": .number(Double(sent)),
                "seconds": .number((seconds * 1000).rounded() / 1000),
                "itemsPerSecond": .number((Double(sent) / max(seconds, 1e-9)).rounded()),
            ])
        } else {
            let into = indexName.isEmpty ? bundle : "\(bundle) (index \(indexName))"
            Console.out("imported \(sent) items into \(into) in \(Format.seconds(seconds)) (\(Format.rate(sent, seconds)) items/s)")
        }
    }

    /// Reads and validates every line; reports the bad ones on stderr as it goes.
    static func load(_ path: String) throws -> Loaded {
        let reader = try LineReader(path: path)
        let validator = ItemValidator(limits: Limits())
        var loaded = Loaded()
        while let line = try reader.next() {
            loaded.lines += 1
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
            do {
                let json = try JSONValue.parse(line, maxDepth: validator.limits.maxJSONDepth)
                loaded.items.append(try validator.validate(item: json, index: loaded.lines))
                loaded.sizes.append(line.count)
            } catch let error as JSONParseError {
                bad(&loaded, reader.name, ": \(error)")
            } catch let error as SearchlightError {
                // The validator names the item by its index; here the line number says it better.
                let prefix = "item \(loaded.lines)"
                bad(&loaded, reader.name, error.message.hasPrefix(prefix) ? String(error.message.dropFirst(prefix.count)) : ": " + error.message)
            }
        }
        return loaded
    }

    static func bad(_ loaded: inout Loaded, _ name: String, _ detail: String) {
        loaded.badLines += 1
        if loaded.badLines <= maxReportedLines { Console.error("\(name) line \(loaded.lines)\(detail)") }
    }

    /// Ranges of at most `batch` items and about `maxCallBytes` bytes.
    static func chunks(_ loaded: Loaded, batch: Int) -> [Range<Int>] {
        var out: [Range<Int>] = []
        var start = 0, bytes = 0
        for i in loaded.items.indices {
            if i > start, i - start >= batch || bytes + loaded.sizes[i] > maxCallBytes {
                out.append(start..<i)
                start = i
                bytes = 0
            }
            bytes += loaded.sizes[i]
        }
        if start < loaded.items.count { out.append(start..<loaded.items.count) }
        return out
    }
}
