import Foundation
import Synchronization
@testable import SearchlightKit
import Testing
import TestThreads

/// What `indexSearchableItems` does with a stream of items, against `FakeDaemon`: calls of bounded
/// size, in order, a few in flight; and the SDK's own options and `--dump`.
@Suite("SDK donations and the extension's context", .timeLimit(.minutes(1)), .onOwnThreads)
struct DonationTests {
    static func item(_ n: Int, text: String = "") -> SearchableItem {
        var a = AttributeSet(contentType: "public.plain-text")
        a.title = "item \(n)"
        if !text.isEmpty { a.textContent = text }
        return SearchableItem(uniqueIdentifier: "i-\(n)", attributeSet: a)
    }

    @Test("a lazy sequence of 2 500 items goes in calls of 1 000, 1 000 and 500, in order, with every item once")
    func chunksInOrder() async throws {
        let daemon = try FakeDaemon()
        defer { daemon.stop() }
        let index = SearchableIndex(name: "mail", bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        try await index.indexSearchableItems((0..<2500).lazy.map { Self.item($0) })
        await index.close()
        let calls = daemon.calls(Method.indexItems)
        #expect(calls.map { $0["items"]?.arrayValue?.count ?? 0 } == [1000, 1000, 500])
        #expect(calls.allSatisfy { $0["index"] == "mail" })
        let ids = calls.flatMap { $0["items"]?.arrayValue ?? [] }.compactMap { $0["uniqueIdentifier"]?.stringValue }
        #expect(ids == (0..<2500).map { "i-\($0)" })
    }

    @Test("large items end a call at 4 MiB, far below the frame limit")
    func chunksBySize() async throws {
        let daemon = try FakeDaemon()
        defer { daemon.stop() }
        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        let text = String(repeating: "x", count: 200_000)
        try await index.indexSearchableItems((0..<50).map { Self.item($0, text: text) })
        await index.close()
        let calls = daemon.calls(Method.indexItems)
        #expect(calls.count == 3, "\(calls.map { $0["items"]?.arrayValue?.count ?? 0 })")
        #expect(calls.allSatisfy { $0.serializedByteCount <= (4 << 20) + 300_000 })
        #expect(calls.reduce(0) { $0 + ($1["items"]?.arrayValue?.count ?? 0) } == 50)
    }

    @Test("an async sequence is donated as it produces items")
    func asyncSequence() async throws {
        let daemon = try FakeDaemon()
        defer { daemon.stop() }
        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        let (stream, feed) = AsyncStream<SearchableItem>.makeStream()
        for n in 0..<1200 { feed.yield(Self.item(n)) }
        feed.finish()
        try await index.indexSearchableItems(stream)
        await index.close()
        #expect(daemon.calls(Method.indexItems).map { $0["items"]?.arrayValue?.count ?? 0 } == [1000, 200])
    }

    @Test("when the daemon closes the connection as idle under a pipelined donation, every call in flight goes again, in order")
    func idleCloseUnderDonation() async throws {
        let daemon = try FakeDaemon()
        defer { daemon.stop() }
        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        try await index.deleteAllSearchableItems()
        daemon.closeAsIdle(nextCalls: 1)
        try await index.indexSearchableItems((0..<2500).lazy.map { Self.item($0) })
        await index.close()
        let second = daemon.messages.filter { $0.method == Method.indexItems && $0.connection == 2 }.map(\.params)
        #expect(second.map { $0["items"]?.arrayValue?.count ?? 0 } == [1000, 1000, 500])
        let ids = second.flatMap { $0["items"]?.arrayValue ?? [] }.compactMap { $0["uniqueIdentifier"]?.stringValue }
        #expect(ids == (0..<2500).map { "i-\($0)" })
    }

    /// Issue 30's resend race, at scale. The SDK gave up with `remoteConnection (-1003): connection
    /// lost before the answer arrived (an answer could not be written …: Broken pipe)` although the
    /// fake had announced the close. The daemon closes with the pipelined calls unread; the
    /// client's next write fails (EPIPE/ECONNRESET), and the close that failure requested stopped
    /// the client's reader at the next frame boundary, whatever the peer had sent before closing
    /// (`$/closing` included) and the kernel still held. The reader now reads to the end after
    /// such a failure (`PeerCloseReadTests` forces that order every time), and a failed submit
    /// waits for the reader before deciding. No trace of a failing run at scale was caught, so
    /// whether this was the only way is not proven. Disabled: 8 × 60 rounds take 30-50 s on a
    /// loaded machine (the suite's limit is a minute); enable to stress it.
    @Test("an idle close under a pipelined donation, 8 × 60 times at once: every donation completes",
          .disabled("a stress run of 30-50 s; PeerCloseReadTests forces the interleaving it looked for"))
    func idleCloseUnderDonationRepeated() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for lane in 0..<8 {
                group.addTask {
                    for round in 0..<60 {
                        let daemon = try FakeDaemon()
                        defer { daemon.stop() }
                        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
                        try await index.deleteAllSearchableItems()
                        daemon.closeAsIdle(nextCalls: 1)
                        do {
                            try await index.indexSearchableItems((0..<2500).lazy.map { Self.item($0) })
                        } catch {
                            Issue.record("lane \(lane) round \(round): \(error) connections=\(Set(daemon.messages.map(\.connection))) messages=\(daemon.messages.map { "\($0.connection):\($0.method)" })")
                            await index.close()
                            return
                        }
                        await index.close()
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    @Test("a failing call fails the donation with the daemon's error")
    func failureStops() async throws {
        let seen = Mutex(0)
        let daemon = try FakeDaemon { method, _ in
            guard method == Method.indexItems else { return .success([:]) }
            let n = seen.withLock { $0 += 1; return $0 }
            return n == 2 ? .failure(SearchlightError(.invalidItem, "item 3: bad")) : .success([:])
        }
        defer { daemon.stop() }
        let index = SearchableIndex(bundleIdentifier: "org.example.kit", socketPath: daemon.path)
        await #expect(throws: SearchlightError.self) { try await index.indexSearchableItems((0..<5000).lazy.map { Self.item($0) }) }
        await index.close()
    }

    @Test("the SDK's options are taken out of the arguments; the extension gets the rest, literals after -- included")
    func launchOptions() {
        let options = LaunchOptions(arguments: ["/bin/x", "--label", "org.l", "data", "--native-arch", "amd64", "--socket", "/s",
                                                "--dump", "--dump-index", "mail", "--", "--label"],
                                    environment: ["HOME": "/root"], defaultLabel: "")
        #expect(options.context.label == "org.l")
        #expect(options.context.arguments == ["data", "--native-arch", "amd64", "--", "--label"])
        #expect(options.context.mode == .dump)
        #expect(options.dump && options.dumpIndex == "mail")
        #expect(options.socketPath == "/s")
        #expect(options.problem == nil)
        var extractor = ArgumentExtractor(options.context.arguments)
        #expect(extractor.extractOption(named: "native-arch") == ["amd64"])
        #expect(extractor.positionalArguments == ["data", "--label"])
        let attached = LaunchOptions(arguments: ["/bin/x"], environment: [ExtensionEnvironment.label: "org.e"], defaultLabel: "")
        #expect(attached.context.mode == .attached && attached.context.label == "org.e")
    }

    @Test("an extension with init(context:) gets the context; one with no initializer is made by the default")
    func initializers() throws {
        struct WithContext: IndexExtension {
            let folder: String
            init(context: ExtensionContext) { folder = ArgumentExtractor(context.arguments).positionalArguments.first ?? "-" }
            func reindexAllSearchableItems(in index: SearchableIndex) async throws {}
            func reindexSearchableItems(withIdentifiers ids: [String], in index: SearchableIndex) async throws {}
        }
        #expect(WithContext(context: ExtensionContext(label: "l", arguments: ["notes"])).folder == "notes")
        _ = try SampleIndexer(context: ExtensionContext(label: "l"))
    }

    @Test("inside a request the SDK reports progress after each committed call, on from the total the extension announced")
    func automaticProgress() async throws {
        let (daemonEnd, extensionEnd) = try UnixSocket.pair()
        let supervisor = FakeSupervisor(socket: daemonEnd)
        // The connection owns the descriptor it is given (it closes it), as a launched extension
        // owns fd 3: handing it `extensionEnd.fd` itself closed that number twice (once more when
        // `extensionEnd` went), by then another test's socket: its reads saw end of file, or
        // another connection's frames (issue 30: the 'idle close' and 'calls of 1 000' failures).
        let descriptor = dup(extensionEnd.fd)
        extensionEnd.closeDescriptor()
        let connection = SearchlightConnection(extensionLabel: "org.l", socketPath: nil, inheritedDescriptor: descriptor,
            onNotification: { _, _ in }, onRequest: { _, _, reply in reply(.success([:])) }, onClose: {})
        _ = try await connection.open()
        let index = SearchableIndex(name: "", bundleIdentifier: "org.example.notes", connection: connection, requestID: "7")
        await index.reportProgress(completed: 0, total: 2500)
        try await index.indexSearchableItems((0..<2500).lazy.map { Self.item($0) })
        // The notifications are on the wire when the donation returns; the fake reads them on its thread.
        let deadline = Date().addingTimeInterval(10)
        while supervisor.calls(Method.progress).count < 4, Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
        let progress = supervisor.calls(Method.progress)
        #expect(progress.map { $0["completed"]?.intValue ?? -1 } == [0, 1000, 2000, 2500])
        #expect(progress.allSatisfy { $0["total"]?.intValue == 2500 && $0["requestId"] == "7" })
        await connection.close()
    }
}
