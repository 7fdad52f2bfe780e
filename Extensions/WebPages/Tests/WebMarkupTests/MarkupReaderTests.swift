import Foundation
import Testing
@testable import WebMarkup

func read(_ html: String, limits: MarkupLimits = MarkupLimits()) throws -> PageMarkup {
    try MarkupReader(limits: limits).read(Array(html.utf8))
}

@Suite("the markup a page is indexed from")
struct MarkupReaderTests {
    @Test("schema.org JSON-LD gives title, description, keywords, authors, dates and image, before Open Graph and <title>")
    func jsonLD() throws {
        let page = try read("""
            <!DOCTYPE html><html><head><title>Site | Fallback</title>
            <meta property="og:title" content="OG title"><meta name="description" content="meta description">
            <script type="application/ld+json">
            {"@context": "https://schema.org", "@graph": [
              {"@type": "WebSite", "url": "https://example.org"},
              {"@type": ["TechArticle"], "headline": "Building  a\\nparser", "description": "How the parser reads JSON.",
               "keywords": "json, parser ,swift", "author": [{"@type": "Person", "name": "Ada"}, "Brian"],
               "datePublished": "2024-03-01", "image": {"@type": "ImageObject", "url": "img/cover.png"}}]}
            </script></head><body><p>Body text</p></body></html>
            """)
        #expect(page.title == "Building a parser")
        #expect(page.alternateTitles == ["OG title", "Site | Fallback"])
        #expect(page.description == "How the parser reads JSON.")
        #expect(page.otherDescriptions == ["meta description"])
        #expect(page.keywords == ["json", "parser", "swift"])
        #expect(page.authors == ["Ada", "Brian"])
        #expect(page.datePublished == "2024-03-01")
        #expect(page.image == "img/cover.png")
        #expect(page.types == ["WebSite", "TechArticle"])
        #expect(page.text == "Body text")
    }

    @Test("microdata: itemprop values from text, meta content, time datetime, and a nested Person's name")
    func microdata() throws {
        let page = try read("""
            <div itemscope itemtype="https://schema.org/Recipe">
              <h1 itemprop="name">Miso <b>ramen</b></h1>
              <p itemprop="description">A quick &amp; warm soup.</p>
              <meta itemprop="keywords" content="soup, japanese">
              <time itemprop="datePublished" datetime="2024-01-09">January 9</time>
              <span itemprop="author" itemscope itemtype="https://schema.org/Person"><span itemprop="name">Kenji</span></span>
              <img itemprop="image" src="ramen.jpg">
            </div>
            """)
        #expect(page.title == "Miso ramen")
        #expect(page.description == "A quick & warm soup.")
        #expect(page.keywords == ["soup", "japanese"])
        #expect(page.datePublished == "2024-01-09")
        #expect(page.authors == ["Kenji"])
        #expect(page.image == "ramen.jpg")
        #expect(page.types == ["Recipe"])
    }

    @Test("Open Graph over <title> and <meta name=description>; og:image is the image; al: links in order")
    func openGraph() throws {
        let page = try read("""
            <head><title>Plain title</title><meta name="description" content="plain">
            <meta property="og:title" content="Graph title"><meta property="og:description" content="lighthouse keepers &amp; their logs">
            <meta property="og:image" content="pics/lighthouse.png"><meta property="article:tag" content="sea">
            <meta property="al:ios:url" content="example-notes://note/7"><meta property="al:android:url" content="example-notes://note/7a">
            <meta name="keywords" content="coast, light"></head>
            """)
        #expect(page.title == "Graph title")
        #expect(page.description == "lighthouse keepers & their logs")
        #expect(page.image == "pics/lighthouse.png")
        #expect(page.keywords == ["sea", "coast", "light"])
        #expect(page.appLinks == ["example-notes://note/7a", "example-notes://note/7"])  // by key: android, ios
    }

    @Test("only <title> and <meta name=description>: they are used")
    func fallbacks() throws {
        let page = try read("<title>  Users &amp; Groups\n</title><meta name=description content='who owns what'><h1>Users</h1>")
        #expect(page.title == "Users & Groups")
        #expect(page.description == "who owns what")
        #expect(page.text == "Users")
    }

    @Test("the visible text leaves out head, script and style, and separates blocks but not inline elements")
    func visibleText() throws {
        let page = try read("<head><style>p{}</style></head><body><p>one<b>two</b></p><p>three</p><script>var x = '</p>';</script>four</body>")
        #expect(page.text == "onetwo three four")
    }
}

@Suite("hostile pages: a clear error or a warning, never a crash or a hang")
struct HostilePageTests {
    @Test("a page over the size limit is refused, saying so")
    func huge() throws {
        var limits = MarkupLimits()
        limits.maxPageBytes = 1000
        #expect(throws: MarkupError("the page is 1001 bytes, over the 1000-byte limit")) {
            try read(String(repeating: "a", count: 1001), limits: limits)
        }
    }

    @Test("10 000 nested elements are refused at the depth limit")
    func deepNesting() throws {
        let html = String(repeating: "<div>", count: 10_000) + "x" + String(repeating: "</div>", count: 10_000)
        #expect(throws: MarkupError("the page nests elements deeper than 512 levels")) { try read(html) }
    }

    @Test("10 000 unclosed <p>, <li> and void elements are not nesting")
    func unclosedSiblings() throws {
        let html = "<title>Long list</title><ul>" + String(repeating: "<li><p>item<br><img src=x>", count: 10_000) + String(repeating: "<p><b>bold", count: 10_000) + "</ul>"
        let page = try read(html)
        #expect(page.title == "Long list")
        #expect(page.text.hasPrefix("item item"))
    }

    @Test("too many elements are refused")
    func manyElements() throws {
        var limits = MarkupLimits()
        limits.maxElements = 100
        #expect(throws: MarkupError("the page has more than 100 elements")) { try read(String(repeating: "<br>", count: 101), limits: limits) }
    }

    @Test("malformed markup reads as a browser would: unterminated tags, quotes, comments and entities")
    func malformed() throws {
        for html in ["<title>T</title><p class=\"unterminated>text", "<title>T</title><!-- never closed <p>x", "<title>T</title><a href='x",
                     "<title>T</title></p></div></></ x><<<>>&#xFFFFFFFF;&#0;&bogus;&", "<title>T</title><script>never closed",
                     "<title>T</title><p =x ==y a=b a=c>t</p>", "<title>T</title><!DOCTYPE", "<title>T</title><"] {
            let page = try read(html)
            #expect(page.title == "T", "\(html)")
        }
        #expect(try read("<title>T</title>x &#xFFFFFFFF; &#0; &#xD800; y").text == "x \u{FFFD} \u{FFFD} \u{FFFD} y")
    }

    @Test("invalid UTF-8 is read with U+FFFD and a warning")
    func invalidUTF8() throws {
        let page = try MarkupReader().read(Array("<title>caf".utf8) + [0xE9, 0xFF] + Array("</title>".utf8))
        #expect(page.title == "caf\u{FFFD}\u{FFFD}")
        #expect(page.warnings == ["invalid UTF-8 bytes were replaced with U+FFFD"])
    }

    @Test("a JSON-LD bomb (100 000 nested arrays) is skipped with a warning; the page's other markup is read")
    func jsonLDBomb() throws {
        let bomb = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        let page = try read("<title>Bombed</title><script type=application/ld+json>\(bomb)</script><meta property=og:description content=kept>")
        #expect(page.title == "Bombed" && page.description == "kept")
        #expect(page.warnings == ["JSON-LD block 1 nests deeper than 32 levels; skipped"])
    }

    @Test("an oversized or invalid JSON-LD block is skipped with a warning")
    func jsonLDOversized() throws {
        let big = "{\"@type\": \"Thing\", \"name\": \"" + String(repeating: "x", count: 300_000) + "\"}"
        let page = try read("<script type='application/ld+json'>\(big)</script><script type='application/ld+json'>{nope</script><title>T</title>")
        #expect(page.title == "T")
        #expect(page.warnings == ["JSON-LD block 1 is 300030 bytes, over the 262144-byte limit; skipped", "JSON-LD block 2 is not valid JSON; skipped"])
    }

    @Test("a page's text is capped, with a warning")
    func textCap() throws {
        var limits = MarkupLimits()
        limits.maxTextBytes = 100
        let page = try read("<p>" + String(repeating: "word ", count: 10) + "</p><p>" + String(repeating: "more ", count: 100) + "</p>", limits: limits)
        #expect(page.text.utf8.count <= 100)
        #expect(page.warnings == ["the page's text is over 100 bytes; the rest is not indexed"])
    }
}

@Suite("character sets and references")
struct DecodingTests {
    @Test("<meta charset=iso-8859-1> reads as windows-1252; a UTF-16 BOM wins; no declaration is UTF-8")
    func charsets() throws {
        let latin = Array("<meta charset=\"ISO-8859-1\"><title>Caf".utf8) + [0xE9, 0x20, 0x93, 0x71, 0x94] + Array("</title>".utf8)
        #expect(try MarkupReader().read(latin).title == "Café \u{201C}q\u{201D}")
        let http = Array("<meta http-equiv=Content-Type content='text/html; charset=windows-1252'><title>".utf8) + [0xFC] + Array("</title>".utf8)
        #expect(try MarkupReader().read(http).title == "ü")
        let utf16: [UInt8] = [0xFF, 0xFE] + "<title>Ünïcode</title>".utf16.flatMap { (u: UInt16) -> [UInt8] in [UInt8(u & 0xFF), UInt8(u >> 8)] }
        #expect(try MarkupReader().read(utf16).title == "Ünïcode")
        #expect(try read("<title>Ünïcode</title>").title == "Ünïcode")
        let unknown = try read("<meta charset=koi8-r><title>x</title>")
        #expect(unknown.warnings == ["the charset \"koi8-r\" is not supported; read as UTF-8"])
    }

    @Test("named, numeric and legacy references; in attributes `&copy=` stays as written")
    func entities() {
        #expect(HTMLEntities.decode(ArraySlice("&lt;a&gt; &amp; &eacute;t&eacute; &#233; &#xE9; &copy 2024 &unknown; &hellip;".utf8), inAttribute: false)
            == "<a> & été é é © 2024 &unknown; …")
        #expect(HTMLEntities.decode(ArraySlice("?a=1&copy=2&lt;".utf8), inAttribute: true) == "?a=1&copy=2<")
    }

    @Test("the tokenizer: lowercased names, first duplicate attribute wins, raw text in <script>, RCDATA in <title>")
    func tokens() {
        var tokenizer = HTMLTokenizer(utf8: Array("<DIV Class=a class=b data-x='1'/><script>a</p>&amp;</SCRIPT ><title>&amp;</title>".utf8))
        var tokens: [HTMLToken] = []
        while let t = tokenizer.next() { tokens.append(t) }
        #expect(tokens == [.startTag(name: "div", attributes: [("class", "a"), ("data-x", "1")], selfClosing: true),
                           .startTag(name: "script", attributes: [], selfClosing: false), .text("a</p>&amp;"), .endTag(name: "script"),
                           .startTag(name: "title", attributes: [], selfClosing: false), .text("&"), .endTag(name: "title")])
    }
}

@Suite("app links: the desktop file that handles the scheme")
struct SchemeHandlerTests {
    @Test("mimeapps.list's default wins, then a desktop file's MimeType; web and local schemes are never app links")
    func lookup() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("webmarkup-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let apps = dir + "/data/applications"
        try FileManager.default.createDirectory(atPath: apps, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir + "/config", withIntermediateDirectories: true)
        let entry = { (mime: String) in "[Desktop Entry]\nType=Application\nName=N\nExec=n %u\nMimeType=\(mime);\n" }
        try entry("x-scheme-handler/example-notes").write(toFile: apps + "/org.example.Notes.desktop", atomically: true, encoding: .utf8)
        try entry("x-scheme-handler/example-notes").write(toFile: apps + "/org.example.Other.desktop", atomically: true, encoding: .utf8)
        let handlers = SchemeHandlers(environment: ["HOME": dir, "XDG_DATA_HOME": dir + "/data", "XDG_DATA_DIRS": dir + "/none",
                                                    "XDG_CONFIG_HOME": dir + "/config", "XDG_CONFIG_DIRS": dir + "/none"])
        #expect(handlers.desktopID(forScheme: "example-notes") == "org.example.Notes.desktop")
        try "[Default Applications]\nx-scheme-handler/example-notes=org.example.Missing.desktop;org.example.Other.desktop\n"
            .write(toFile: dir + "/config/mimeapps.list", atomically: true, encoding: .utf8)
        #expect(handlers.desktopID(forScheme: "Example-Notes") == "org.example.Other.desktop")
        #expect(handlers.desktopID(forScheme: "nobody-handles-this") == nil)
        for scheme in ["http", "https", "file", "javascript", "data", "searchlight-item", "1bad", "a b", ""] {
            #expect(!SchemeHandlers.isAppScheme(scheme), "\(scheme)")
        }
    }
}
