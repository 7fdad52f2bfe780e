#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
@testable import SearchlightKit
import Testing
import TestThreads

/// An extension as a plugin author writes one: donates what it is asked for; "poison" fails.
struct SampleIndexer: IndexExtension {
    struct Refused: Error, CustomStringConvertible {
        var description: String { "the sample cannot read poison" }
    }

    static let throttled = Mutex(0)

    func reindexAllSearchableItems(in index: SearchableIndex) async throws {
        try await index.deleteAllSearchableItems()
        try await index.indexSearchableItems(["one", "two"].map(Self.item))
        await index.reportProgress(completed: 2, total: 2)
    }

    func reindexSearchableItems(withIdentifiers ids: [String], in index: SearchableIndex) async throws {
        if ids.contains("poison") { throw Refused() }
        try await index.indexSearchableItems(ids.map(Self.item))
    }

    func data(forItem identifier: String, typeIdentifier: String) async throws -> Data {
        Data("\(identifier) as \(typeIdentifier)".utf8)
    }

    func searchableIndexDidThrottle() async { Self.throttled.withLock { $0 += 1 } }

    static func item(_ id: String) -> SearchableItem {
        var a = AttributeSet(contentType: "public.plain-text")
        a.title = "note \(id)"
        return SearchableItem(uniqueIdentifier: id, attributeSet: a)
    }
}

/// The supervisor's side of an extension's inherited socket: answers the handshake with the
/// bundle, records the extension's index calls and progress, and sends it requests.
final class FakeSupervisor: @unchecked Sendable {
    let rpc: RPCConnection
    private let lock = NSLock()
    private var received: [(method: String, params: JSONValue)] = []

    init(socket: UnixSocket) {
        rpc = RPCConnection(socket: socket)
        rpc.start(name: "fake-supervisor", onMessage: { [self] rpc, message in
            switch message {
            case .request(let id, let method, let params):
                lock.withLock { received.append((method, params)) }
                let answer: JSONValue = method == Method.initialize
                    ? ["protocolVersion": .number(Double(Protocol.version)), "bundleIdentifier": "org.example.notes"] : [:]
                rpc.reply(to: id, .success(answer))
            case .notification(let method, let params):
                lock.withLock { received.append((method, params)) }
            case .response:
                break
            }
        })
    }

    func calls(_ method: String) -> [JSONValue] { lock.withLock { received.filter { $0.method == method }.map(\.params) } }
}

@Suite("Extension runtime", .timeLimit(.minutes(1)), .onOwnThreads)
struct ExtensionRuntimeTests {
    /// The runtime on one end of a socketpair, as the supervisor launches it (fd in the environment).
    static func start() throws -> (FakeSupervisor, Task<Int32, Never>) {
        let (supervisorEnd, extensionEnd) = try UnixSocket.pair()
        // The runtime owns the descriptor it is given, as a launched extension owns fd 3.
        let descriptor = dup(extensionEnd.fd)
        extensionEnd.closeDescriptor()
        let runtime = ExtensionRuntime(extension: SampleIndexer(), arguments: ["sample"],
            environment: [ExtensionEnvironment.fd: "\(descriptor)", ExtensionEnvironment.label: "org.example.notes.indexer"],
            defaultLabel: "")
        let supervisor = FakeSupervisor(socket: supervisorEnd)
        return (supervisor, Task { await runtime.run() })
    }

    @Test("a reindex-all runs the extension's handler; its return is the acknowledgement, after its donations and progress")
    func reindexAllAcknowledged() async throws {
        let (supervisor, run) = try Self.start()
        let answer = try await supervisor.rpc.call(Method.extensionReindexAll, ["requestId": "r1", "reason": "initial", "index": ""])
        #expect(answer["requestId"] == "r1")
        let hello = try #require(supervisor.calls(Method.initialize).first)
        #expect(hello["role"] == "extension")
        #expect(hello["label"] == "org.example.notes.indexer")
        #expect(supervisor.calls(Method.indexDeleteAll).count == 1)
        let donated = supervisor.calls(Method.indexItems).first?["items"]?.arrayValue?.compactMap { $0["uniqueIdentifier"]?.stringValue }
        #expect(donated == ["one", "two"])
        let progress = try #require(supervisor.calls(Method.progress).first)
        #expect(progress["requestId"] == "r1")
        #expect(progress["completed"]?.intValue == 2)
        try supervisor.rpc.notify(Method.extensionShutdown)
        #expect(await run.value == 0)
    }

    @Test("a handler that throws answers an error (a negative acknowledgement) carrying the error's text, and the extension serves on")
    func throwIsNegativeAcknowledgement() async throws {
        let (supervisor, run) = try Self.start()
        do {
            _ = try await supervisor.rpc.call(Method.extensionReindexIdentifiers,
                ["requestId": "r2", "reason": "idle", "index": "", "identifiers": ["a", "poison"]])
            Issue.record("a throwing handler must not acknowledge")
        } catch let error as SearchlightError {
            #expect(error.code == .extensionFailed)
            #expect(error.message.contains("the sample cannot read poison"), "\(error.message)")
        }
        #expect(supervisor.calls(Method.indexItems).isEmpty)
        _ = try await supervisor.rpc.call(Method.extensionReindexIdentifiers, ["requestId": "r3", "reason": "idle", "index": "", "identifiers": ["a"]])
        #expect(supervisor.calls(Method.indexItems).count == 1)
        try supervisor.rpc.notify(Method.extensionShutdown)
        #expect(await run.value == 0)
    }

    @Test("malformed requests and unknown methods are answered with errors, not crashes")
    func hostileRequests() async throws {
        let (supervisor, run) = try Self.start()
        await #expect(throws: SearchlightError.self) {
            _ = try await supervisor.rpc.call(Method.extensionReindexIdentifiers, ["requestId": "r4", "identifiers": "not an array"])
        }
        await #expect(throws: SearchlightError.self) {
            _ = try await supervisor.rpc.call("extension.fromTheFuture", [:])
        }
        let data = try await supervisor.rpc.call(Method.extensionDataForItem, ["identifier": "x", "typeIdentifier": "public.plain-text"])
        #expect(data["data"]?.stringValue.flatMap { Data(base64Encoded: $0) } == Data("x as public.plain-text".utf8))
        await #expect(throws: SearchlightError.self) {
            _ = try await supervisor.rpc.call(Method.extensionFileURLForItem, ["identifier": "x", "typeIdentifier": "public.plain-text"])
        }
        try supervisor.rpc.notify(Method.extensionShutdown)
        #expect(await run.value == 0)
    }

    @Test("the throttle notifications reach the extension's hooks")
    func throttleHooks() async throws {
        let (supervisor, run) = try Self.start()
        _ = try await supervisor.rpc.call(Method.extensionReindexIdentifiers, ["requestId": "r5", "index": "", "identifiers": ["a"]])
        let before = SampleIndexer.throttled.withLock { $0 }
        try supervisor.rpc.notify(Method.extensionDidThrottle)
        let deadline = Date().addingTimeInterval(30)
        while SampleIndexer.throttled.withLock({ $0 }) == before, Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(SampleIndexer.throttled.withLock { $0 } == before + 1)
        try supervisor.rpc.notify(Method.extensionShutdown)
        #expect(await run.value == 0)
    }

    @Test("the supervisor closing the socket ends the extension")
    func closedSocketEnds() async throws {
        let (supervisor, run) = try Self.start()
        _ = try await supervisor.rpc.call(Method.extensionReindexIdentifiers, ["requestId": "r6", "index": "", "identifiers": ["a"]])
        supervisor.rpc.close()
        #expect(await run.value == 0)
    }

    @Test("a descriptor that is no socket, or no label to attach under, is a usage error (exit 2) naming the fix")
    func usageErrors() async throws {
        let file = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { close(file) }
        let notSocket = ExtensionRuntime(extension: SampleIndexer(), arguments: ["sample"],
            environment: [ExtensionEnvironment.fd: "\(file)"], defaultLabel: "")
        #expect(notSocket.usageProblem?.contains("is not an inherited socket") == true)
        #expect(await notSocket.run() == 2)
        let noLabel = ExtensionRuntime(extension: SampleIndexer(), arguments: ["sample"], environment: [:], defaultLabel: "")
        #expect(noLabel.usageProblem?.contains("--label") == true)
        let flagged = ExtensionRuntime(extension: SampleIndexer(), arguments: ["sample", "--label", "org.x"], environment: [:], defaultLabel: "")
        #expect(flagged.usageProblem == nil)
        #expect(flagged.label == "org.x")
    }
}
