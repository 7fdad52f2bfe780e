import Foundation
import Synchronization
import SearchlightWire

/// The stream behind `admin.monitor`: supervisor events (requests queued, sent, acknowledged,
/// failed; extensions launched, exited, attached; units reloaded) sent as `admin.event`
/// notifications to every subscribed admin connection.
///
/// Each subscriber has its own serial queue, so a monitor client that stops reading delays only
/// itself (until the send timeout closes it), never the code that emits.
final class EventMonitor: Sendable {
    private final class Subscriber: Sendable {
        let connection: RPCConnection
        let queue: DispatchQueue
        /// Events queued and not yet written.
        let backlog = Atomic<Int>(0)
        init(connection: RPCConnection, queue: DispatchQueue) {
            self.connection = connection
            self.queue = queue
        }
    }

    /// A monitor that falls this far behind is cut off rather than let the daemon's memory grow.
    static let maximumBacklog = 1000

    private struct State {
        var subscribers: [ObjectIdentifier: Subscriber] = [:]
        /// Told of every event, subscribers or not (the systemd STATUS= line follows them).
        var observer: (@Sendable (String, [String: JSONValue]) -> Void)?
    }

    private let state = Mutex(State())
    let log: Logger

    init(log: Logger) { self.log = log }

    func subscribe(_ connection: RPCConnection) {
        let id = ObjectIdentifier(connection)
        state.withLock {
            $0.subscribers[id] = Subscriber(connection: connection, queue: DispatchQueue(label: "monitor-\($0.subscribers.count)"))
        }
    }

    private func drop(_ target: Subscriber) {
        unsubscribe(target.connection)
        target.connection.close()
    }

    func unsubscribe(_ connection: RPCConnection) {
        _ = state.withLock { $0.subscribers.removeValue(forKey: ObjectIdentifier(connection)) }
    }

    var subscriberCount: Int { state.withLock { $0.subscribers.count } }

    func isSubscribed(_ connection: RPCConnection) -> Bool {
        state.withLock { $0.subscribers[ObjectIdentifier(connection)] != nil }
    }

    /// Tells `observer` of every event, subscribers or not (the systemd STATUS= line follows them).
    func observe(_ observer: @escaping @Sendable (_ event: String, _ fields: [String: JSONValue]) -> Void) {
        state.withLock { $0.observer = observer }
    }

    /// Sends one event to every subscriber. `fields` become the event's keys beside `event` and `time`.
    func emit(_ event: String, _ fields: [String: JSONValue] = [:]) {
        let (targets, observer) = state.withLock { (Array($0.subscribers.values), $0.observer) }
        observer?(event, fields)
        guard !targets.isEmpty else { return }
        var params = fields
        params["event"] = .string(event)
        params["time"] = .string(ISO8601.format(Date()))
        let message = JSONValue.object(params)
        for target in targets {
            let behind = target.backlog.add(1, ordering: .relaxed).newValue > Self.maximumBacklog
            if behind {
                log.warning("monitor client does not keep up; disconnecting it", ["backlog": Self.maximumBacklog])
                drop(target)
                continue
            }
            target.queue.async { [weak self] in
                do {
                    try target.connection.notify(Method.adminEvent, message)
                    target.backlog.subtract(1, ordering: .relaxed)
                } catch {
                    // A half-written event may be on the wire: the stream cannot be trusted.
                    self?.drop(target)
                }
            }
        }
    }
}
