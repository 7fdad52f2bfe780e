import Synchronization
import Testing
import TestThreads
@testable import SearchlightStore

/// The quiet heap trim (`HeapTrimmer`) on a manual clock and scheduler: it follows the last read
/// by its quiet spell, once, and never begins while a reader is checked out (issue 32's second
/// review: a read longer than the spell met a trim, which holds the arenas' locks).
@Suite("Heap trimmer", .onOwnThreads)
struct HeapTrimmerTests {
    /// A manual clock and the callbacks the trimmer scheduled, run on demand.
    final class Manual: Sendable {
        let now = Mutex(100.0)
        let due = Mutex<[(at: Double, work: @Sendable () -> Void)]>([])

        func trimmer(quiet: Double = 2) -> HeapTrimmer {
            HeapTrimmer(quietSeconds: quiet, enabled: true, clock: { self.now.withLock { $0 } },
                schedule: { delay, work in
                    let at = self.now.withLock { $0 } + delay
                    self.due.withLock { $0.append((at, work)) }
                })
        }

        /// Moves the clock to `t` and runs what falls due by then (and what they schedule).
        func advance(to t: Double) {
            now.withLock { $0 = t }
            while let work = due.withLock({ d -> (@Sendable () -> Void)? in
                guard let i = d.firstIndex(where: { $0.at <= t }) else { return nil }
                return d.remove(at: i).work
            }) { work() }
        }
    }

    @Test("a trim follows the last read by the quiet spell, once per quiet spell")
    func afterQuiet() {
        let m = Manual()
        let trimmer = m.trimmer()
        trimmer.readBegan()
        trimmer.readEnded()
        m.advance(to: 101)
        trimmer.readBegan()
        trimmer.readEnded()  // the spell starts again at 101
        m.advance(to: 102.5)
        #expect(trimmer.trims == 0)
        m.advance(to: 103.5)
        #expect(trimmer.trims == 1)
        m.advance(to: 200)
        #expect(trimmer.trims == 1, "no read since: no second trim")
    }

    @Test("a read longer than the quiet spell defers the trim until it ends")
    func notDuringALongRead() {
        let m = Manual()
        let trimmer = m.trimmer()
        trimmer.readBegan()
        trimmer.readEnded()
        trimmer.readBegan()  // a long read: 10 s, five quiet spells
        for t in stride(from: 101.0, through: 110, by: 0.5) {
            m.advance(to: t)
            #expect(trimmer.trims == 0, "at \(t): a trim while a reader is out")
        }
        trimmer.readEnded()
        m.advance(to: 111)
        #expect(trimmer.trims == 0, "the spell starts at the read's end")
        m.advance(to: 112.5)
        #expect(trimmer.trims == 1)
    }

    @Test("two readers out: the trim waits for both")
    func waitsForEveryReader() {
        let m = Manual()
        let trimmer = m.trimmer()
        trimmer.readBegan()
        trimmer.readBegan()
        trimmer.readEnded()
        m.advance(to: 105)
        #expect(trimmer.trims == 0)
        trimmer.readEnded()
        m.advance(to: 108)
        #expect(trimmer.trims == 1)
    }

    @Test("a trim asked for after a load runs on the trimmer's thread, not the caller's, and not while a reader is out")
    func requested() {
        let m = Manual()
        let trimmer = m.trimmer()
        trimmer.readBegan()  // the query whose open loaded the vectors
        trimmer.requestTrim()
        #expect(trimmer.trims == 0, "not on the caller's thread")
        m.advance(to: 103)
        #expect(trimmer.trims == 0, "the query's reader is still out")
        trimmer.readEnded()
        m.advance(to: 104)
        #expect(trimmer.trims == 0)
        m.advance(to: 105.5)
        #expect(trimmer.trims == 1)
        trimmer.requestTrim()
        trimmer.requestTrim()
        m.advance(to: 110)
        #expect(trimmer.trims == 2, "two requests in one spell: one trim")
    }

    @Test("switched off, nothing is scheduled")
    func off() {
        let m = Manual()
        let trimmer = HeapTrimmer(quietSeconds: 2, enabled: false, clock: { 0 }, schedule: { _, work in m.due.withLock { $0.append((0, work)) } })
        trimmer.readBegan()
        trimmer.readEnded()
        trimmer.requestTrim()
        #expect(m.due.withLock { $0.isEmpty })
    }
}
