import Foundation
import SearchlightWire

/// `admin.simulate {event, bundle?}`: fires a trigger of DESIGN §6 by hand, for real (the same
/// code path the daemon takes when it detects the condition itself).
extension AdminSession {
    func simulate(_ r: AdminSimulate) throws(SearchlightError) -> JSONValue {
        switch r.event {
        case .migration: return try simulateMigration(bundle: r.bundle)
        case .corruption: return try simulateCorruption(bundle: r.bundle)
        case .idle: return try simulateIdle(bundle: r.bundle)
        }
    }

    // Each trigger is in its own file (AdminSession+Simulate<Trigger>.swift).
}
