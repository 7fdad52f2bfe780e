import Foundation
import SearchlightKit

/// Indexes the journal app's entries (the app of Apple's WWDC24 "Support semantic search with
/// Core Spotlight" talk) from its JSON file, for the bundle `org.searchlight.sample.journal`.
///
/// A rebuild is one batch that ends with a fingerprint of the file as the client state, so the
/// index never shows half a journal and the app can tell whether the index matches its file.
@main
struct JournalIndexer: IndexExtension {
    let journalURL: URL

    /// `journal-extension [JOURNAL.json]` (default `journal.json`); `--dump` prints the items.
    init(context: ExtensionContext) {
        journalURL = URL(fileURLWithPath: ArgumentExtractor(context.arguments).positionalArguments.first ?? "journal.json")
    }

    func reindexAllSearchableItems(in index: SearchableIndex) async throws {
        let journal = try JournalFile.read(journalURL)
        journal.warnAboutSkippedEntries()
        await index.reportProgress(completed: 0, total: journal.entries.count)
        // If anything below throws, the daemon discards the open batch: nothing of it is applied.
        try await index.beginBatch()
        try await index.deleteAllSearchableItems()
        try await index.indexSearchableItems(journal.entries.lazy.map(\.searchableItem))
        try await index.endBatch(newClientState: journal.fingerprint)
    }

    func reindexSearchableItems(withIdentifiers identifiers: [String], in index: SearchableIndex) async throws {
        let entries = try JournalFile.read(journalURL).entriesByID
        try await index.indexSearchableItems(identifiers.lazy.compactMap { entries[$0]?.searchableItem })
        let vanished = identifiers.filter { entries[$0] == nil }
        if !vanished.isEmpty { try await index.deleteSearchableItems(withIdentifiers: vanished) }
    }

    func data(forItem identifier: String, typeIdentifier: String) async throws -> Data {
        guard let entry = try JournalFile.read(journalURL).entriesByID[identifier] else {
            throw SearchlightError(.invalidParams, "the journal has no entry \(identifier.prefix(80)); it was deleted since it was indexed")
        }
        guard let data = entry.data(typeIdentifier: typeIdentifier) else {
            throw SearchlightError(.indexingUnsupported,
                "journal entries come as \(JournalEntry.dataTypes.joined(separator: " or ")), not \(typeIdentifier.prefix(80))")
        }
        return data
    }
}
