import Foundation

/// Sends a change set to an index as one batch that ends with the history token as the client
/// state, compare-and-swap on the token it started from (DESIGN §4, §10): the donations and the
/// new token commit together, or nothing does; when another process (or a rebuild) moved the
/// state meanwhile, the daemon answers `mismatchedClientState` and applies nothing.
enum BatchSender {
    /// Items per `index.items` call, and a bound on a call's estimated size (frames are 16 MiB).
    static let chunkItems = 500
    static let chunkBytes = 4 << 20
    static let chunkDeletes = 5_000

    /// The client state for a history token: the token in decimal ASCII.
    static func state(_ token: Int64) -> Data { Data(String(token).utf8) }

    /// The token a client state names, or nil when it is not one of ours (absent, or written by
    /// someone else: the index then has to be rebuilt).
    static func token(_ state: Data?) -> Int64? {
        guard let state, !state.isEmpty, state.count <= 20, state.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(String(decoding: state, as: UTF8.self))
    }

    /// Sends `changes` as one batch expecting `expected` (`nil` = no state) and storing the new
    /// token. On any failure the batch is abandoned, so the daemon applies none of it: for an
    /// index with its own connection the connection is dropped (the daemon discards a batch whose
    /// connection closes); an extension's batch is discarded when its request ends.
    static func send(_ changes: ChangeSet, to index: SearchableIndex, expecting expected: Data?) async throws {
        var items = changes.items
        var deletes = changes.deletes
        refuseOversized(&items, &deletes)
        do {
            try await index.beginBatch()
            if changes.isRebuild { try await index.deleteAllSearchableItems() }
            var done = 0
            var start = 0
            while start < items.count {
                var end = start, bytes = 0
                while end < items.count, end - start < chunkItems, bytes < chunkBytes {
                    bytes += estimatedSize(items[end])
                    end += 1
                }
                try await indexChunk(Array(items[start..<end]), into: index, deletes: &deletes)
                done += end - start
                start = end
                if changes.isRebuild { await index.reportProgress(completed: done, total: items.count) }
            }
            for chunk in stride(from: 0, to: deletes.count, by: chunkDeletes) {
                try await index.deleteSearchableItems(withIdentifiers: Array(deletes[chunk..<min(chunk + chunkDeletes, deletes.count)]))
            }
            try await index.endBatch(expectedClientState: .some(expected), newClientState: state(changes.through))
        } catch {
            await index.close()
            throw error
        }
    }

    /// Donates a chunk. An item the daemon refuses (`invalidItem` names it: a value it cannot
    /// take, from an `attributeSet(for:)` override) would fail every batch of its range for ever:
    /// it is left out with a warning, a previous version of it deleted, and the rest of the chunk
    /// sent again. A refused call applied nothing and leaves the batch open, so this works inside
    /// the batch, on an app's connection and on an extension's alike.
    static func indexChunk(_ chunk: [SearchableItem], into index: SearchableIndex, deletes: inout [String]) async throws {
        var chunk = chunk
        while !chunk.isEmpty {
            do {
                try await index.indexSearchableItems(chunk)
                return
            } catch let error as SearchlightError where error.code == .invalidItem {
                guard let i = error.data?["index"]?.intValue, chunk.indices.contains(i) else { throw error }
                DelegateLog.warning("row not indexed: the daemon refused its item", ["identifier": chunk[i].uniqueIdentifier, "error": error.message])
                deletes.append(chunk.remove(at: i).uniqueIdentifier)
            }
        }
    }

    /// Items past the daemon's item limit are left out before sending (one could also be past
    /// the frame limit, which closes the connection instead of naming the item).
    static func refuseOversized(_ items: inout [SearchableItem], _ deletes: inout [String]) {
        let limit = Limits().maxItemBytes
        items.removeAll { item in
            let size = estimatedSize(item)
            guard size > limit else { return false }
            DelegateLog.warning("row not indexed: its item is larger than the daemon takes", ["identifier": item.uniqueIdentifier, "bytes": size, "limit": limit])
            deletes.append(item.uniqueIdentifier)
            return true
        }
    }

    /// A cheap over-estimate of an item's encoded size (strings dominate).
    static func estimatedSize(_ item: SearchableItem) -> Int {
        func size(_ value: JSONValue) -> Int {
            switch value {
            case .string(let s): s.utf8.count + 8
            case .array(let a): a.reduce(2) { $0 + size($1) }
            case .object(let o): o.reduce(2) { $0 + $1.key.utf8.count + 4 + size($1.value) }
            default: 24
            }
        }
        return 64 + item.uniqueIdentifier.utf8.count + size(item.attributeSet.json)
    }
}
