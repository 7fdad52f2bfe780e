import Foundation
import SearchlightWire

/// The stream behind `admin.monitor`: supervisor events (requests queued, sent, acknowledged,
/// failed; extensions launched, exited, attached; units reloaded) sent as `admin.event`
/// notifications to every subscribed admin connection.
///
/// Each subscriber has its own serial queue, so a monitor client that stops reading delays only
/// itself (until the send timeout closes it), never the code that emits.
final class EventMonitor: @unchecked Sendable {
    private final class Subscriber: @unchecked Sendable {
        let connection: RPCConnection
        let queue: DispatchQueue
        /// Events queued and not yet written (guarded by the monitor's lock).
        var backlog = 0
        init(connection: RPCConnection, queue: DispatchQueue) {
            self.connection = connection
            self.queue = queue
        }
    }

    /// A monitor that falls this far behind is cut off rather than let the daemon's memory grow.
    static let maximumBacklog = 1000

    private let lock = NSLock()
    private var subscribers: [ObjectIdentifier: Subscriber] = [:]
    let log: Logger

    init(log: Logger) { self.log = log }

    func subscribe(_ connection: RPCConnection) {
        let id = ObjectIdentifier(connection)
        lock.withLock {
            subscribers[id] = Subscriber(connection: connection, queue: DispatchQueue(label: "monitor-\(subscribers.count)"))
        }
    }

    private func drop(_ target: Subscriber) {
        unsubscribe(target.connection)
        target.connection.close()
    }

    func unsubscribe(_ connection: RPCConnection) {
        _ = lock.withLock { subscribers.removeValue(forKey: ObjectIdentifier(connection)) }
    }

    var subscriberCount: Int { lock.withLock { subscribers.count } }

    func isSubscribed(_ connection: RPCConnection) -> Bool {
        lock.withLock { subscribers[ObjectIdentifier(connection)] != nil }
    }

    /// Told of every event, subscribers or not (the systemd STATUS= line follows them).
    private var observer: (@Sendable (String, [String: JSONValue]) -> Void)?
    func observe(_ observer: @escaping @Sendable (_ event: String, _ fields: [String: JSONValue]) -> Void) {
        lock.withLock { self.observer = observer }
    }

    /// Sends one event to every subscriber. `fields` become the event's keys beside `event` and `time`.
    func emit(_ event: String, _ fields: [String: JSONValue] = [:]) {
        let (targets, observer) = lock.withLock { (Array(subscribers.values), self.observer) }
        observer?(event, fields)
        guard !targets.isEmpty else { return }
        var params = fields
        params["event"] = .string(event)
        params["time"] = .string(ISO8601.format(Date()))
        let message = JSONValue.object(params)
        for target in targets {
            let behind: Bool = lock.withLock {
                target.backlog += 1
                return target.backlog > Self.maximumBacklog
            }
            if behind {
                log.warning("monitor client does not keep up; disconnecting it", ["backlog": Self.maximumBacklog])
                drop(target)
                continue
            }
            target.queue.async { [weak self] in
                do {
                    try target.connection.notify(Method.adminEvent, message)
                    self?.lock.withLock { target.backlog -= 1 }
                } catch {
                    // A half-written event may be on the wire: the stream cannot be trusted.
                    self?.drop(target)
                }
            }
        }
    }
}
