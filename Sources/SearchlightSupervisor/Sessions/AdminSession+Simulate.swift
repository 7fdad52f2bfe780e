import Foundation
import SearchlightWire

/// `admin.simulate {event, bundle?, wait?}`: fires a trigger of DESIGN §6 by hand, for real (the
/// same code path the daemon takes when it detects the condition itself).
extension AdminSession {
    /// Answered later (a deferred call): an idle run lasts as long as its work (refinement can take
    /// minutes), on the maintenance's background thread, while the connection goes on reading.
    /// Migration and corruption only start their work: they run on a thread of their own, inside
    /// the service gate as a call on the connection's thread would (corruption's replacement of
    /// the file is an exclusive section), never on Swift's cooperative pool.
    func simulate(_ r: AdminSimulate) async throws -> JSONValue {
        switch r.event {
        case .idle:
            return try await simulateIdle(bundle: r.bundle, wait: r.wait)
        case .migration, .corruption:
            let context = self.context
            return try await Self.onThread(named: "simulate") { () throws(SearchlightError) -> JSONValue in
                try context.registry.gate.serving { () throws(SearchlightError) -> JSONValue in
                    r.event == .migration ? try self.simulateMigration(bundle: r.bundle) : try self.simulateCorruption(bundle: r.bundle)
                }
            }
        }
    }

    /// Runs blocking work on a new thread and returns its result, without holding a pool thread.
    static func onThread<T: Sendable>(named name: String, _ body: @escaping @Sendable () throws(SearchlightError) -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                continuation.resume(with: Result { () throws(SearchlightError) -> T in try body() }.mapError { $0 as any Error })
            }
            thread.name = name
            thread.start()
        }
    }

    // Each trigger is in its own file (AdminSession+Simulate<Trigger>.swift).
}
