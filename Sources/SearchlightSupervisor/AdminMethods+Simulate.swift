import Foundation
import SearchlightWire

/// `admin.simulate {event, bundle?}`: fires a trigger of DESIGN §6 by hand, for real (the same
/// code path the daemon takes when it detects the condition itself).
extension AdminMethods {
    func simulate(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        guard let event = params["event"]?.stringValue else {
            throw SearchlightError(.invalidParams, "admin.simulate needs \"event\": migration, corruption or idle")
        }
        let bundle: String?
        if let v = params["bundle"], !v.isNull { bundle = try Names.bundle(v) } else { bundle = nil }
        switch event {
        case "migration": return try simulateMigration(bundle: bundle)
        case "corruption": return try simulateCorruption(bundle: bundle)
        case "idle": return try simulateIdle(bundle: bundle)
        default:
            throw SearchlightError(.invalidParams, "admin.simulate: unknown event \"\(event.prefix(64))\"; use migration, corruption or idle")
        }
    }

    // Each trigger is in its own file (AdminMethods+Simulate<Trigger>.swift).
}
