import Foundation
import SearchlightKit
import Synchronization

/// The provider's connection to `searchlightd`, in the desktop role, with a deadline on every
/// call: GNOME Shell waits for a provider's answer before it shows that provider's results, and
/// cancels the search at the user's next keystroke, so a daemon that is down must give an empty
/// answer at once and a daemon that hangs an empty answer within `timeout`, never a stall.
///
/// - Down (no socket, nobody listening): the connection fails at once; the next call connects
///   again, finding the socket anew (a daemon started later, user or system).
/// - Hung (accepts, never answers): the call is abandoned at the deadline and the connection
///   closed; calls still waiting on it count as in flight, and past `maxInFlight` a call is
///   answered empty without being sent, so a stopped daemon costs no thread or socket per keystroke.
actor DaemonClient {
    struct Unavailable: Error, CustomStringConvertible {
        var description: String
    }

    private let explicitSocket: String?
    private let timeout: Duration
    private var connection: SearchlightConnection?
    private let inFlight = Counter()
    static let maxInFlight = 8

    /// Calls sent and not yet answered (their tasks end after this actor's call returned).
    final class Counter: Sendable {
        private let value = Mutex(0)
        func take(below limit: Int) -> Bool {
            value.withLock { n in
                guard n < limit else { return false }
                n += 1
                return true
            }
        }
        func release() { value.withLock { $0 -= 1 } }
    }

    init(socket: String?, timeout: Duration) {
        explicitSocket = socket
        self.timeout = timeout
    }

    /// Calls a method; throws `Unavailable` when the daemon is down, hung or over its deadline,
    /// and the daemon's `SearchlightError` for an error answer.
    func send<R: WireRequest>(_ request: R) async throws -> R.Response {
        let method = R.method
        guard inFlight.take(below: Self.maxInFlight) else {
            throw Unavailable(description: "\(Self.maxInFlight) calls to searchlightd are unanswered; not sending more")
        }
        let connection = current()
        let counter = inFlight
        let outcome = Deadline<R.Response>()
        Task {
            defer { counter.release() }
            do {
                outcome.finish(.success(try await connection.send(request)))
            } catch {
                outcome.finish(.failure(error))
            }
        }
        let timeout = self.timeout
        Task {
            try? await Task.sleep(for: timeout)
            outcome.finish(.failure(Unavailable(description: "searchlightd did not answer \(method) within \(timeout)")))
        }
        do {
            return try await outcome.value
        } catch let error as SearchlightError where error.code == .remoteConnection {
            // Down or gone: the next call connects again, to the socket found then.
            if self.connection === connection { self.connection = nil }
            throw Unavailable(description: error.message)
        } catch let error as Unavailable {
            // Hung: fail what waits on this connection (a connection still in its handshake stays
            // until the daemon answers or dies; it is reused, never one more opened per call).
            await connection.close()
            throw error
        }
    }

    private func current() -> SearchlightConnection {
        if let connection { return connection }
        let made = SearchlightConnection(role: .desktop, socketPath: explicitSocket)
        connection = made
        return made
    }
}

/// A result that the first of two racers gives: the call's answer or the deadline.
final class Deadline<T: Sendable>: Sendable {
    private let state = Mutex<(result: Result<T, any Error>?, waiter: CheckedContinuation<T, any Error>?)>((nil, nil))

    func finish(_ result: Result<T, any Error>) {
        let waiter: CheckedContinuation<T, any Error>? = state.withLock { s in
            guard s.result == nil else { return nil }
            s.result = result
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(with: result)
    }

    var value: T {
        get async throws {
            try await withCheckedThrowingContinuation { continuation in
                let ready: Result<T, any Error>? = state.withLock { s in
                    if s.result == nil { s.waiter = continuation }
                    return s.result
                }
                if let ready { continuation.resume(with: ready) }
            }
        }
    }
}
