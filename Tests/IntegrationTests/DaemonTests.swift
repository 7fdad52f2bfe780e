#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit

func item(_ id: String, domain: String? = nil, title: String, text: String? = nil, keywords: [String]? = nil) -> SearchableItem {
    var attributes = AttributeSet(contentType: "public.plain-text")
    attributes.title = title
    attributes.textContent = text
    attributes.keywords = keywords
    return SearchableItem(uniqueIdentifier: id, domainIdentifier: domain, attributeSet: attributes)
}

/// A raw protocol client: sends exact bytes, reads answers line by line.
final class RawClient {
    let socket: UnixSocket
    private var decoder = FrameDecoder(maxFrameBytes: 64 << 20)

    init(path: String) throws { socket = try UnixSocket.connect(path: path) }
    deinit { socket.close() }

    func send(_ text: String) throws { try socket.writeAll(Array(text.utf8)) }

    /// The next answer, or nil when the daemon closed the connection.
    func next() throws -> JSONValue? {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            if let frame = try decoder.next() { return try JSONValue.parse(frame) }
            let n = try buffer.withUnsafeMutableBytes { try socket.read(into: $0) }
            if n == 0 { return nil }
            decoder.append(Array(buffer[..<n]))
        }
    }

    func call(_ id: Int, _ method: String, _ params: JSONValue) throws -> JSONValue? {
        let message = RPCMessage.request(id: .number(id), method: method, params: params)
        try socket.writeAll(message.frame())
        return try next()
    }

    func initialize(bundle: String = "com.example.raw") throws {
        let r = try call(0, "initialize", ["protocolVersion": 1, "role": "app", "bundleIdentifier": .string(bundle)])
        precondition(r?["result"] != nil, "initialize failed: \(String(describing: r))")
    }
}

@Suite("Daemon through the SDK", .onOwnThreads, .serialized)
struct DaemonSDKTests {
    @Test("donate, search with the query language, user query, and delete")
    func roundTrip() async throws {
        let daemon = try await DaemonProcess()
        let index = daemon.index("com.example.notes")
        try await index.indexSearchableItems([
            item("1", domain: "work.a", title: "Natural Bridges trip", keywords: ["Natural Bridges", "Utah"]),
            item("2", domain: "work.b", title: "星球大战 notes"),
            item("3", domain: "home", title: "Crème brûlée recipe", text: "eggs, cream, sugar"),
        ])
        let q = SearchQuery(queryString: #"(keywords == "Natural Bridges*"cwdt)"#, index: index)
        #expect(try await q.allItems().map(\.uniqueIdentifier) == ["1"])
        let cjk = SearchQuery(queryString: #"(title == "*星球*"cd)"#, queryContext: SearchQueryContext(fetchAttributes: ["title"]), index: index)
        let found = try await cjk.allItems()
        #expect(found.map(\.uniqueIdentifier) == ["2"])
        #expect(found.first?.attributeSet.title == "星球大战 notes")
        #expect(found.first?.attributeSet.contentType == nil, "only fetched attributes are returned")
        var context = UserQueryContext()
        context.maxSuggestionCount = 3
        let user = try await UserQuery(userQueryString: "creme bru", userQueryContext: context, index: index).run()
        #expect(user.items.map(\.uniqueIdentifier) == ["3"])
        #expect(user.suggestions.first?.text == "creme brulee")
        try await index.deleteSearchableItems(withDomainIdentifiers: ["work"])
        #expect(try await SearchQuery(queryString: #"uniqueIdentifier == "*""#, index: index).allItems().map(\.uniqueIdentifier) == ["3"])
    }

    @Test("a batch commits with its client state, and a stale expectation applies nothing")
    func batches() async throws {
        let daemon = try await DaemonProcess()
        let index = daemon.index("com.example.journal")
        try await index.beginBatch()
        try await index.indexSearchableItems([item("e1", title: "first entry")])
        try await index.endBatch(expectedClientState: .some(nil), newClientState: Data("v1".utf8))
        #expect(try await index.fetchLastClientState() == Data("v1".utf8))
        try await index.beginBatch()
        try await index.indexSearchableItems([item("e2", title: "second entry")])
        await #expect(throws: SearchlightError.self) {
            try await index.endBatch(expectedClientState: Data("v0".utf8), newClientState: Data("v2".utf8))
        }
        #expect(try await index.fetchLastClientState() == Data("v1".utf8))
        #expect(try await SearchQuery(queryString: #"title == "*entry*"c"#, index: index).allItems().count == 1)
    }

    @Test("errors carry the documented codes")
    func errorCodes() async throws {
        let daemon = try await DaemonProcess()
        let index = daemon.index("com.example.errors")
        do {
            _ = try await SearchQuery(queryString: #"title == "unterminated"#, index: index).allItems()
            Issue.record("bad query accepted")
        } catch let e as SearchlightError {
            #expect(e.code == .invalidQuery)
            #expect(e.data?["offset"]?.intValue != nil)
        }
        var bad = item("x", title: "t")
        bad.attributeSet[attribute: "rankingHint"] = 500
        do {
            try await index.indexSearchableItems([item("ok", title: "fine"), bad])
            Issue.record("invalid item accepted")
        } catch let e as SearchlightError {
            #expect(e.code == .invalidItem)
            #expect(e.message.contains("item 1"))
        }
        #expect(try await SearchQuery(queryString: #"uniqueIdentifier == "ok""#, index: index).allItems().isEmpty,
            "one invalid item fails the whole call")
        do {
            try await index.endBatch(newClientState: Data())
            Issue.record("endBatch without beginBatch accepted")
        } catch let e as SearchlightError {
            #expect(e.code == .invalidRequest)
        }
        let unreachable = SearchableIndex(bundleIdentifier: "com.example.errors", socketPath: daemon.dir.path + "/nobody.sock")
        do {
            try await unreachable.deleteAllSearchableItems()
            Issue.record("unreachable daemon did not fail")
        } catch let e as SearchlightError {
            #expect(e.code == .remoteConnection)
        }
    }

    @Test("an acknowledged write survives kill -9 of the daemon", arguments: 1...3)
    func killAfterAcknowledgement(round: Int) async throws {
        let daemon = try await DaemonProcess()
        let index = daemon.index("com.example.durable")
        try await index.beginBatch()
        try await index.indexSearchableItems((0..<50).map { item("r\(round)-\($0)", title: "durable \($0)") })
        try await index.endBatch(newClientState: Data("state-\(round)".utf8))
        await daemon.stop(signal: SIGKILL)
        try await daemon.start()
        let again = daemon.index("com.example.durable")
        #expect(try await again.fetchLastClientState() == Data("state-\(round)".utf8))
        #expect(try await SearchQuery(queryString: #"title == "durable*"c"#, index: again).allItems().count == 50)
    }

    @Test("expired items are invisible at once and purged when the index is next opened")
    func expiredPurged() async throws {
        let daemon = try await DaemonProcess()
        let index = daemon.index("com.example.expiry")
        var old = item("old", title: "stale")
        old.expirationDate = Date(timeIntervalSinceNow: -60)
        try await index.indexSearchableItems([old, item("new", title: "fresh")])
        #expect(try await SearchQuery(queryString: #"uniqueIdentifier == "*""#, index: index).allItems().map(\.uniqueIdentifier) == ["new"])
        let mark = daemon.log.count
        try await daemon.restart()
        #expect(try await SearchQuery(queryString: #"uniqueIdentifier == "*""#, index: daemon.index("com.example.expiry")).allItems().count == 1)
        let line = try await daemon.waitForLog("expired items purged", after: mark)
        #expect(line.contains("items=1"))
    }

    @Test("one SearchableIndex keeps working across a daemon restart")
    func reconnects() async throws {
        let daemon = try await DaemonProcess()
        let index = daemon.index("com.example.reconnect")
        try await index.indexSearchableItems([item("a", title: "before")])
        await daemon.stop(signal: SIGKILL)
        await #expect(throws: SearchlightError.self) { try await index.indexSearchableItems([item("b", title: "down")]) }
        try await daemon.start()
        try await index.indexSearchableItems([item("c", title: "after")])
        #expect(try await SearchQuery(queryString: #"uniqueIdentifier == "*""#, index: index).allItems().map(\.uniqueIdentifier).sorted() == ["a", "c"])
    }

    @Test("SIGTERM stops the daemon gracefully and removes its socket")
    func gracefulStop() async throws {
        let daemon = try await DaemonProcess()
        try await daemon.index("com.example.stop").indexSearchableItems([item("a", title: "a")])
        await daemon.stop(signal: SIGTERM)
        try await daemon.waitForLog("searchlightd stopped", timeout: 10)
        #expect(access(daemon.socket, F_OK) != 0)
    }
}

@Suite("Hostile input on the socket", .onOwnThreads, .serialized)
struct HostileInputTests {
    @Test("malformed lines get JSON-RPC errors and the connection stays usable")
    func malformed() throws {
        let daemon = try DaemonProcess()
        let c = try RawClient(path: daemon.socket)
        try c.send("this is not json\n")
        #expect(try c.next()?["error"]?["code"] == -32700)
        try c.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"index.items\",\"params\":{}}\n")
        #expect(try c.next()?["error"]?["code"] == -32600, "calls before initialize are refused")
        try c.initialize()
        try c.send("[1,2,3]\n")
        #expect(try c.next()?["error"]?["code"] == -32600)
        #expect(try c.call(2, "index.items", ["items": "nope"])?["error"]?["code"] == -32602)
        #expect(try c.call(3, "index.items", ["items": [["uniqueIdentifier": 5]]])?["error"]?["code"] == -1001)
        #expect(try c.call(4, "no.such.method", [:])?["error"]?["code"] == -32601)
        #expect(try c.call(5, "index.deleteIdentifiers", ["identifiers": .array((0..<10_001).map { .string("i\($0)") })])?["error"]?["code"] == -32602)
        #expect(try c.call(6, "query.search", ["query": .string(String(repeating: "(", count: 100) + "a == 1")])?["error"]?["code"] == -2002)
        try c.send("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"index.items\",\"params\":{\"items\":[{\"uniqueIdentifier\":\"\u{FF}\"}]}}\n")
        #expect(try c.next()?["result"] != nil)
        var invalidUTF8 = Array("{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"x\",\"params\":{\"a\":\"".utf8)
        invalidUTF8 += [0xC3, 0x28]
        invalidUTF8 += Array("\"}}\n".utf8)
        try c.socket.writeAll(invalidUTF8)
        #expect(try c.next()?["error"]?["code"] == -32700)
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        try c.send("{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"x\",\"params\":{\"a\":\(deep)}}\n")
        #expect(try c.next()?["error"]?["code"] == -32700, "nesting beyond the limit is a parse error, not a crash")
        #expect(try c.call(10, "index.items", ["items": [["uniqueIdentifier": "still-works"]]])?["result"]?["indexed"] == 1)
    }

    @Test("64 clients donate and query at once, each sees its own writes")
    func manyClients() async throws {
        let daemon = try await DaemonProcess()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for c in 0..<64 {
                group.addTask {
                    let index = daemon.index("com.example.many\(c % 8)")
                    try await index.indexSearchableItems((0..<20).map { item("c\(c)-\($0)", title: "client \(c)") })
                    let mine = try await SearchQuery(queryString: "uniqueIdentifier == \"c\(c)-*\"", index: index).allItems()
                    #expect(mine.count == 20)
                    await index.close()
                }
            }
            try await group.waitForAll()
        }
        let status = try await daemon.admin().call(Method.adminStatus, [:])
        let total = status["bundles"]?.arrayValue?.compactMap { $0["indexes"]?.arrayValue?.first?["items"]?.intValue }.reduce(0, +)
        #expect(total == 64 * 20)
    }

    @Test("connections beyond --max-connections are refused with an error, the others go on")
    func connectionLimit() async throws {
        let daemon = try await DaemonProcess(arguments: ["--max-connections", "2"])
        let a = try RawClient(path: daemon.socket)
        let b = try RawClient(path: daemon.socket)
        try a.initialize()
        try b.initialize()
        let c = try RawClient(path: daemon.socket)
        let refusal = try c.next()
        #expect(refusal?["error"]?["message"]?.stringValue?.contains("connections") == true)
        #expect(try c.next() == nil, "then the daemon closes it")
        #expect(try a.call(1, "index.items", ["items": [["uniqueIdentifier": "x"]]])?["result"] != nil)
        try await daemon.waitForLog("connection refused: too many connections")
    }

    @Test("a newer protocol version is refused with a clear error")
    func newerVersion() throws {
        let daemon = try DaemonProcess()
        let c = try RawClient(path: daemon.socket)
        let r = try c.call(1, "initialize", ["protocolVersion": 2, "role": "app", "bundleIdentifier": "com.x"])
        #expect(r?["error"]?["code"] == -32600)
        #expect(r?["error"]?["message"]?.stringValue?.contains("protocolVersion 2") == true)
        #expect(try c.call(2, "initialize", ["protocolVersion": 1, "role": "app", "bundleIdentifier": "../../etc"])?["error"]?["code"] == -32602)
        #expect(try c.call(3, "initialize", ["protocolVersion": 1, "role": "app", "bundleIdentifier": "com.x", "future": ["field": 1]])?["result"] != nil,
            "unknown fields are ignored")
    }

    @Test("an oversized frame closes only that connection, with a logged reason")
    func oversized() async throws {
        let daemon = try await DaemonProcess(arguments: ["--max-frame-bytes", "65536"])
        let other = daemon.index("com.example.other")
        try await other.indexSearchableItems([item("before", title: "before")])
        let c = try RawClient(path: daemon.socket)
        try c.initialize()
        try c.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"index.items\",\"params\":{\"pad\":\"" + String(repeating: "x", count: 100_000))
        #expect(try c.next() == nil, "the daemon closed the connection")
        try await daemon.waitForLog("frame larger than 65536 bytes")
        try await other.indexSearchableItems([item("after", title: "after")])
        #expect(try await SearchQuery(queryString: #"uniqueIdentifier == "*""#, index: other).allItems().count == 2)
    }

    @Test("a client stalled mid-frame does not stall other clients")
    func slowClient() async throws {
        let daemon = try await DaemonProcess()
        let stalled = try RawClient(path: daemon.socket)
        try stalled.initialize()
        try stalled.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"index.items\",\"params\":{\"items\":[")
        let index = daemon.index("com.example.fast")
        for i in 0..<20 { try await index.indexSearchableItems([item("f\(i)", title: "fast")]) }
        #expect(try await SearchQuery(queryString: #"title == "fast""#, index: index).allItems().count == 20)
        try stalled.send("]}}\n")
        #expect(try stalled.next()?["result"] != nil)
    }

    @Test("a frame left half-sent past --incomplete-frame-timeout closes that connection; an idle one stays")
    func incompleteFrame() async throws {
        let daemon = try await DaemonProcess(arguments: ["--incomplete-frame-timeout", "1"])
        let idle = try RawClient(path: daemon.socket)
        try idle.initialize()
        let stalled = try RawClient(path: daemon.socket)
        try stalled.initialize()
        try stalled.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"index.items\",")
        #expect(try stalled.next() == nil, "closed by the daemon")
        try await daemon.waitForLog("a frame was left unfinished for 1 s")
        #expect(try idle.call(2, "index.items", ["items": [["uniqueIdentifier": "idle-but-alive"]]])?["result"] != nil)
    }

    @Test("the admin role is refused to other users and the bundle is private to its writer")
    func adminAndBundles() throws {
        let daemon = try DaemonProcess()
        let c = try RawClient(path: daemon.socket)
        // Same uid as the daemon: admin is allowed.
        #expect(try c.call(1, "initialize", ["protocolVersion": 1, "role": "admin"])?["result"] != nil)
        #expect(try c.call(2, "admin.status", [:])?["result"]?["mode"] == "user")
        let app = try RawClient(path: daemon.socket)
        try app.initialize()
        #expect(try app.call(3, "admin.status", [:])?["error"]?["code"] == -3001)
    }
}
