import Foundation
import SearchlightKit

/// Starts the extension. `IndexExtension.main()` is the SDK's entry point, which serves the
/// supervisor; we call it ourselves only to offer `--dump` first, a way to check what would be
/// indexed without a daemon: `journal-extension --dump Sample/journal.json | head`.
@main
enum EntryPoint {
    static func main() async {
        let arguments = ExtensionArguments(CommandLine.arguments)
        guard arguments.dump else { return await JournalIndexer.main() }
        do {
            let journal = try JournalFile.read(JournalIndexer().journalURL)
            journal.warnAboutSkippedEntries()
            var writer = JSONLinesWriter()
            for entry in journal.entries { writer.write(entry.searchableItem) }
            writer.flush()
        } catch {
            FileHandle.standardError.write(Data("journal-extension: \(error)\n".utf8))
            exit(1)
        }
    }
}
