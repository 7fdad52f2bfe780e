import Foundation
import SearchlightKit

/// Indexes a folder of Markdown and text notes for the bundle `org.searchlight.sample.notes`:
/// one item per file, identified by its path relative to the folder.
@main
struct NotesIndexer: IndexExtension {
    let folder: NotesFolder

    /// `notes-extension [FOLDER]` (default `notes`); `--dump` prints the items.
    init(context: ExtensionContext) {
        folder = NotesFolder(path: ArgumentExtractor(context.arguments).positionalArguments.first ?? "notes")
    }

    func reindexAllSearchableItems(in index: SearchableIndex) async throws {
        let identifiers = try folder.identifiers()
        await index.reportProgress(completed: 0, total: identifiers.count)
        try await index.deleteAllSearchableItems()
        try await index.indexSearchableItems(notes(identifiers, vanished: VanishedNotes()))
    }

    func reindexSearchableItems(withIdentifiers identifiers: [String], in index: SearchableIndex) async throws {
        let vanished = VanishedNotes()
        try await index.indexSearchableItems(notes(identifiers, vanished: vanished))
        if !vanished.identifiers.isEmpty { try await index.deleteSearchableItems(withIdentifiers: vanished.identifiers) }
    }

    func data(forItem identifier: String, typeIdentifier: String) async throws -> Data {
        let url = try await fileURL(forItem: identifier, typeIdentifier: typeIdentifier, inPlace: true)
        guard let data = FileManager.default.contents(atPath: url.path) else {
            throw SearchlightError(.invalidParams, "the note \(identifier.prefix(200)) cannot be read any more; reindex it")
        }
        return data
    }

    /// The note file itself, whether or not `inPlace` is asked for: notes are plain files the
    /// user owns, so there is nothing to export into a copy.
    func fileURL(forItem identifier: String, typeIdentifier: String, inPlace: Bool) async throws -> URL {
        guard let url = folder.file(for: identifier), let type = NotesFolder.contentType(ofFileNamed: url.lastPathComponent) else {
            throw SearchlightError(.invalidParams, "there is no note \(identifier.prefix(200)) in \(folder.root.path); it was deleted or moved")
        }
        guard Self.conforms(type, to: typeIdentifier) else {
            throw SearchlightError(.indexingUnsupported, "the note is \(type), which is not a \(typeIdentifier.prefix(80))")
        }
        return url
    }

    /// The notes named by `identifiers` as items, each read when the SDK asks for it (a folder of
    /// large notes is never all in memory); those that name no note (vanished, or refused as
    /// unsafe) are noted in `vanished`.
    private func notes(_ identifiers: [String], vanished: VanishedNotes) -> some Sequence<SearchableItem> {
        identifiers.lazy.compactMap { [folder] identifier in
            guard let url = folder.file(for: identifier), let note = Note(identifier: identifier, url: url) else {
                vanished.identifiers.append(identifier)
                return nil
            }
            return note.searchableItem
        }
    }

    /// Whether a note of UTI `type` can be handed out as `requested` (the UTIs it conforms to).
    static func conforms(_ type: String, to requested: String) -> Bool {
        let supertypes = ["net.daringfireball.markdown": ["public.plain-text", "public.text", "public.data", "public.content", "public.item"],
                          "public.plain-text": ["public.text", "public.data", "public.content", "public.item"]]
        return requested == type || supertypes[type, default: []].contains(requested)
    }
}

/// The identifiers of a reindex that name no note any more (filled while the items are read).
final class VanishedNotes {
    var identifiers: [String] = []
}
