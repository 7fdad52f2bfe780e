import Foundation
import Testing
import TestThreads
import SearchlightKit
import SearchlightWire

/// A query across apps holds each index it reads (its store and a reader in one transaction,
/// `IndexSnapshot`) for the whole query, but only while the daemon's one budget of such holds,
/// half the open-index bound over every query in progress, has room; past it an index is leased
/// per phase (Docs/Architecture.md, "Queries"). Through the real daemon.
@Suite("Held indexes of queries across apps", .onOwnThreads)
struct FederatedHoldTests {
    static let words = ["bridge", "natural", "park", "stone", "river", "arch", "canyon", "trail", "desert", "water"]

    /// `count` items of `bundle` from `first` on, each with three of the words.
    static func items(_ bundle: String, from first: Int, count: Int) -> [SearchableItem] {
        (first..<(first + count)).map { i in
            let w = (0..<3).map { Self.words[(i * 7 + $0 * 3 + bundle.count) % Self.words.count] }
            return item("\(bundle)-\(i)", title: w.joined(separator: " "), text: "\(w[0]) and \(w[2]) item \(i)")
        }
    }

    static func holds(_ status: JSONValue) -> (taken: Int, open: Int, peak: Int, limit: Int) {
        let h = status["federatedHolds"]
        return (h?["taken"]?.intValue ?? -1, h?["open"]?.intValue ?? -1, h?["peak"]?.intValue ?? -1, h?["limit"]?.intValue ?? -1)
    }

    static func rankedBuilds(_ status: JSONValue) -> Int {
        (status["bundles"]?.arrayValue ?? []).reduce(0) { sum, b in
            sum + (b["indexes"]?.arrayValue ?? []).reduce(0) { $0 + ($1["rankedIndex"]?["builds"]?.intValue ?? 0) }
        }
    }

    @Test("many queries across apps at once, over more indexes than the budget, while ranked builds run: never more held than the budget, every query answers, none held after")
    func budgetOverAllQueries() async throws {
        // Bound 4: a budget of 2 held indexes for all queries together. Each budget check of a
        // query sleeps 1 ms (a test seam), so the queries overlap in the daemon (each connection
        // has its thread): with a budget per query (snp31 before its review fix) six queries over
        // eight indexes held up to 2 each at once.
        let daemon = try await DaemonProcess(arguments: ["--max-open-indexes", "4", "--test-query-step-delay", "0.001"])
        let bundles = (0..<8).map { "com.example.hold\($0)" }
        // 300 items each: past the fresh lane's 256, every index starts ranked builds.
        for b in bundles { try await daemon.index(b).indexSearchableItems(Self.items(b, from: 0, count: 300)) }
        let admin = daemon.admin()
        let limit = Self.holds(try await admin.call(Method.adminStatus)).limit
        #expect(limit == 2)

        let queriesDone = Locked(false)
        let answered = Locked(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            // Writes while the queries run: 300 more items per bundle at a time, round after
            // round, each starting the fresh lane's builds (and merges) under the queries.
            group.addTask {
                var round = 1
                while !queriesDone.withLock({ $0 }) {
                    for b in bundles {
                        try await daemon.index(b).indexSearchableItems(Self.items(b, from: round * 300, count: 300))
                    }
                    round += 1
                }
            }
            try await withThrowingTaskGroup(of: Void.self) { queries in
                for c in 0..<6 {
                    queries.addTask {
                        let connection = daemon.admin()
                        for k in 0..<8 {
                            let text = Self.words[(c + k) % Self.words.count] + " " + Self.words[(c + 2 * k + 1) % Self.words.count]
                            let answer = try await connection.call(Method.queryUser,
                                ["text": .string(text), "context": ["maxResultCount": 20, "semanticSearch": false]])
                            let ids = answer["items"]?.arrayValue?.compactMap { $0["uniqueIdentifier"]?.stringValue } ?? []
                            #expect(!ids.isEmpty, "\(text): \(answer)")
                            answered.withLock { $0 += 1 }
                        }
                    }
                }
                try await queries.waitForAll()
            }
            queriesDone.withLock { $0 = true }
            try await group.waitForAll()
        }
        #expect(answered.withLock { $0 } == 6 * 8)

        let status = try await admin.call(Method.adminStatus)
        let h = Self.holds(status)
        print("federated-holds: queries=\(6 * 8) peak=\(h.peak) limit=\(limit) taken_after=\(h.taken) open_after=\(h.open) ranked_builds=\(Self.rankedBuilds(status))")
        // Held for a whole query: never more than the budget at once, and some (the path was used).
        #expect(h.peak >= 1 && h.peak <= limit, "peak \(h.peak) of \(limit)")
        // Nothing leaks: no place taken and no snapshot open once every query answered.
        #expect(h.taken == 0 && h.open == 0, "\(h)")
        #expect(Self.rankedBuilds(status) > 0, "ranked builds ran: \(status)")
        // The open-index bound holds again once nobody leases a store.
        #expect((status["openIndexes"]?.intValue ?? .max) <= 4, "\(status["openIndexes"] ?? .null)")
    }
}
