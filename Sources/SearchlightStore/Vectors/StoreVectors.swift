import Foundation
import SearchlightSemantic

/// The in-memory vector index of one store (`VectorIndex`), following what commits to its
/// `item_vectors` table.
///
/// The writer journals each vector it writes or deletes inside a transaction; once the group
/// commits, the journal is applied to the loaded index. When any call of the group rolled back,
/// the index is dropped instead and reloaded from the table on the next semantic query: the
/// table is the truth, and patching would have to know which calls' entries survived. Between a
/// commit and its application a query may miss a new item's vector; it never returns a deleted
/// item, because every vector hit is checked against `items` (visibility, filter) in SQL.
///
/// The index is loaded on the writer thread between groups (`IndexStore.loadVectors`), so it
/// starts from exactly the committed state and every later commit is applied to it.
final class StoreVectors: @unchecked Sendable {
    private let lock = NSLock()
    /// nil until the first semantic query loads it (or after a rolled-back group).
    private var loaded: VectorIndex?
    /// Whether the background fill of items without a vector ran since the file was opened.
    private var fillStarted = false
    private var filling = false

    // Owned by the writer thread.
    private var journal: [(rowid: Int64, vector: QuantizedVector?)] = []
    private var cleared = false

    var isLoaded: Bool { lock.withLock { loaded != nil } }

    /// (vectors, refined) of the loaded index, nil when it is not loaded.
    var counts: (vectors: Int, refined: Int)? {
        lock.withLock { loaded.map { ($0.count, $0.refinedCount) } }
    }

    func writerPut(_ rowid: Int64, _ vector: QuantizedVector) { journal.append((rowid, vector)) }
    func writerDelete(_ rowid: Int64) { journal.append((rowid, nil)) }
    func writerCleared() {
        journal.removeAll(keepingCapacity: true)
        cleared = true
    }

    /// Called by the writer after each group: applies the journal, or drops the index when a call
    /// of the group did not commit.
    func writerCommitted(clean: Bool) {
        guard !journal.isEmpty || cleared else { return }
        lock.withLock {
            guard var index = loaded else { return }
            loaded = nil  // released while it is patched, so the patch does not copy its arrays
            guard clean else { return }
            if cleared { index = VectorIndex(dimension: index.dimension) }
            for entry in journal {
                if let v = entry.vector { try? index.set(entry.rowid, v) } else { _ = index.remove(entry.rowid) }
            }
            loaded = index
        }
        journal.removeAll(keepingCapacity: true)
        cleared = false
    }

    func install(_ index: VectorIndex) { lock.withLock { loaded = index } }
    func drop() { lock.withLock { loaded = nil } }

    /// The `k` nearest vectors (nil when not loaded); `allowed` restricts them.
    func search(_ query: [Float], k: Int, mode: VectorIndex.Mode = .automatic, allowed: ((Int64) -> Bool)? = nil)
        -> (matches: [VectorMatch], total: Int)?
    {
        lock.withLock {
            guard let index = loaded else { return nil }
            return (index.search(query, k: k, mode: mode, allowed: allowed), index.count)
        }
    }

    /// Which of `rowids` (best first) are near-duplicates of one above (`VectorIndex.nearDuplicates`);
    /// none when the index is not loaded.
    func nearDuplicates(_ rowids: [Int64], threshold: Float, depth: Int) -> [Bool] {
        lock.withLock {
            loaded?.nearDuplicates(rowids, threshold: threshold, depth: depth) ?? [Bool](repeating: false, count: rowids.count)
        }
    }

    /// True once per opening: the caller starts the fill.
    func claimFill() -> Bool {
        lock.withLock {
            guard !fillStarted else { return false }
            fillStarted = true
            filling = true
            return true
        }
    }

    func fillEnded() { lock.withLock { filling = false } }
    var isFilling: Bool { lock.withLock { filling } }
}
