#if canImport(Glibc)
import Glibc
#endif
import Foundation
import RecentFilesCore
import Testing

/// Reading recently-used.xbel and turning it into activities, without a daemon.
@Suite("Recent files: reading the XBEL file")
struct RecentFilesCoreTests {
    static let sample = """
        <?xml version="1.0" encoding="UTF-8"?>
        <xbel version="1.0" xmlns:bookmark="http://www.freedesktop.org/standards/desktop-bookmarks"
              xmlns:mime="http://www.freedesktop.org/standards/shared-mime-info">
          <bookmark href="file:///home/u/trip%20plan.txt" added="2026-11-01T10:00:00.123456Z" modified="2026-11-02T10:00:00Z" visited="2026-11-03T10:00:00Z">
            <info><metadata owner="http://freedesktop.org">
              <mime:mime-type type="text/plain"/>
              <bookmark:applications>
                <bookmark:application name="gedit" exec="&apos;gedit %u&apos;" modified="2026-11-03T10:00:00.5Z" count="3"/>
                <bookmark:application name="Mystery" exec="&apos;mystery %u&apos;" modified="2026-11-02T09:00:00Z" count="1"/>
              </bookmark:applications>
            </metadata></info>
          </bookmark>
          <bookmark href="sftp://host/remote.txt" added="2026-11-01T10:00:00Z" modified="2026-11-01T10:00:00Z" visited="2026-11-01T10:00:00Z"/>
        </xbel>
        """

    func temp() -> String {
        var template = Array("/tmp/slrf-XXXXXX".utf8CString)
        return template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
    }

    @Test("bookmarks, their MIME type and applications are read; GLib's six-digit fractions are dates")
    func reads() throws {
        let b = try XBELReader().parse(Array(Self.sample.utf8))
        #expect(b.count == 2)
        #expect(b[0].href == "file:///home/u/trip%20plan.txt" && b[0].mimeType == "text/plain")
        #expect(b[0].added == ISO8601DateFormatter().date(from: "2026-11-01T10:00:00Z"))
        #expect(b[0].applications.map(\.name) == ["gedit", "Mystery"] && b[0].applications[0].count == 3)
        #expect(b[0].applications[0].program == "gedit")
    }

    @Test("an application maps to the bundle of the desktop file running its program; others to the fallback; only file: URIs")
    func plan() throws {
        let dir = temp()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "[Desktop Entry]\nType=Application\nName=Text Editor\nExec=/usr/bin/gedit %U\n"
            .write(toFile: dir + "/org.gnome.gedit.desktop", atomically: true, encoding: .utf8)
        try "[Desktop Entry]\nType=Application\nName=Mystery\nExec=mystery %u\n".write(toFile: dir + "/mystery.desktop", atomically: true, encoding: .utf8)
        let plan = RecentActivityPlan(fallbackBundle: "org.searchlight.sample.recentfiles", applications: ApplicationMap(folders: [dir]))
        let activities = plan.activities(try XBELReader().parse(Array(Self.sample.utf8)))
        #expect(activities.map(\.bundle) == ["org.gnome.gedit", "org.searchlight.sample.recentfiles"], "\(activities)")
        #expect(activities[0].title == "trip plan.txt" && activities[0].contentType == "public.plain-text" && activities[0].count == 3)
        #expect(activities[0].persistentIdentifier == "recent:file:///home/u/trip%20plan.txt")
        #expect(activities[0].lastUsed == ISO8601DateFormatter().date(from: "2026-11-03T10:00:00Z"))
        // Under a system daemon: every file in the sample's own bundle, none in another app's.
        let own = plan.activities(try XBELReader().parse(Array(Self.sample.utf8)), ownBundleOnly: true)
        #expect(!own.isEmpty && own.allSatisfy { $0.bundle == "org.searchlight.sample.recentfiles" }, "\(own)")
        #expect(Set(own.map(\.persistentIdentifier)).count == own.count, "one activity per file: \(own)")
    }

    @Test("hostile files are refused with a clear error: malformed, not UTF-8, not XBEL, too many bookmarks, too large, a link, another user's")
    func hostile() throws {
        func refused(_ bytes: [UInt8], _ reader: XBELReader = XBELReader(), _ expected: String, sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(throws: RecentFilesError.self, sourceLocation: sourceLocation) { try reader.parse(bytes) }
            do { _ = try reader.parse(bytes) } catch { #expect(error.description.contains(expected), "\(error)") }
        }
        refused(Array("<xbel><bookmark href='file:///a'>".utf8), XBELReader(), "not well-formed")
        refused(Array("<xbel>".utf8) + [0xFF, 0xFE, 0x80] + Array("</xbel>".utf8), XBELReader(), "not UTF-8")
        refused(Array("<html></html>".utf8), XBELReader(), "not an XBEL file")
        var few = XBELReader()
        few.maxBookmarks = 2
        refused(Array(("<xbel>" + String(repeating: "<bookmark href='file:///a'/>", count: 3) + "</xbel>").utf8), few, "more than 2 bookmarks")
        refused(Array(("<xbel>" + String(repeating: "<a>", count: 100) + String(repeating: "</a>", count: 100) + "</xbel>").utf8), XBELReader(), "deeper than 64")

        let dir = temp()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/recently-used.xbel"
        try Self.sample.write(toFile: path, atomically: true, encoding: .utf8)
        var small = XBELReader()
        small.maxBytes = 100
        #expect(throws: RecentFilesError.self) { try small.read(path: path) }
        symlink(path, dir + "/link.xbel")
        do { _ = try XBELReader().read(path: dir + "/link.xbel"); Issue.record("a symbolic link was read") } catch {
            #expect(error.description.contains("symbolic link"), "\(error)")
        }
        var other = XBELReader()
        other.owner = geteuid() + 1
        do { _ = try other.read(path: path); Issue.record("another user's file was read") } catch {
            #expect(error.description.contains("another user's file is never read"), "\(error)")
        }
        #expect(try XBELReader().read(path: dir + "/absent.xbel").isEmpty)
        #expect(try XBELReader().read(path: path).count == 2)
    }
}
