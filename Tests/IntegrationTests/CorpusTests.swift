import Foundation
import Testing
import TestThreads
import SearchlightKit

/// The shared Debian corpus (DESIGN §9) as SearchableItems.
enum Corpus {
    static func load(limit: Int = .max) throws -> [SearchableItem] {
        guard let path = Products.corpus else { return [] }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", "gzip -dc \"$0\"", path]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        var items: [SearchableItem] = []
        for line in data.split(separator: 0x0A) where items.count < limit {
            let o = try JSONValue.parse(Array(line))
            guard let id = o["id"]?.stringValue else { continue }
            var a = AttributeSet(contentType: "org.debian.deb-archive")
            a.title = o["title"]?.stringValue
            a.contentDescription = o["contentDescription"]?.stringValue
            a.textContent = o["textContent"]?.stringValue
            a.keywords = o["keywords"]?.arrayValue?.compactMap(\.stringValue)
            a.contentURL = o["homepage"]?.stringValue.flatMap(URL.init(string:))
            let domain = o["domain"]?.stringValue.map { $0.replacingOccurrences(of: "/", with: ".") }
            items.append(SearchableItem(uniqueIdentifier: id, domainIdentifier: domain, attributeSet: a))
        }
        return items
    }
}

@Suite("Shared corpus through the daemon", .onOwnThreads, .serialized)
struct CorpusTests {
    @Test("the whole Debian corpus is donated by 4 clients and queried", .enabled(if: Products.corpus != nil))
    func donateAndQuery() async throws {
        let items = try Corpus.load()
        #expect(items.count == 63_666)
        let daemon = try await DaemonProcess()
        let started = Date()
        let clients = 4
        try await withThrowingTaskGroup(of: Void.self) { group in
            for c in 0..<clients {
                group.addTask {
                    let index = daemon.index("org.debian.packages")
                    var i = c * 500
                    while i < items.count {
                        try await index.indexSearchableItems(Array(items[i..<min(i + 500, items.count)]))
                        i += clients * 500
                    }
                }
            }
            try await group.waitForAll()
        }
        let seconds = Date().timeIntervalSince(started)
        print("corpus donation: \(items.count) items in \(String(format: "%.1f", seconds)) s = \(Int(Double(items.count) / seconds)) items/s (debug build, 4 clients)")
        let index = daemon.index("org.debian.packages")
        var context = UserQueryContext()
        context.maxSuggestionCount = 5
        context.maxResultCount = 20
        let json = try await UserQuery(userQueryString: "json parser", userQueryContext: context, index: index).run()
        #expect(json.items.count == 20)
        #expect(json.rankedItems.prefix(5).contains { ($0.attributeSet.title ?? "").contains("json") })
        let prefix = try await SearchQuery(queryString: #"title == "python3-*""#, index: index).allItems()
        #expect(prefix.count > 3000)
        #expect(prefix.allSatisfy { $0.attributeSet.title?.hasPrefix("python3-") == true })
        let both = try await SearchQuery(queryString: #"keywords == "game::strategy" && textContent == "real-time"cwd"#, index: index).allItems()
        #expect(both.contains { $0.uniqueIdentifier == "0ad_0.0.26-3_amd64" })
        let typo = try await UserQuery(userQueryString: "postgrse ", userQueryContext: context, index: index).run()
        #expect(typo.suggestions.contains { $0.kind == .correction && $0.text.hasPrefix("postgres") })
        let status = try await daemon.admin().call(Method.adminStatus, ["bundle": "org.debian.packages"])
        #expect(status["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first?["items"] == 63_666)
    }
}
