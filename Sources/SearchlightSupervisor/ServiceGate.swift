import Foundation

/// Lets client calls run side by side while keeping them out of a short exclusive section (the
/// replacement of an index file). Writer-preferring: once an exclusive section waits, new calls
/// wait for it, so a steady stream of queries cannot starve a swap.
///
/// A call may itself start an exclusive section (`admin.simulate corruption` replaces a file
/// from inside its call): it then steps out of the gate while it waits and runs, so it waits
/// only for the other calls, never for itself.
final class ServiceGate: @unchecked Sendable {
    // @unchecked: `inside` and `exclusive` are guarded by `condition`, which calls and the exclusive section wait on.
    private let condition = NSCondition()
    private var inside = 0
    private var exclusive = false
    /// How deep the current thread is inside `serving` (per thread, for the case above), in a
    /// pthread key: Foundation's thread dictionary (a boxed Int under a string key) cost about 5 %
    /// of a query's time in the daemon.
    private var depthKey = pthread_key_t()

    init() {
        pthread_key_create(&depthKey, nil)
    }

    deinit { pthread_key_delete(depthKey) }

    private var depth: Int {
        get { Int(bitPattern: pthread_getspecific(depthKey)) }
        set { pthread_setspecific(depthKey, UnsafeRawPointer(bitPattern: newValue)) }
    }

    /// Runs a client call; waits while an exclusive section is pending or running.
    func serving<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        let nested = depth > 0
        if !nested {
            condition.lock()
            while exclusive { condition.wait() }
            inside += 1
            condition.unlock()
        }
        depth += 1
        defer {
            depth -= 1
            if !nested {
                condition.lock()
                inside -= 1
                if inside == 0 { condition.broadcast() }
                condition.unlock()
            }
        }
        return try body()
    }

    /// Runs `body` once no other client call is in progress, holding new ones back until it returns.
    func exclusively<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        let own = depth > 0 ? 1 : 0
        condition.lock()
        inside -= own
        if inside == 0 { condition.broadcast() }
        while exclusive { condition.wait() }
        exclusive = true
        while inside > 0 { condition.wait() }
        condition.unlock()
        defer {
            condition.lock()
            exclusive = false
            inside += own
            condition.broadcast()
            condition.unlock()
        }
        return try body()
    }
}
