/// A client-side deadline passed (exit status 4).
struct DeadlineExceeded: Error, Sendable {
    let message: String
}

/// Runs `operation`, giving up after `seconds` (nil waits forever). The operation is cancelled
/// when the deadline passes; the daemon keeps any request it already accepted.
func withDeadline<T: Sendable>(
    _ seconds: Double?, _ what: String, _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    guard let seconds else { return try await operation() }
    return try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw DeadlineExceeded(message: "\(what) did not finish within \(Format.duration(seconds)); it may still be running in searchlightd (see `searchlight requests`)")
        }
        return value
    }
}
