import Foundation
import Testing
import TestThreads
import SearchlightStore
@testable import SearchlightSupervisor

/// The desktop settings in `supervisor.sqlite`: `continuesSearch` (issue 34) is kept, and a file
/// written before it existed gains the column with its rows intact.
@Suite("Desktop settings store", .onOwnThreads)
struct DesktopSettingsStoreTests {
    @Test("a registration that continues searches survives a restart; a file from before the column is upgraded")
    func continuesSearchKept() throws {
        let dir = NSTemporaryDirectory() + "desktop-settings-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/supervisor.sqlite"
        do {
            // The table as the previous version wrote it.
            let old = try Database(path: path)
            try old.execute("""
                CREATE TABLE desktop_bundles(bundle TEXT PRIMARY KEY, hidden INTEGER NOT NULL DEFAULT 0, open_with TEXT, changed REAL NOT NULL);
                INSERT INTO desktop_bundles VALUES ('com.example.old', 1, 'org.example.Old.desktop', 0);
                """)
        }
        do {
            let store = try DesktopSettingsStore(path: path)
            #expect(store.entry("com.example.old") == .init(hidden: true, openWith: "org.example.Old.desktop", continuesSearch: false))
            try store.setOpenWith("com.example.notes", "org.example.Notes.desktop", continuesSearch: true)
            // No app, no continuation.
            try store.setOpenWith("com.example.none", nil, continuesSearch: true)
            #expect(store.entry("com.example.none") == .init())
        }
        let again = try DesktopSettingsStore(path: path)
        #expect(again.entry("com.example.notes") == .init(hidden: false, openWith: "org.example.Notes.desktop", continuesSearch: true))
        #expect(again.entry("com.example.old").hidden)
    }
}
