#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import Testing
import TestThreads

/// The WebPages sample (Extensions/WebPages, built by `make extensions`) launched by the real
/// daemon on a temp folder of real pages from this machine (`/usr/share/doc`), its own sample
/// pages, and hostile ones.
@Suite("WebPages sample: a folder of HTML pages indexed from their markup", .onOwnThreads, .serialized)
struct WebPagesSampleTests {
    static let bundle = "org.searchlight.sample.webpages"
    static var program: String { SampleExtensionTests.root + "/Extensions/WebPages/.build/debug/webpages-extension" }

    /// Up to 6 small HTML pages of /usr/share/doc, copied under `doc/`; their relative paths.
    static func copyRealPages(to pages: String) throws -> [String] {
        guard let walker = FileManager.default.enumerator(atPath: "/usr/share/doc") else { return [] }
        var copied: [String] = []
        while let path = walker.nextObject() as? String, copied.count < 6 {
            let source = "/usr/share/doc/" + path
            guard path.hasSuffix(".html"), !path.split(separator: "/").contains(where: { $0.hasPrefix(".") }),
                  let attributes = try? FileManager.default.attributesOfItem(atPath: source),
                  attributes[.type] as? FileAttributeType == .typeRegular, (attributes[.size] as? Int ?? .max) < 200_000
            else { continue }
            let target = "doc/" + path.replacingOccurrences(of: "/", with: "-")
            try FileManager.default.copyItem(atPath: source, toPath: pages + "/" + target)
            copied.append(target)
        }
        return copied
    }

    func items(_ socket: String) async throws -> [String: SearchableItem] {
        let index = SearchableIndex(bundleIdentifier: Self.bundle, socketPath: socket)
        defer { Task { await index.close() } }
        var out: [String: SearchableItem] = [:]
        let context = SearchQueryContext(fetchAttributes: ["title", "contentURL", "thumbnailURL", "custom"])
        for try await item in SearchQuery(queryString: "uniqueIdentifier == \"*\"", queryContext: context, index: index).results {
            out[item.uniqueIdentifier] = item
        }
        return out
    }

    @Test("reindex-all indexes the real and sample pages, logs each hostile page's reason, and a search by og:description opens the page's file")
    func reindexAll() async throws {
        guard FileManager.default.isExecutableFile(atPath: Self.program) else {
            throw HarnessError("\(Self.program) is not built; run `make extensions` (make test does) before the tests")
        }
        let dir = TempDir("slw")
        let pages = dir.path + "/pages"
        try FileManager.default.createDirectory(atPath: pages + "/doc", withIntermediateDirectories: true)
        for name in ["index.html", "miso-ramen.html", "guides", "images"] {
            try FileManager.default.copyItem(atPath: SampleExtensionTests.root + "/Extensions/WebPages/Sample/pages/" + name, toPath: pages + "/" + name)
        }
        let real = try Self.copyRealPages(to: pages)
        // Hostile pages: too big, nested too deep, a link out of the folder (refused); invalid
        // UTF-8 and a JSON-LD bomb (read with a loss, indexed).
        try Data(repeating: UInt8(ascii: "a"), count: 5 << 20).write(to: URL(fileURLWithPath: pages + "/huge.html"))
        try (String(repeating: "<div>", count: 10_000) + "deep").write(toFile: pages + "/deep.html", atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: dir.path + "/outside", withIntermediateDirectories: true)
        try "<title>secret</title>".write(toFile: dir.path + "/outside/secret.html", atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: pages + "/escape.html", withDestinationPath: "../outside/secret.html")
        // A folder linked from outside is not entered; a link to a page inside the folder is followed.
        try FileManager.default.createSymbolicLink(atPath: pages + "/linked", withDestinationPath: "../outside")
        try FileManager.default.createSymbolicLink(atPath: pages + "/alias.html", withDestinationPath: "miso-ramen.html")
        // Images that are not files inside the folder are never thumbnails (nothing is fetched).
        try FileManager.default.createDirectory(atPath: pages + "/remote", withIntermediateDirectories: true)
        try Data([0x89, 0x50, 0x4E, 0x47]).write(to: URL(fileURLWithPath: dir.path + "/outside/secret.png"))
        try "<title>Remote</title><meta property=og:image content=https://example.org/x.png>"
            .write(toFile: pages + "/remote/web.html", atomically: true, encoding: .utf8)
        try "<title>Outside</title><meta property=og:image content=../../outside/secret.png>"
            .write(toFile: pages + "/remote/outside.html", atomically: true, encoding: .utf8)
        try Data(Array("<title>Caf".utf8) + [0xE9, 0xFF] + Array(" latin</title>".utf8)).write(to: URL(fileURLWithPath: pages + "/latin.html"))
        let bomb = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        try "<title>Bombed</title><script type=application/ld+json>\(bomb)</script>".write(toFile: pages + "/bomb.html", atomically: true, encoding: .utf8)

        // An app that handles the sample index page's app link (example-fieldnotes:).
        let apps = dir.path + "/data/applications"
        try FileManager.default.createDirectory(atPath: apps, withIntermediateDirectories: true)
        try "[Desktop Entry]\nType=Application\nName=Field Notes\nExec=true %u\nMimeType=x-scheme-handler/example-fieldnotes;\n"
            .write(toFile: apps + "/org.example.FieldNotes.desktop", atomically: true, encoding: .utf8)

        try FileManager.default.createDirectory(atPath: dir.path + "/units", withIntermediateDirectories: true)
        try """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
                <key>Label</key><string>\(Self.bundle)</string>
                <key>BundleIdentifier</key><string>\(Self.bundle)</string>
                <key>ProgramArguments</key><array><string>\(Self.program)</string><string>\(pages)</string></array>
                <key>ThrottleInterval</key><integer>0</integer>
                <key>ProcessType</key><string>Standard</string>
            </dict>
            </plist>

            """.write(toFile: dir.path + "/units/\(Self.bundle).plist", atomically: true, encoding: .utf8)
        let daemon = try await DaemonProcess(arguments: ["--units-dir", dir.path + "/units"], dir: dir,
                                             environment: ["XDG_DATA_HOME": dir.path + "/data", "XDG_DATA_DIRS": dir.path + "/none",
                                                           "XDG_CONFIG_HOME": dir.path + "/config", "XDG_CONFIG_DIRS": dir.path + "/none"])
        _ = try await daemon.waitForLog("reindex request acknowledged", timeout: 120)
        // Each hostile page's reason, one line each; the walk went on past them. (The daemon's
        // log quotes the extension's line, so its quotes come escaped.)
        func waitForLine(_ line: String) async throws {
            _ = try await daemon.waitForLog(line.replacingOccurrences(of: "\"", with: "\\\""), timeout: 30)
        }
        try await waitForLine(#"page not indexed page=huge.html reason="the page is 5242880 bytes, over the 4194304-byte limit""#)
        try await waitForLine(#"page not indexed page=deep.html reason="the page nests elements deeper than 512 levels""#)
        try await waitForLine(#"page not indexed page=escape.html reason="a symbolic link leads it out of the folder"#)
        try await waitForLine(#"page read with a loss page=latin.html reason="invalid UTF-8 bytes were replaced with U+FFFD""#)
        try await waitForLine(#"page read with a loss page=bomb.html reason="JSON-LD block 1 nests deeper than 32 levels; skipped""#)
        try await waitForLine("reindex-all done pages=\(real.count + 11) indexed=\(real.count + 8) refused=3")

        let indexed = try await items(daemon.socket)
        #expect(Set(indexed.keys) == Set(real + ["index.html", "miso-ramen.html", "alias.html", "guides/lighthouse-keeping.html", "latin.html", "bomb.html", "remote/web.html", "remote/outside.html"]))
        for page in real { #expect(indexed[page]?.attributeSet.contentURL == URL(fileURLWithPath: pages + "/" + page), "\(page)") }
        #expect(indexed["latin.html"]?.attributeSet.title == "Caf\u{FFFD}\u{FFFD} latin")
        #expect(indexed["alias.html"]?.attributeSet.title == "Miso ramen")
        #expect(indexed["remote/web.html"]?.attributeSet.title == "Remote" && indexed["remote/web.html"]?.attributeSet.thumbnailURL == nil)
        #expect(indexed["remote/outside.html"]?.attributeSet.title == "Outside" && indexed["remote/outside.html"]?.attributeSet.thumbnailURL == nil)
        #expect(!daemon.log.contains { $0.contains("secret") && !$0.contains("page=escape.html") }, "nothing read behind the linked folder")

        // The guide's og:description words find it; it opens as its file, with og:image as thumbnail.
        let r = try await runCLI(["search", Self.bundle, "keepers trimmed wicks", "--json"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        let found = (try JSONValue.parse(r.stdout)["items"]?.arrayValue ?? []).compactMap { $0["uniqueIdentifier"]?.stringValue }
        #expect(found.first == "guides/lighthouse-keeping.html", "\(r.stdout.prefix(1000))")
        let guide = indexed["guides/lighthouse-keeping.html"]?.attributeSet
        #expect(guide?.contentURL == URL(fileURLWithPath: pages + "/guides/lighthouse-keeping.html"))
        #expect(guide?.thumbnailURL == URL(fileURLWithPath: pages + "/images/lighthouse.png"))
        #expect(guide?.title == "Lighthouse keeping")

        // The app link's scheme has a handler: the result opens the deep link in that app.
        let home = indexed["index.html"]?.attributeSet
        #expect(home?.contentURL?.absoluteString == "example-fieldnotes://home")
        #expect(home?[custom: "appLinkHandler"] == .string("org.example.FieldNotes.desktop"))
        #expect(home?[custom: "pageURL"] == .string(URL(fileURLWithPath: pages + "/index.html").absoluteString))

        // reindex-identifiers: a changed page is re-read (named by its path or its file: URL), a
        // removed one leaves the index.
        try "<meta property=og:title content='Miso ramen, revised'>".write(toFile: pages + "/miso-ramen.html", atomically: true, encoding: .utf8)
        try "<title>Groups, revised</title>".write(toFile: pages + "/latin.html", atomically: true, encoding: .utf8)
        try FileManager.default.removeItem(atPath: pages + "/bomb.html")
        let ids = try await runCLI(["reindex", Self.bundle, "--identifiers", "miso-ramen.html", "bomb.html",
                                    URL(fileURLWithPath: pages + "/latin.html").absoluteString], socket: daemon.socket)
        #expect(ids.status == 0, "\(ids.stderr)")
        let after = try await items(daemon.socket)
        #expect(after["miso-ramen.html"]?.attributeSet.title == "Miso ramen, revised")
        #expect(after["bomb.html"] == nil)
        #expect(after["latin.html"]?.attributeSet.title == "Groups, revised")
        #expect(after.count == indexed.count - 1, "no item under the URL itself: \(after.keys.sorted())")
    }
}
