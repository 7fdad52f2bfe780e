import Foundation
import SearchlightKit
import Testing
import TestThreads

/// What an app's calls put on the wire and how it reads the answers, against `FakeDaemon`.
@Suite("SDK clients", .timeLimit(.minutes(1)), .onOwnThreads)
struct ClientTests {
    static func item(_ id: String, _ title: String) -> JSONValue {
        ["uniqueIdentifier": .string(id), "attributeSet": ["title": .string(title)]]
    }

    @Test("the handshake names the role, the bundle and protocol version 1; index calls name the index only when it has a name")
    func handshake() async throws {
        let daemon = try FakeDaemon()
        defer { daemon.stop() }
        let index = SearchableIndex(name: "mail", bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        var attributes = AttributeSet(contentType: "public.plain-text")
        attributes.title = "hello"
        try await index.indexSearchableItems([SearchableItem(uniqueIdentifier: "a", attributeSet: attributes)])
        let byDefault = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        try await byDefault.deleteSearchableItems(withIdentifiers: ["a"])
        await index.close()
        await byDefault.close()

        let hello = try #require(daemon.calls(Method.initialize).first)
        #expect(hello["role"] == "app")
        #expect(hello["bundleIdentifier"] == "org.example.kit")
        #expect(hello["protocolVersion"]?.intValue == 1)
        let items = try #require(daemon.calls(Method.indexItems).first)
        #expect(items["index"] == "mail")
        let sent = items["items"]?.arrayValue?.first
        #expect(sent?["uniqueIdentifier"] == "a")
        #expect(sent?["attributeSet"]?["title"] == "hello")
        let delete = try #require(daemon.calls(Method.indexDeleteIdentifiers).first)
        #expect(delete["index"] == nil, "the default index is not named: \(delete)")
        #expect(delete["identifiers"] == ["a"])
    }

    @Test("an error answer throws SearchlightError with the wire code and the daemon's message")
    func errorAnswer() async throws {
        let daemon = try FakeDaemon { _, _ in .failure(SearchlightError(.invalidItem, "item 0: \"title\" must be a string")) }
        defer { daemon.stop() }
        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        defer { Task { await index.close() } }
        do {
            try await index.indexSearchableItems([SearchableItem(uniqueIdentifier: "a", attributeSet: AttributeSet())])
            Issue.record("the call should have thrown")
        } catch let error as SearchlightError {
            #expect(error.code == .invalidItem)
            #expect(error.message == "item 0: \"title\" must be a string")
        }
    }

    @Test("no daemon listening is remoteConnection, saying how to start one")
    func noDaemon() async throws {
        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: NSTemporaryDirectory() + "sl-none-\(UUID().uuidString)")
        do {
            try await index.deleteAllSearchableItems()
            Issue.record("the call should have thrown")
        } catch let error as SearchlightError {
            #expect(error.code == .remoteConnection)
            #expect(error.message.contains("SEARCHLIGHT_SOCKET"), "\(error.message)")
        }
    }

    @Test("after the daemon drops the connection, the next call connects again and repeats the handshake")
    func reconnects() async throws {
        let daemon = try FakeDaemon()
        defer { daemon.stop() }
        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        try await index.deleteAllSearchableItems()
        daemon.dropConnections()
        // The drop is seen by the client's reader thread; a call made before that may still fail once.
        var attempts = 0
        while true {
            attempts += 1
            do {
                try await index.deleteAllSearchableItems()
                break
            } catch let error as SearchlightError where error.code == .remoteConnection && attempts < 50 {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        await index.close()
        let handshakes = daemon.messages.filter { $0.method == Method.initialize }
        #expect(handshakes.count == 2)
        #expect(Set(handshakes.map(\.connection)).count == 2)
        #expect(daemon.calls(Method.indexDeleteAll).count >= 2)
    }

    @Test("a call that crosses the daemon's idle close ($/closing) is sent again on a new connection, and the caller sees nothing of it")
    func idleCloseIsTransparent() async throws {
        let daemon = try FakeDaemon { method, _ in method == Method.indexFetchLastClientState ? .success(["clientState": .null]) : .success([:]) }
        defer { daemon.stop() }
        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        try await index.deleteAllSearchableItems()
        daemon.closeAsIdle(nextCalls: 1)
        // Sent on the open connection, which the daemon closes unread: no error reaches the app.
        #expect(try await index.fetchLastClientState() == nil)
        await index.close()
        let calls = daemon.messages.filter { $0.method == Method.indexFetchLastClientState }
        #expect(calls.map(\.connection) == [1, 2], "sent once more, on a second connection")
        #expect(daemon.messages.filter { $0.method == Method.initialize }.count == 2)
    }

    @Test("a call on a connection that closed without announcing it is not sent again (it may have been processed)")
    func unannouncedCloseIsReported() async throws {
        // The call is being handled (its answer held back) when the connection drops.
        let held = DispatchSemaphore(value: 0)
        let daemon = try FakeDaemon { method, _ in
            if method == Method.indexDeleteAll { held.wait() }
            return .success([:])
        }
        defer { daemon.stop() }
        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        try await index.deleteSearchableItems(withDomainIdentifiers: ["warm"])
        let call = Task { try await index.deleteAllSearchableItems() }
        while daemon.calls(Method.indexDeleteAll).isEmpty { try await Task.sleep(for: .milliseconds(5)) }
        daemon.dropConnections()
        held.signal()
        await #expect(throws: SearchlightError.self) { try await call.value }
        #expect(daemon.calls(Method.indexDeleteAll).count == 1)
        await index.close()
    }

    @Test("a batch ends with the new client state in base64, and the expected one as base64 or null")
    func batchClientState() async throws {
        let stored = Data([0, 1, 2, 250])
        let daemon = try FakeDaemon { method, _ in
            method == Method.indexFetchLastClientState ? .success(["clientState": .string(stored.base64EncodedString())]) : .success([:])
        }
        defer { daemon.stop() }
        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        try await index.beginBatch()
        try await index.endBatch(expectedClientState: .some(nil), newClientState: Data("v1".utf8))
        try await index.beginBatch()
        try await index.endBatch(expectedClientState: Data("v1".utf8), newClientState: Data("v2".utf8))
        try await index.beginBatch()
        try await index.endBatch(newClientState: Data("v3".utf8))
        #expect(try await index.fetchLastClientState() == stored)
        await index.close()

        let ends = daemon.calls(Method.indexEndBatch)
        #expect(ends.count == 3)
        #expect(ends[0]["newClientState"] == .string(Data("v1".utf8).base64EncodedString()))
        #expect(ends[0]["expectedClientState"] == .null, "expecting no state is an explicit null")
        #expect(ends[1]["expectedClientState"] == .string(Data("v1".utf8).base64EncodedString()))
        #expect(ends[2]["expectedClientState"] == nil, "no expectation leaves the key out")
        #expect(daemon.calls(Method.indexBeginBatch).count == 3)
    }

    @Test("a search query fetches page after page, passing the cursor back, until an answer has none")
    func searchPages() async throws {
        let daemon = try FakeDaemon { method, params in
            guard method == Method.querySearch else { return .success([:]) }
            switch params["cursor"]?.stringValue {
            case nil: return .success(["items": [ClientTests.item("a", "A"), ClientTests.item("b", "B")], "cursor": "2"])
            case "2": return .success(["items": [ClientTests.item("c", "C")], "cursor": "3"])
            default: return .success(["items": []])
            }
        }
        defer { daemon.stop() }
        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        var context = SearchQueryContext(fetchAttributes: ["title"], filterQueries: ["contentType == \"public.text\""])
        context.pageSize = 2
        let found = try await SearchQuery(queryString: "title == \"*\"", queryContext: context, index: index).allItems()
        await index.close()

        #expect(found.map(\.uniqueIdentifier) == ["a", "b", "c"])
        #expect(found.map(\.attributeSet.title) == ["A", "B", "C"])
        let pages = daemon.calls(Method.querySearch)
        #expect(pages.count == 3)
        #expect(pages.map { $0["cursor"]?.stringValue } == [nil, "2", "3"])
        #expect(pages.allSatisfy { $0["limit"]?.intValue == 2 && $0["query"] == "title == \"*\"" })
        #expect(pages[0]["fetchAttributes"] == ["title"])
        #expect(pages[0]["filterQueries"] == ["contentType == \"public.text\""])
    }

    @Test("a user query sends its context and reads ranked items, suggestions with their highlight ranges, and incomplete")
    func userQuery() async throws {
        let daemon = try FakeDaemon { method, _ in
            guard method == Method.queryUser else { return .success([:]) }
            return .success([
                "items": [ClientTests.item("a", "json parser"), ClientTests.item("b", "json parsing")],
                "rankedItems": [ClientTests.item("a", "json parser")],
                "suggestions": [
                    ["text": "json parser", "highlight": [[5, 4]], "kind": "completion"],
                    ["text": "json parse", "highlight": [[0, 4], [5, 5]], "kind": "correction"],
                    ["text": "broken", "highlight": [[3, -1]], "kind": "from-a-newer-daemon"],
                ],
                "incomplete": true,
            ])
        }
        defer { daemon.stop() }
        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        var context = UserQueryContext()
        context.maxSuggestionCount = 3
        context.maxRankedResultCount = 1
        let response = try await UserQuery(userQueryString: "json pars", userQueryContext: context, index: index).run()
        await index.close()

        #expect(response.items.map(\.uniqueIdentifier) == ["a", "b"])
        #expect(response.rankedItems.map(\.uniqueIdentifier) == ["a"])
        #expect(response.isIncomplete)
        #expect(response.suggestions.map(\.text) == ["json parser", "json parse", "broken"])
        #expect(response.suggestions[0].highlight == [5..<9])
        #expect(response.suggestions[1].highlight == [0..<4, 5..<10])
        #expect(response.suggestions[1].kind == .correction)
        #expect(response.suggestions[2].highlight.isEmpty, "a negative length is dropped, not trapped on")
        let sent = try #require(daemon.calls(Method.queryUser).first)
        #expect(sent["text"] == "json pars")
        #expect(sent["context"]?["maxSuggestionCount"]?.intValue == 3)
        #expect(sent["context"]?["maxRankedResultCount"]?.intValue == 1)
    }
}
