#if canImport(Glibc)
import Glibc
#endif
import SearchlightWire

/// Ctrl-C (SIGINT) and SIGTERM while the CLI waits for something it may stop waiting for (an
/// acknowledgement, the monitor's stream), so that it can say what happens next and end cleanly.
/// Through `SignalEvents` (a handler that writes to a pipe), which works on whichever thread the
/// kernel gives the signal to.
enum Interrupt {
    static let signals: [Int32] = [SIGINT, SIGTERM]

    /// Runs `operation` until it returns, or until SIGINT or SIGTERM arrives: then the operation is
    /// cancelled and nil is returned. The signals' previous actions are restored afterwards.
    static func race<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) async throws -> T? {
        let arrived = try SignalEvents.stream(signals)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await operation() }
            group.addTask {
                for await _ in arrived { return nil }
                // Cancelled because the operation finished first: this result is never read.
                return nil
            }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
    }
}
