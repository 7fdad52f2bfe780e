import Foundation
import SearchlightWire

/// The stream behind `admin.monitor`: supervisor events (requests queued, sent, acknowledged,
/// failed; extensions launched, exited, attached; units reloaded) sent as `admin.event`
/// notifications to every subscribed admin connection.
///
/// Each subscriber has its own serial queue, so a monitor client that stops reading delays only
/// itself (until the send timeout closes it), never the code that emits.
final class EventMonitor: @unchecked Sendable {
    private struct Subscriber {
        let connection: RPCConnection
        let queue: DispatchQueue
    }

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

    func unsubscribe(_ connection: RPCConnection) {
        _ = lock.withLock { subscribers.removeValue(forKey: ObjectIdentifier(connection)) }
    }

    var subscriberCount: Int { lock.withLock { subscribers.count } }

    /// Sends one event to every subscriber. `fields` become the event's keys beside `event` and `time`.
    func emit(_ event: String, _ fields: [String: JSONValue] = [:]) {
        let targets = lock.withLock { Array(subscribers.values) }
        guard !targets.isEmpty else { return }
        var params = fields
        params["event"] = .string(event)
        params["time"] = .string(ISO8601.format(Date()))
        let message = JSONValue.object(params)
        for target in targets {
            target.queue.async { [weak self] in
                do {
                    try target.connection.notify(Method.adminEvent, message)
                } catch {
                    self?.unsubscribe(target.connection)
                }
            }
        }
    }
}
