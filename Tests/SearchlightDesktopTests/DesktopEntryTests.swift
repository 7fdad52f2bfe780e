#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
@testable import SearchlightDesktop
import SearchlightKit

@Suite("Desktop entries", .onOwnThreads)
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

/// Issue 29 (D1): a desktop-file id named by another user (`desktop.register`, a unit's
/// `OpenWith`) must never resolve to a file outside the applications folders, nor to one another
/// user could have written.
@Suite("Desktop-file ids resolve to trusted files only", .onOwnThreads)
struct DesktopEntryLocatorTests {
    /// An applications folder under `dir/share` with a `screensavers/` subfolder (the one
    /// precondition of the attack), and a planted `dir/evil/evil.desktop`.
    func layout() throws -> (dir: String, locator: DesktopEntryLocator) {
        let dir = NSTemporaryDirectory() + "sl-locator-\(UUID().uuidString.prefix(8))"
        let fm = FileManager.default
        try fm.createDirectory(atPath: dir + "/share/applications/screensavers", withIntermediateDirectories: true)
        try fm.createDirectory(atPath: dir + "/home/applications", withIntermediateDirectories: true)
        try fm.createDirectory(atPath: dir + "/evil", withIntermediateDirectories: true)
        try "[Desktop Entry]\nType=Application\nName=Evil\nExec=/bin/sh -c id\n".write(toFile: dir + "/evil/evil.desktop", atomically: true, encoding: .utf8)
        try "[Desktop Entry]\nType=Application\nName=Notes\nExec=notes %u\n"
            .write(toFile: dir + "/share/applications/org.example.Notes.desktop", atomically: true, encoding: .utf8)
        try "[Desktop Entry]\nType=Application\nName=Saver\nExec=saver\n"
            .write(toFile: dir + "/share/applications/screensavers/saver.desktop", atomically: true, encoding: .utf8)
        let locator = DesktopEntryLocator(environment: ["HOME": dir, "XDG_DATA_HOME": dir + "/home", "XDG_DATA_DIRS": dir + "/share"])
        return (dir, locator)
    }

    @Test("ids with '..', empty or hidden components are not ids: refused before any lookup")
    func climbingIDs() throws {
        let (dir, locator) = try layout()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // The reported exploit, aimed at this layout: screensavers/../../../evil/evil.desktop.
        for id in ["screensavers-..-..-..-evil-evil.desktop", "screensavers-..-org.example.Notes.desktop", "a--b.desktop",
                   "-org.example.Notes.desktop", "screensavers-.desktop", "screensavers-.hidden.desktop", "org..Notes.desktop",
                   ".desktop", "../evil.desktop", "evil/evil.desktop"] {
            #expect(locator.path(forDesktopID: id) == nil, "\(id)")
            guard case .failure(.invalidID) = locator.resolve(desktopID: id) else {
                Issue.record("\(id) was not refused as an id: \(locator.resolve(desktopID: id))")
                continue
            }
        }
        // Real ids still resolve, a subfolder's through its '-'.
        #expect(locator.path(forDesktopID: "org.example.Notes.desktop") == realpath(dir + "/share/applications/org.example.Notes.desktop"))
        #expect(locator.path(forDesktopID: "screensavers-saver.desktop") == realpath(dir + "/share/applications/screensavers/saver.desktop"))
        #expect(Names.validDesktopFileID("kde4-dolphin.desktop") && Names.validDesktopFileID("org.gnome.Nautilus.desktop"))
    }

    @Test("a symlink out of the applications folders is refused; one to another applications folder is followed")
    func symlinks() throws {
        let (dir, locator) = try layout()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createSymbolicLink(atPath: dir + "/home/applications/planted.desktop", withDestinationPath: dir + "/evil/evil.desktop")
        guard case .failure(.untrusted(let why)) = locator.resolve(desktopID: "planted.desktop") else {
            Issue.record("a symlink to a file outside the applications folders resolved")
            return
        }
        #expect(why.contains("outside the applications folders"), "\(why)")
        // A Flatpak-style export: a link into another share/applications folder.
        try FileManager.default.createDirectory(atPath: dir + "/app/export/share/applications", withIntermediateDirectories: true)
        try "[Desktop Entry]\nType=Application\nName=Flat\nExec=flat\n".write(toFile: dir + "/app/export/share/applications/org.flat.App.desktop", atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: dir + "/share/applications/org.flat.App.desktop",
                                                   withDestinationPath: dir + "/app/export/share/applications/org.flat.App.desktop")
        #expect(locator.path(forDesktopID: "org.flat.App.desktop") == realpath(dir + "/app/export/share/applications/org.flat.App.desktop"))
    }

    @Test("a file another user owns or everyone may write, or a folder everyone may write, is refused")
    func ownership() throws {
        let (dir, locator) = try layout()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let notes = dir + "/share/applications/org.example.Notes.desktop"
        chmod(notes, 0o666)
        guard case .failure(.untrusted) = locator.resolve(desktopID: "org.example.Notes.desktop") else {
            Issue.record("a world-writable desktop file resolved")
            return
        }
        chmod(notes, 0o644)
        #expect(locator.path(forDesktopID: "org.example.Notes.desktop") != nil)
        chmod(dir + "/share/applications/screensavers", 0o777)
        #expect(locator.path(forDesktopID: "screensavers-saver.desktop") == nil, "a world-writable folder on the way")
        chmod(dir + "/share/applications/screensavers", 0o1777)
        #expect(locator.path(forDesktopID: "screensavers-saver.desktop") != nil, "a sticky folder (like /tmp) is no risk by itself")
        // Another uid's file: only root can make one here.
        if geteuid() == 0 {
            chown(notes, 64_101, 64_101)
            guard case .failure(.untrusted(let why)) = locator.resolve(desktopID: "org.example.Notes.desktop") else {
                Issue.record("another uid's desktop file resolved")
                return
            }
            #expect(why.contains("owned by uid 64101"), "\(why)")
            // ... unless the user opening it is that uid.
            #expect((try? locator.resolve(desktopID: "org.example.Notes.desktop", uid: 64_101).get()) != nil)
        }
    }

    @Test("ItemOpener will not open another user's item unless told to; a unit's declared app is exempt")
    func otherUsersItems() throws {
        let (dir, _) = try layout()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var opener = ItemOpener(environment: ["HOME": dir, "XDG_DATA_HOME": dir + "/home", "XDG_DATA_DIRS": dir + "/share", "PATH": "/usr/bin:/bin"])
        let item = SearchableItemActivity(bundleIdentifier: "com.alice.notes", uniqueIdentifier: "n1")
        let other = UInt32(geteuid()) &+ 1
        #expect(throws: ItemOpener.Failure.self) { _ = try opener.plan(item, openWith: "org.example.Notes.desktop", contentURL: nil, ownerUID: other) }
        #expect(throws: ItemOpener.Failure.self) { _ = try opener.plan(item, openWith: nil, contentURL: "https://example.org", ownerUID: other) }
        let fromUnit = try opener.plan(item, openWith: "org.example.Notes.desktop", contentURL: nil, ownerUID: other, fromUnit: true)
        #expect(fromUnit.action == .application(desktopID: "org.example.Notes.desktop",
                                                path: realpath(dir + "/share/applications/org.example.Notes.desktop")!, uri: item.uri))
        let own = try opener.plan(item, openWith: nil, contentURL: "https://example.org", ownerUID: UInt32(geteuid()))
        #expect(own.action == .contentURL("https://example.org"))
        opener.allowOtherUsersItems = true
        #expect(try opener.plan(item, openWith: nil, contentURL: "https://example.org", ownerUID: other).action == .contentURL("https://example.org"))
    }
}

private func realpath(_ path: String) -> String? {
    guard let p = Glibc.realpath(path, nil) else { return nil }
    defer { free(p) }
    return String(cString: p)
}
