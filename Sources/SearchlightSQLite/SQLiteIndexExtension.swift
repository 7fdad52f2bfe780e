import Foundation

/// An index extension over an app's SQLite database, with the app's own delegate and model, so
/// that `searchlight reindex LABEL --all`, migration and corruption recovery rebuild the index
/// from the database while the app is not running:
///
/// ```swift
/// import SearchlightSQLite
///
/// @main
/// struct TagsIndexer: SQLiteIndexExtension {
///     func makeDelegate() throws -> SQLiteSpotlightDelegate {
///         try TagsDelegate(databaseAt: TagsStore.defaultURL, model: TagsStore.model)
///     }
/// }
/// ```
///
/// The handlers are the delegate's; this protocol only asks for the delegate (made per request).
public protocol SQLiteIndexExtension: IndexExtension {
    /// The delegate over the app's database (not started: the extension only answers requests).
    func makeDelegate() throws -> SQLiteSpotlightDelegate
}

extension SQLiteIndexExtension {
    public func reindexAllSearchableItems(in index: SearchableIndex) async throws {
        try await checkedDelegate(for: index).reindexAllSearchableItems(in: index)
    }

    public func reindexSearchableItems(withIdentifiers identifiers: [String], in index: SearchableIndex) async throws {
        try await checkedDelegate(for: index).reindexSearchableItems(withIdentifiers: identifiers, in: index)
    }

    /// The delegate, after a check that it names the bundle the daemon hands the extension (its
    /// unit's): an app whose delegate writes another bundle (its `bundleIdentifier:` left to the
    /// executable's name) indexes one bundle while its extension rebuilds another, so each sees
    /// half. Said on stderr, which the daemon logs, with both names.
    private func checkedDelegate(for index: SearchableIndex) throws -> SQLiteSpotlightDelegate {
        let delegate = try makeDelegate()
        if delegate.bundleIdentifier != index.bundleIdentifier {
            DelegateLog.warning("the delegate's bundle is not the extension unit's: the app and its extension index different bundles; pass bundleIdentifier: to the delegate", [
                "delegateBundle": delegate.bundleIdentifier, "unitBundle": index.bundleIdentifier,
            ])
        }
        return delegate
    }
}

extension SQLiteSpotlightDelegate {
    /// Rebuilds `index` from the database (CSSearchableIndexDelegate's reindex-all): one batch
    /// that deletes everything, donates every row and stores, as the client state, the history's
    /// last token on the snapshot it read, compare-and-swap on the state it found, so that a
    /// running app's delegate and this rebuild never both apply a range. Installs the history
    /// triggers first (idempotent), so no change made after the snapshot is missed.
    public func reindexAllSearchableItems(in index: SearchableIndex) async throws {
        guard index.name == indexName() else { return }  // not the index this delegate writes
        guard FileManager.default.fileExists(atPath: databaseURL.path) else {
            DelegateLog.warning("no database to index yet; nothing to donate", ["path": databaseURL.path])
            return
        }
        let model = self.model
        let installation = try await worker.perform { db in try HistorySchema.install(model, db) }
        setStoreIdentifier(installation.storeIdentifier)
        let reader = self.reader
        // A running app may commit a range between our read of the state and our batch: then the
        // batch is refused and the rebuild starts again from a fresh read.
        for attempt in 1...5 {
            let state = try await index.fetchLastClientState()
            let changes = try await worker.perform { db in try reader.everything(db) }
            do {
                try await BatchSender.send(changes, to: index, expecting: state)
            } catch let error as SearchlightError where error.code == .mismatchedClientState && attempt < 5 {
                continue
            }
            try await worker.perform { db in try HistoryMaintenance.rebuilt(changes, db) }
            return
        }
    }

    /// Re-reads the rows these identifiers name and donates them; a missing row (or an
    /// identifier no entity claims, or a row `attributeSet(for:)` does not index) is deleted.
    public func reindexSearchableItems(withIdentifiers identifiers: [String], in index: SearchableIndex) async throws {
        guard index.name == indexName() else { return }
        var items: [SearchableItem] = []
        var deletes = identifiers
        if FileManager.default.fileExists(atPath: databaseURL.path) {
            let model = self.model
            let installation = try await worker.perform { db in try HistorySchema.install(model, db) }
            setStoreIdentifier(installation.storeIdentifier)
            let reader = self.reader
            (items, deletes) = try await worker.perform { db in try reader.rows(identifiers: identifiers, db) }
        }
        BatchSender.refuseOversized(&items, &deletes)
        for start in stride(from: 0, to: items.count, by: BatchSender.chunkItems) {
            try await BatchSender.indexChunk(Array(items[start..<min(start + BatchSender.chunkItems, items.count)]), into: index, deletes: &deletes)
        }
        for start in stride(from: 0, to: deletes.count, by: BatchSender.chunkDeletes) {
            try await index.deleteSearchableItems(withIdentifiers: Array(deletes[start..<min(start + BatchSender.chunkDeletes, deletes.count)]))
        }
    }
}
