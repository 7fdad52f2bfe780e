import Foundation
import SearchlightKit

/// Indexes a folder of Markdown and text notes for the bundle `org.searchlight.sample.notes`:
/// one item per file, identified by its path relative to the folder.
struct NotesIndexer: IndexExtension {
    /// A chunk ends at this many items or this many encoded bytes, whichever comes first, so a
    /// folder of large notes stays far below the 16 MiB frame limit.
    static let chunkItems = 200
    static let chunkBytes = 4 << 20

    let folder: NotesFolder

    init() {
        folder = NotesFolder(path: ExtensionArguments(CommandLine.arguments).path ?? "notes")
    }

    func reindexAllSearchableItems(in index: SearchableIndex) async throws {
        let identifiers = try folder.identifiers()
        try await index.deleteAllSearchableItems()
        var done = 0
        try await donate(identifiers, to: index) { count in
            done += count
            await index.reportProgress(completed: done, total: identifiers.count)
        }
    }

    func reindexSearchableItems(withIdentifiers identifiers: [String], in index: SearchableIndex) async throws {
        let vanished = try await donate(identifiers, to: index) { _ in }
        if !vanished.isEmpty { try await index.deleteSearchableItems(withIdentifiers: vanished) }
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

    /// Reads and donates the notes named by `identifiers`, in chunks; `chunkDonated` runs after each.
    /// Returns the identifiers that name no note (vanished, or refused as unsafe).
    @discardableResult
    private func donate(_ identifiers: [String], to index: SearchableIndex,
                        chunkDonated: (Int) async -> Void) async throws -> [String] {
        var vanished: [String] = []
        var chunk: [SearchableItem] = []
        var chunkSize = 0
        for identifier in identifiers {
            try Task.checkCancellation()
            guard let url = folder.file(for: identifier), let note = Note(identifier: identifier, url: url) else {
                vanished.append(identifier)
                continue
            }
            let item = note.searchableItem
            chunk.append(item)
            chunkSize += item.json.serializedByteCount
            if chunk.count >= Self.chunkItems || chunkSize >= Self.chunkBytes {
                try await index.indexSearchableItems(chunk)
                await chunkDonated(chunk.count)
                chunk.removeAll(keepingCapacity: true)
                chunkSize = 0
            }
        }
        if !chunk.isEmpty {
            try await index.indexSearchableItems(chunk)
            await chunkDonated(chunk.count)
        }
        return vanished
    }

    /// Whether a note of UTI `type` can be handed out as `requested` (the UTIs it conforms to).
    static func conforms(_ type: String, to requested: String) -> Bool {
        let supertypes = ["net.daringfireball.markdown": ["public.plain-text", "public.text", "public.data", "public.content", "public.item"],
                          "public.plain-text": ["public.text", "public.data", "public.content", "public.item"]]
        return requested == type || supertypes[type, default: []].contains(requested)
    }
}
