import Foundation
import Testing
import TestThreads
import SearchlightKit
import SearchlightWire

/// Issue 35: one item re-donated already expired must cost only that item its vector hits, never
/// the other items of the index (through the real daemon, from the wire).
@Suite("Semantic search after an expired re-donation", .onOwnThreads, .serialized)
struct SemanticExpiryTests {
    static let bundle = "org.example.vec35"

    static func item(_ id: String, _ title: String, expires: String? = nil) -> JSONValue {
        var o: [String: JSONValue] = ["uniqueIdentifier": .string(id), "attributeSet": ["title": .string(title)]]
        if let expires { o["expirationDate"] = .string(expires) }
        return .object(o)
    }

    static let dogs = (0..<5).map { item("dog\($0)", "a puppy playing fetch in the park \($0)") }
    static let car = item("car", "automobile engine repair manual")

    /// `query.user "young dog"`, meaning only, explained, embedded by the transformer (loaded
    /// first with `query.prepare`, so the query does not depend on when the model unloads):
    /// the identifiers in the vector side's order, the vector ranks as answered, the answer.
    static func meaningOnly(_ app: SearchlightConnection) async throws -> (byVectorRank: [String], ranks: [Int], answer: JSONValue) {
        _ = try await app.call("query.prepare")
        let answer = try await app.call("query.user", ["text": "young dog", "context": ["semanticWeight": 1.0, "explain": true]])
        let hits = (answer["items"]?.arrayValue ?? []).map { ($0["uniqueIdentifier"]?.stringValue ?? "?", $0["explain"]?["vectorRank"]?.intValue ?? 0) }
        let ordered = hits.sorted { $0.1 < $1.1 }
        return (ordered.map(\.0), ordered.map(\.1), answer)
    }

    /// A daemon with the transformer's model, the six items donated and refined by idle
    /// maintenance; nil (the test skips, saying why) without the model files. The load it reads
    /// is a quiet fake (`--proc-root`): on a busy machine refinement would give way to the load.
    static func refinedDaemon(_ dir: TempDir, arguments: [String] = []) async throws -> (DaemonProcess, SearchlightConnection)? {
        guard let model = SemanticSearchTests.transformerModel else { return nil }
        let proc = dir.path + "/proc"
        try ThrottleIntegrationTests.writePSI(proc, cpu: 0)
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model, "--proc-root", proc] + arguments, dir: dir)
        let app = SearchlightConnection(role: .app(bundleIdentifier: bundle), socketPath: daemon.socket)
        _ = try await app.call("index.items", ["items": .array(dogs + [car])])
        let admin = daemon.admin()
        _ = try await admin.call("admin.simulate", ["event": "idle", "bundle": .string(bundle)])
        let status = try await admin.call("admin.status")
        await admin.close()
        let index = status["bundles"]?.arrayValue?.first { $0["bundle"]?.stringValue == bundle }?["indexes"]?.arrayValue?.first
        #expect(index?["vectors"]?.intValue == 6 && index?["refined"]?.intValue == 6, "every vector refined: \(String(describing: index))")
        return (daemon, app)
    }

    @Test("re-donating one item with a past expirationDate keeps every other item's vector hits")
    func expiredRedonation() async throws {
        let dir = TempDir()
        guard let (daemon, app) = try await Self.refinedDaemon(dir) else { return }
        let before = try await Self.meaningOnly(app)
        #expect(Set(before.byVectorRank) == ["dog0", "dog1", "dog2", "dog3", "dog4"], "\(before.answer)")
        #expect(before.ranks == [1, 2, 3, 4, 5], "every hit found by the vector side: \(before.answer)")

        _ = try await app.call("index.items", ["items": [Self.item("dog1", "a puppy playing fetch in the park 1", expires: "2001-01-01T00:00:00.000Z")]])
        let after = try await Self.meaningOnly(app)
        #expect(after.byVectorRank == before.byVectorRank.filter { $0 != "dog1" },
            "the expired item never returned, the others in their vector order: \(after.answer)")
        #expect(after.ranks == [1, 2, 3, 4], "\(after.answer)")
        await app.close()
        withExtendedLifetime(daemon) {}  // stopped when released
    }

    @Test("an update of an expired item, a delete in a batch that rolls back, and expiry by time keep the other items' vector hits")
    func neighbours() async throws {
        let dir = TempDir()
        // Six items at most: the batch below deletes one and then donates two more, one over the limit.
        guard let (daemon, app) = try await Self.refinedDaemon(dir, arguments: ["--max-items-per-index", "6"]) else { return }
        let all = try await Self.meaningOnly(app).byVectorRank
        #expect(all.count == 5, "\(all)")
        let others = all.filter { $0 != "dog1" }

        // isUpdate of an item while it is expired (a keyword: its meaning unchanged), then made visible again.
        _ = try await app.call("index.items", ["items": [Self.item("dog1", "a puppy playing fetch in the park 1", expires: "2001-01-01T00:00:00.000Z")]])
        _ = try await app.call("index.items", ["items": [["uniqueIdentifier": "dog1", "isUpdate": true, "expirationDate": "2002-01-01T00:00:00.000Z",
                                                          "attributeSet": ["keywords": ["pet"]]]]])
        let expiredUpdate = try await Self.meaningOnly(app)
        #expect(expiredUpdate.byVectorRank == others, "\(expiredUpdate.answer)")
        _ = try await app.call("index.items", ["items": [["uniqueIdentifier": "dog1", "isUpdate": true,
            "expirationDate": .string(ISO8601.format(Date().addingTimeInterval(86400)))]]])
        let revived = try await Self.meaningOnly(app)
        #expect(revived.byVectorRank == all, "visible again, with the vector it had: \(revived.answer)")

        // A batch whose delete ran and then rolled back (the donations after it exceed the quota).
        _ = try await app.call("index.beginBatch")
        _ = try await app.call("index.deleteIdentifiers", ["identifiers": ["dog2"]])
        _ = try await app.call("index.items", ["items": [Self.item("x1", "a kitten"), Self.item("x2", "a parrot")]])
        await #expect(throws: SearchlightError.self) { try await app.call("index.endBatch", ["newClientState": "AQ=="]) }
        let rolledBack = try await Self.meaningOnly(app)
        #expect(rolledBack.byVectorRank == all, "nothing of the batch applied: \(rolledBack.answer)")

        // dog3's expiration refreshed to a moment that then passes (no write at expiry).
        let soon = Date().addingTimeInterval(1)
        _ = try await app.call("index.items", ["items": [Self.item("dog3", "a puppy playing fetch in the park 3", expires: ISO8601.format(soon))]])
        while Date() <= soon.addingTimeInterval(0.05) { try await Task.sleep(nanoseconds: 50_000_000) }
        let expiredByTime = try await Self.meaningOnly(app)
        #expect(expiredByTime.byVectorRank == all.filter { $0 != "dog3" }, "\(expiredByTime.answer)")
        await app.close()
        withExtendedLifetime(daemon) {}  // stopped when released
    }
}
