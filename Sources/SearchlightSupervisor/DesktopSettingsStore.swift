import Foundation
import Synchronization
import SearchlightStore

/// Per-bundle settings of the desktop's search (DESIGN §12), in `supervisor.sqlite`: whether a
/// bundle is hidden from it (`searchlight desktop hide|show`, Spotlight's per-app switch: the
/// app's own searches are not affected), and the desktop file its items open with when no unit
/// declares one (`searchlight register BUNDLE --open-with ID`).
///
/// A setting belongs to the bundle, not to a viewer: a bundle is readable by its owner (and root)
/// only, so hiding it is its owner's choice for their own desktop. The settings survive an erase
/// of the bundle's indexes (they are preferences, not data). Every desktop query asks about every
/// readable bundle, so the rows are held in memory, written through before they take effect.
final class DesktopSettingsStore: Sendable {
    struct Entry: Sendable, Equatable {
        var hidden = false
        /// A desktop-file id registered with `desktop.register`.
        var openWith: String?
        /// The registered app also continues searches (`desktop.register {continuesSearch}`).
        var continuesSearch = false
    }

    /// The connection and the rows it holds, changed together.
    private struct Guarded {
        let db: Database
        var entries: [String: Entry]
    }

    private let guarded: Mutex<Guarded>

    init(path: String) throws {
        let db = try Database(path: path)
        var entries: [String: Entry] = [:]
        _ = try db.scalar("PRAGMA journal_mode=WAL")
        try db.execute("""
            PRAGMA synchronous=FULL;
            CREATE TABLE IF NOT EXISTS desktop_bundles(
                bundle TEXT PRIMARY KEY,
                hidden INTEGER NOT NULL DEFAULT 0,
                open_with TEXT,
                changed REAL NOT NULL
            );
            """)
        // Added for issue 34: a file written before it gains the column (false for every row).
        if !(try db.rows("PRAGMA table_info(desktop_bundles)")).contains(where: { $0.string(1) == "continues_search" }) {
            try db.execute("ALTER TABLE desktop_bundles ADD COLUMN continues_search INTEGER NOT NULL DEFAULT 0")
        }
        for row in try db.rows("SELECT bundle, hidden, open_with, continues_search FROM desktop_bundles") {
            guard let name = row.string(0) else { continue }
            entries[name] = Entry(hidden: row.int(1) != 0, openWith: row.string(2), continuesSearch: row.int(3) != 0)
        }
        guarded = Mutex(Guarded(db: db, entries: entries))
    }

    /// Closes the connection at the daemon's stop (the last one to `supervisor.sqlite` checkpoints
    /// the WAL into the file, synced, and removes it); a later call fails or reads nothing.
    func close() { guarded.withLock { $0.db.close() } }

    func entry(_ bundle: String) -> Entry { guarded.withLock { $0.entries[bundle] ?? Entry() } }

    func isHidden(_ bundle: String) -> Bool { guarded.withLock { $0.entries[bundle]?.hidden ?? false } }

    /// Every bundle with a setting, by name.
    func all() -> [(bundle: String, entry: Entry)] {
        guarded.withLock { $0.entries.sorted { $0.key < $1.key }.map { ($0.key, $0.value) } }
    }

    func setHidden(_ bundle: String, _ hidden: Bool) throws {
        try update(bundle) { $0.hidden = hidden }
    }

    /// `nil` removes the registration.
    func setOpenWith(_ bundle: String, _ desktopID: String?, continuesSearch: Bool = false) throws {
        try update(bundle) {
            $0.openWith = desktopID
            $0.continuesSearch = desktopID != nil && continuesSearch
        }
    }

    /// Under the lock: the row first, then the memory; a bundle back to the defaults loses its row.
    private func update(_ bundle: String, _ change: (inout Entry) -> Void) throws {
        try guarded.withLock { g in
            var entry = g.entries[bundle] ?? Entry()
            change(&entry)
            if entry == Entry() {
                _ = try g.db.run("DELETE FROM desktop_bundles WHERE bundle = ?", [.text(bundle)])
                g.entries[bundle] = nil
                return
            }
            _ = try g.db.run("""
                INSERT INTO desktop_bundles(bundle, hidden, open_with, continues_search, changed) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT(bundle) DO UPDATE SET hidden = excluded.hidden, open_with = excluded.open_with,
                    continues_search = excluded.continues_search, changed = excluded.changed
                """, [.text(bundle), .integer(entry.hidden ? 1 : 0), entry.openWith.map(SQLValue.text) ?? .null,
                      .integer(entry.continuesSearch ? 1 : 0), .double(Date().timeIntervalSince1970)])
            g.entries[bundle] = entry
        }
    }
}
