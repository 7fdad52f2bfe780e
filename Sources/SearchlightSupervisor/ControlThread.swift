import SearchlightWire

/// The daemon's control thread, `supervisor` (Docs/Architecture.md, "Threads and requests"):
/// the `RequestScheduler` actor runs on it, and so do the tasks that act on the scheduler's
/// behalf (a request's dispatch, an extension host's timers and exit, deferred client calls).
/// Their blocking steps (the journal's SQLite writes and fsyncs, the load's /proc reads, a
/// fork/exec that waits for the child's exec) wait here, on a thread the daemon owns, never on
/// Swift's cooperative pool.
enum ControlThread {
    static let executor = OwnedExecutor(name: "supervisor")
}
