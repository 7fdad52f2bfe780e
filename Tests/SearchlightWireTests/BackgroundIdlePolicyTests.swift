import Foundation
import Synchronization
import Testing
import TestThreads
@testable import SearchlightWire

/// With `SEARCHLIGHT_BACKGROUND_IDLE=1` settling's thread takes SCHED_IDLE (an experiment, issue 32
/// item 2: right after a donation it took a core for seconds while the app searched); other
/// background threads stay at nice 10 only, and without the switch every one does.
@Suite("Background threads' idle policy", .onOwnThreads)
struct BackgroundIdlePolicyTests {
    /// The policy and flags a `BackgroundQueue`'s thread ends up with.
    func seen(idle: Bool) -> (policyIdle: Bool, flagged: Bool, background: Bool) {
        let queue = BackgroundQueue(label: idle ? "test-idle" : "test-nice", idle: idle)
        let seen = Mutex((false, false, false))
        let done = DispatchSemaphore(value: 0)
        queue.async {
            seen.withLock {
                $0 = (BackgroundPriority.currentThreadPolicyIsIdle, BackgroundPriority.isCurrentThreadIdle,
                      BackgroundPriority.isCurrentThreadBackground)
            }
            done.signal()
        }
        done.wait()
        return seen.withLock { $0 }
    }

    @Test("a queue asked to idle runs on a SCHED_IDLE thread when the switch is on, else at nice 10; another at nice 10 only; the caller's thread is unchanged")
    func idleQueue() {
        let idle = seen(idle: true)
        #expect(idle.policyIdle == BackgroundPriority.idlePolicy)
        #expect(idle.flagged == BackgroundPriority.idlePolicy)
        #expect(idle.background == (BackgroundPriority.niceValue > 0))
        let nice = seen(idle: false)
        #expect(!nice.policyIdle && !nice.flagged)
        #expect(!BackgroundPriority.currentThreadPolicyIsIdle, "the test's own thread changed")
    }
}
