#if canImport(Glibc)
import Glibc
#endif
import Dispatch

/// Ctrl-C (SIGINT) and SIGTERM while the CLI waits for something it may stop waiting for (an
/// acknowledgement, the monitor's stream), so that it can say what happens next and end cleanly.
enum Interrupt {
    static let signals: [Int32] = [SIGINT, SIGTERM]

    /// Runs `operation` until it returns, or until SIGINT or SIGTERM arrives: then the operation is
    /// cancelled and nil is returned. The signals' previous actions are restored afterwards.
    static func race<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) async throws -> T? {
        let (arrived, continuation) = AsyncStream.makeStream(of: Int32.self)
        // A dispatch signal source sees the signal only while its default action is off.
        let previous = signals.map { signal($0, SIG_IGN) }
        let sources = signals.map { number in
            let source = DispatchSource.makeSignalSource(signal: number)
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            return source
        }
        defer {
            for source in sources { source.cancel() }
            for (number, action) in zip(signals, previous) { signal(number, action) }
            continuation.finish()
        }
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
