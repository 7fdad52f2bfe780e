import Foundation
import Testing
import TestThreads
@testable import SearchlightSupervisor

/// A journal in its own temporary file.
private func makeJournal() throws -> (RequestJournal, String) {
    let dir = NSTemporaryDirectory() + "journal-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return (try RequestJournal(path: dir + "/supervisor.sqlite"), dir)
}

@Suite("request journal", .onOwnThreads)
struct RequestJournalTests {
    @Test("a reindex-all absorbs the pending identifier requests of its index")
    func allAbsorbsIdentifiers() throws {
        let (journal, dir) = try makeJournal()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ids = try journal.enqueue(bundle: "a.b", index: "", kind: .identifiers, identifiers: ["1", "2"], reason: "manual", background: false)
        let other = try journal.enqueue(bundle: "a.b", index: "other", kind: .identifiers, identifiers: ["9"], reason: "manual", background: false)
        let all = try journal.enqueue(bundle: "a.b", index: "", kind: .all, identifiers: [], reason: "manual", background: false)
        #expect(all.absorbed == [ids.id])
        #expect(journal.all().map(\.id) == [other.id, all.id])
    }

    @Test("identifier requests merge, keeping order and dropping duplicates")
    func identifiersMerge() throws {
        let (journal, dir) = try makeJournal()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let first = try journal.enqueue(bundle: "a.b", index: "", kind: .identifiers, identifiers: ["1", "2"], reason: "manual", background: false)
        let second = try journal.enqueue(bundle: "a.b", index: "", kind: .identifiers, identifiers: ["2", "3"], reason: "manual", background: false)
        #expect(second.coalesced && second.id == first.id)
        #expect(journal.request(first.id)?.identifiers == ["1", "2", "3"])
    }

    @Test("identifiers asked while a reindex-all is pending are covered by it")
    func identifiersCoveredByAll() throws {
        let (journal, dir) = try makeJournal()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let all = try journal.enqueue(bundle: "a.b", index: "", kind: .all, identifiers: [], reason: "idle", background: true)
        let ids = try journal.enqueue(bundle: "a.b", index: "", kind: .identifiers, identifiers: ["1"], reason: "manual", background: false)
        #expect(ids.id == all.id && ids.coalesced)
        #expect(journal.all().count == 1)
    }

    @Test("a foreground request promotes a pending background reindex-all")
    func foregroundPromotes() throws {
        let (journal, dir) = try makeJournal()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let all = try journal.enqueue(bundle: "a.b", index: "", kind: .all, identifiers: [], reason: "initial", background: true)
        _ = try journal.enqueue(bundle: "a.b", index: "", kind: .all, identifiers: [], reason: "manual", background: false)
        #expect(journal.request(all.id)?.background == false)
    }

    @Test("a running request is neither merged into nor absorbed")
    func runningIsLeftAlone() throws {
        let (journal, dir) = try makeJournal()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let running = try journal.enqueue(bundle: "a.b", index: "", kind: .all, identifiers: [], reason: "manual", background: false)
        _ = try journal.claim(running.id)
        let next = try journal.enqueue(bundle: "a.b", index: "", kind: .all, identifiers: [], reason: "manual", background: false)
        #expect(next.id != running.id && !next.coalesced)
        #expect(journal.request(running.id)?.state == .running)
    }

    @Test("requests survive a reopen, and one that was running is pending again")
    func survivesRestart() throws {
        let (journal, dir) = try makeJournal()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let r = try journal.enqueue(bundle: "a.b", index: "", kind: .identifiers, identifiers: ["x"], reason: "manual", background: false)
        _ = try journal.claim(r.id)
        let reopened = try RequestJournal(path: dir + "/supervisor.sqlite")
        let again = try #require(reopened.request(r.id))
        #expect(again.state == .pending && again.identifiers == ["x"])
    }

    @Test("failed attempts count, then the request is reported failed, not retried")
    func failureIsFinal() throws {
        let (journal, dir) = try makeJournal()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let r = try journal.enqueue(bundle: "a.b", index: "", kind: .all, identifiers: [], reason: "manual", background: false)
        let later = Date().addingTimeInterval(60)
        try journal.attemptFailed(r.id, error: "nack", retryAt: later)
        #expect(journal.request(r.id)?.attempts == 1)
        #expect(journal.pending(bundle: "a.b").first?.notBefore.timeIntervalSince1970 ?? 0 >= later.timeIntervalSince1970 - 0.001)
        try journal.attemptFailed(r.id, error: "nack again", retryAt: nil)
        let failed = try #require(journal.request(r.id))
        #expect(failed.state == .failed && failed.attempts == 2 && failed.lastError == "nack again")
        #expect(journal.pending(bundle: "a.b").isEmpty)
    }

    @Test("a poisoned identifier leaves the request and is listed")
    func poison() throws {
        let (journal, dir) = try makeJournal()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let r = try journal.enqueue(bundle: "a.b", index: "", kind: .identifiers, identifiers: ["a", "b"], reason: "manual", background: false)
        try journal.poison(r.id, bundle: "a.b", index: "", identifier: "a", remaining: ["b"], error: "crashed")
        #expect(journal.request(r.id)?.identifiers == ["b"])
        #expect(journal.poisoned().map(\.identifier) == ["a"])
    }

    @Test("retry delays double from the base up to the cap, with bounded jitter")
    func backoff() {
        for attempt in 1...12 {
            let d = Backoff.delay(attempt: attempt, base: 10, cap: 300)
            let nominal = min(300, 10 * pow(2, Double(attempt - 1)))
            #expect(d >= nominal * 0.9 && d <= nominal * 1.1)
        }
    }
}
