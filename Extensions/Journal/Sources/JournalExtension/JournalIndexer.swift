import Foundation
import SearchlightKit

/// Indexes the journal app's entries (the app of Apple's WWDC24 "Support semantic search with
/// Core Spotlight" talk) from its JSON file, for the bundle `org.searchlight.sample.journal`.
///
/// A rebuild is one batch that ends with a fingerprint of the file as the client state, so the
/// index never shows half a journal and the app can tell whether the index matches its file.
struct JournalIndexer: IndexExtension {
    /// Items per `indexSearchableItems` call: large enough to be cheap, small enough to report progress.
    static let chunkSize = 500

    let journalURL: URL

    init() {
        let arguments = ExtensionArguments(CommandLine.arguments)
        journalURL = URL(fileURLWithPath: arguments.path ?? "journal.json")
    }

    func reindexAllSearchableItems(in index: SearchableIndex) async throws {
        let journal = try JournalFile.read(journalURL)
        journal.warnAboutSkippedEntries()
        // If anything below throws, the daemon discards the open batch: nothing of it is applied.
        try await index.beginBatch()
        try await index.deleteAllSearchableItems()
        var done = 0
        for start in stride(from: 0, to: journal.entries.count, by: Self.chunkSize) {
            try Task.checkCancellation()
            let chunk = journal.entries[start..<min(start + Self.chunkSize, journal.entries.count)]
            try await index.indexSearchableItems(chunk.map(\.searchableItem))
            done += chunk.count
            await index.reportProgress(completed: done, total: journal.entries.count)
        }
        try await index.endBatch(newClientState: journal.fingerprint)
    }

    func reindexSearchableItems(withIdentifiers identifiers: [String], in index: SearchableIndex) async throws {
        let entries = try JournalFile.read(journalURL).entriesByID
        let present = identifiers.compactMap { entries[$0] }
        let vanished = identifiers.filter { entries[$0] == nil }
        for start in stride(from: 0, to: present.count, by: Self.chunkSize) {
            try await index.indexSearchableItems(present[start..<min(start + Self.chunkSize, present.count)].map(\.searchableItem))
        }
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
