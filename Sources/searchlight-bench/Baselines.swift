import Foundation
import SearchlightKit
import SearchlightStore

/// The plain-engine side of each comparison, run in this process: what SQLite FTS5 does alone
/// with the same rows and the same durability, the ceiling of the engine we chose.
enum Baselines {
    /// Raw FTS5 insert of the same rows, same durability (WAL, synchronous=FULL), one
    /// transaction per batch. Items per second.
    static func rawInsert(_ items: [SearchableItem], batch: Int) throws -> Double {
        let path = "/tmp/slbench-raw-\(getpid()).sqlite"
        for s in ["", "-wal", "-shm"] { unlink(path + s) }
        defer { for s in ["", "-wal", "-shm"] { unlink(path + s) } }
        let db = try Database(path: path)
        _ = try db.scalar("PRAGMA journal_mode=WAL")
        try db.execute("""
            PRAGMA synchronous=FULL;
            CREATE VIRTUAL TABLE f USING fts5(title, contentDescription, textContent, keywords, tokenize='unicode61 remove_diacritics 2');
            """)
        let start = now()
        var i = 0
        while i < items.count {
            try db.execute("BEGIN")
            for item in items[i..<min(i + batch, items.count)] {
                let a = item.attributeSet
                try db.run("INSERT INTO f VALUES (?, ?, ?, ?)", [
                    .text(a.title ?? ""), .text(a.contentDescription ?? ""), .text(a.textContent ?? ""),
                    .text((a.keywords ?? []).joined(separator: " ")),
                ])
            }
            try db.execute("COMMIT")
            i += batch
        }
        return Double(items.count) / (now() - start)
    }

    /// The store alone, in-process: the same batches through `IndexStore`, no socket or JSON-RPC.
    /// The gap between this and the raw baseline is the store's cost; the gap to donation, the protocol's.
    static func storeInsert(_ items: [SearchableItem], batch: Int) throws -> Double {
        let dir = "/tmp/slbench-store-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try IndexStore(path: dir + "/b/_default.sqlite")
        defer { store.close() }
        let start = now()
        var i = 0
        while i < items.count {
            _ = try store.applySync([.items(Array(items[i..<min(i + batch, items.count)]))])
            i += batch
        }
        return Double(items.count) / (now() - start)
    }
}

/// Donation through the socket: `clients` SDK connections, each sending its share of the items
/// in batches, concurrently. Items per second until the last call is acknowledged (committed).
func donate(_ items: [SearchableItem], socket: String, bundle: String, clients: Int, batch: Int) async throws -> Double {
    let start = now()
    try await withThrowingTaskGroup(of: Void.self) { group in
        for c in 0..<clients {
            group.addTask {
                let index = SearchableIndex(bundleIdentifier: bundle, socketPath: socket)
                var i = c * batch
                while i < items.count {
                    try await index.indexSearchableItems(Array(items[i..<min(i + batch, items.count)]))
                    i += clients * batch
                }
                await index.close()
            }
        }
        try await group.waitForAll()
    }
    return Double(items.count) / (now() - start)
}
