#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import SearchlightKit

/// What the clients were told was committed, shared between their tasks.
final class AcknowledgedBatches: @unchecked Sendable {
    private let lock = NSLock()
    private var last: [Int: Int] = [:]
    private var total = 0
    func record(client: Int, batch: Int) {
        lock.withLock {
            last[client] = batch
            total += 1
        }
    }
    func lastBatch(_ client: Int) -> Int { lock.withLock { last[client] ?? -1 } }
    var count: Int { lock.withLock { total } }
}

@Suite("Crash durability", .serialized)
struct CrashDurabilityTests {
    static let clients = 4
    static let batchSize = 40

    @Test("kill -9 during concurrent batches loses no acknowledged batch and half-applies none", arguments: 1...4)
    func killDuringBatches(round: Int) async throws {
        let daemon = try DaemonProcess()
        let acknowledged = AcknowledgedBatches()
        let killAfter = Int.random(in: 3...30)
        let writers = Task {
            await withTaskGroup(of: Void.self) { group in
                for client in 0..<Self.clients {
                    group.addTask {
                        // Each client has its own named index, so its client state is its own.
                        let index = daemon.index("com.example.crash", name: "c\(client)")
                        for batch in 0..<1000 {
                            do {
                                try await index.beginBatch()
                                try await index.indexSearchableItems((0..<Self.batchSize).map {
                                    item("c\(client)-b\(batch)-\($0)", title: "batch \(batch)")
                                })
                                try await index.endBatch(newClientState: Data("b\(batch)".utf8))
                                acknowledged.record(client: client, batch: batch)
                            } catch {
                                return  // the daemon is gone
                            }
                        }
                    }
                }
            }
        }
        let deadline = Date().addingTimeInterval(60)
        while acknowledged.count < killAfter, Date() < deadline { try await Task.sleep(for: .milliseconds(2)) }
        daemon.stop(signal: SIGKILL)
        await writers.value
        try daemon.start()
        for client in 0..<Self.clients {
            let index = daemon.index("com.example.crash", name: "c\(client)")
            let acked = acknowledged.lastBatch(client)
            let state = try await index.fetchLastClientState().map { String(decoding: $0, as: UTF8.self) }
            // The commit may have happened just before the kill and the answer been lost: the state
            // is the last acknowledged batch or the one after it, never an earlier one.
            let applied = state.flatMap { Int($0.dropFirst()) } ?? -1
            #expect(applied == acked || applied == acked + 1, "client \(client): state \(state ?? "none"), acknowledged \(acked)")
            let items = try await SearchQuery(queryString: #"uniqueIdentifier == "*""#,
                queryContext: SearchQueryContext(fetchAttributes: ["title"]), index: index).allItems()
            #expect(items.count == (applied + 1) * Self.batchSize, "client \(client): every applied batch whole, nothing else")
            let batches = Set(items.map { $0.uniqueIdentifier.split(separator: "-")[1] })
            #expect(batches == (applied >= 0 ? Set((0...applied).map { "b\($0)" }) : []))
        }
    }
}
