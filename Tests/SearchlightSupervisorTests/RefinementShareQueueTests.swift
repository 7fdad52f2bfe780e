import Foundation
import Testing
import TestThreads
@testable import SearchlightSupervisor

/// When the low-priority refinement share looks at an index, and when it gives way (issue 37),
/// driven by an injected clock.
@Suite("Refinement share queue", .onOwnThreads)
struct RefinementShareQueueTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    typealias Key = RefinementShareQueue.Key
    let recipes = Key(bundle: "com.example.recipes", index: "")
    let notes = Key(bundle: "com.example.notes", index: "drafts")

    @Test("an index is due settle seconds after its last donation; a donation that keeps coming keeps moving it")
    func settles() {
        var q = RefinementShareQueue(settle: 30)
        q.donated(recipes, at: t0)
        let early = q.take(at: t0.addingTimeInterval(29))
        #expect(early.key == nil && early.next == t0.addingTimeInterval(30))
        q.donated(recipes, at: t0.addingTimeInterval(20))
        #expect(q.take(at: t0.addingTimeInterval(30)).key == nil, "the second donation moved it to 50 s")
        let due = q.take(at: t0.addingTimeInterval(50))
        #expect(due.key == recipes)
        let empty = q.take(at: t0.addingTimeInterval(1000))
        #expect(empty.key == nil && empty.next == nil, "taken once")
    }

    @Test("the earliest due index first; a retry does not move an index a donation put later")
    func order() {
        var q = RefinementShareQueue(settle: 10)
        q.donated(notes, at: t0.addingTimeInterval(5))
        q.donated(recipes, at: t0)
        #expect(q.take(at: t0.addingTimeInterval(100)).key == recipes)
        #expect(q.take(at: t0.addingTimeInterval(100)).key == notes)
        q.donated(recipes, at: t0.addingTimeInterval(200))  // due at 210
        q.retry(recipes, at: t0.addingTimeInterval(202))
        #expect(q.due[recipes] == t0.addingTimeInterval(210))
        q.retry(notes, at: t0.addingTimeInterval(202))
        #expect(q.due[notes] == t0.addingTimeInterval(202))
    }

    @Test("only memory pressure at the pause mark (or the stop) pauses it; CPU pressure is not asked")
    func pauses() {
        #expect(RefinementShareQueue.pauseReason(memory: nil, pauseMemory: 30, stopping: false) == nil)
        #expect(RefinementShareQueue.pauseReason(memory: 29.9, pauseMemory: 30, stopping: false) == nil)
        #expect(RefinementShareQueue.pauseReason(memory: 30, pauseMemory: 30, stopping: false)?.contains("memory pressure") == true)
        #expect(RefinementShareQueue.pauseReason(memory: 0, pauseMemory: 30, stopping: true) == "stopping")
    }

    @Test("a batch waits for user queries on the transformer at most maxWait, so a query stream slows the share without holding it")
    func queryWaitIsBounded() {
        #expect(RefinementShareQueue.keepsWaiting(busy: true, waited: 0, maxWait: 2))
        #expect(RefinementShareQueue.keepsWaiting(busy: true, waited: 1.9, maxWait: 2))
        #expect(!RefinementShareQueue.keepsWaiting(busy: true, waited: 2, maxWait: 2), "the stream never ends: the batch runs")
        #expect(!RefinementShareQueue.keepsWaiting(busy: false, waited: 0, maxWait: 2))
        #expect(RefinementShare.maxQueryWait > 0 && RefinementShare.maxQueryWait <= 5)
    }
}
