import Foundation
import SearchlightKit

/// Starts the extension. `IndexExtension.main()` is the SDK's entry point, which serves the
/// supervisor; we call it ourselves only to offer `--dump` first, a way to check what would be
/// indexed without a daemon: `notes-extension --dump Sample/notes | head`.
@main
enum EntryPoint {
    static func main() async {
        guard ExtensionArguments(CommandLine.arguments).dump else { return await NotesIndexer.main() }
        let folder = NotesIndexer().folder
        do {
            var writer = JSONLinesWriter()
            for identifier in try folder.identifiers() {
                guard let url = folder.file(for: identifier), let note = Note(identifier: identifier, url: url) else { continue }
                writer.write(note.searchableItem)
            }
            writer.flush()
        } catch {
            FileHandle.standardError.write(Data("notes-extension: \(error)\n".utf8))
            exit(1)
        }
    }
}
