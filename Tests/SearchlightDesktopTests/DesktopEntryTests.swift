import Foundation
import Testing
@testable import SearchlightDesktop

@Suite("Desktop entries")
struct DesktopEntryTests {
    @Test("the [Desktop Entry] group is read: Name, Icon, Exec, DBusActivatable; other groups and locales are skipped")
    func parse() throws {
        let text = """
            # a comment
            [Desktop Entry]
            Type=Application
            Name=Notes
            Name[de]=Notizen
            Icon=accessories-text-editor
            Exec=notes\\sapp %u
            DBusActivatable=true

            [Desktop Action new]
            Name=New note
            Exec=notes --new
            """
        let entry = try #require(DesktopEntry(parsing: text, path: "/x/notes.desktop"))
        #expect(entry.type == "Application")
        #expect(entry.name == "Notes")
        #expect(entry.icon == "accessories-text-editor")
        #expect(entry.exec == "notes app %u")
        #expect(entry.dbusActivatable)
    }

    @Test("a file without a [Desktop Entry] group is not a desktop entry")
    func notAnEntry() {
        #expect(DesktopEntry(parsing: "[Other]\nName=x\n", path: "/x") == nil)
    }
}
