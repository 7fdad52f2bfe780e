import Foundation
import Synchronization
import SearchlightUnits
import SearchlightWire

/// One `ExtensionHost` per enabled unit, by label.
final class ExtensionHosts: Sendable {
    private let hosts = Mutex<[String: ExtensionHost]>([:])

    func host(label: String) -> ExtensionHost? { hosts.withLock { $0[label] } }

    /// Every host, by label.
    var all: [ExtensionHost] { hosts.withLock { $0.values.sorted { $0.label < $1.label } } }

    /// Makes the hosts those of `units`: new ones made with `make`, others updated; returns the
    /// hosts of units that are gone (for the caller to stop).
    func update(to units: [ExtensionUnit], make: (ExtensionUnit) -> ExtensionHost) -> [ExtensionHost] {
        hosts.withLock { hosts in
            let labels = Set(units.map(\.label))
            var retired: [ExtensionHost] = []
            for (label, host) in hosts where !labels.contains(label) {
                retired.append(host)
                hosts[label] = nil
            }
            for unit in units {
                if let host = hosts[unit.label] { host.update(unit) } else { hosts[unit.label] = make(unit) }
            }
            return retired
        }
    }
}

extension RequestScheduler {
    /// Re-reads the unit directories; adds, updates and retires hosts; queues initial reindexes.
    @discardableResult
    nonisolated func reloadUnits() -> UnitCatalog.Report {
        let report = catalog.reload()
        for problem in report.problems { log.warning("unit refused", ["problem": problem.description]) }
        let enabled = catalog.units.filter { !$0.disabled }
        let retired = hosts.update(to: enabled) { unit in
            ExtensionHost(unit: unit, context: context, launcher: launcher, clock: clock,
                throttle: { [throttle] in throttle.state }, wake: { [weak self] in self?.wake() })
        }
        for host in retired { host.terminate(hung: false) }
        if report.changed {
            log.info("units loaded", ["units": enabled.count, "problems": report.problems.count])
            events.emit("units.reloaded", ["units": .number(Double(enabled.count)), "problems": .number(Double(report.problems.count))])
        }
        for unit in enabled { queueInitialReindex(unit) }
        context.migrator?.unitsReloaded(enabled)
        wake()
        return report
    }

    /// A new bundle with an extension gets an initial reindex-all of each of its indexes.
    private nonisolated func queueInitialReindex(_ unit: ExtensionUnit) {
        for index in unit.indexExtension.indexNames where journal.recordedVersion(bundle: unit.bundleIdentifier, index: index) == nil {
            do {
                try journal.recordVersion(bundle: unit.bundleIdentifier, index: index, version: unit.indexExtension.indexVersion)
                let queued = try enqueue(bundle: unit.bundleIdentifier, index: index, kind: .all, identifiers: [], reason: "initial", background: true)
                context.initialFill.queued(bundle: unit.bundleIdentifier, index: index, requestID: queued.id, label: unit.label)
            } catch {
                log.error("cannot journal the initial reindex", ["label": unit.label, "error": "\(error)"])
            }
        }
    }

    nonisolated func host(label: String) -> ExtensionHost? { hosts.host(label: label) }

    nonisolated func host(bundle: String) -> ExtensionHost? {
        guard let unit = catalog.unit(forBundle: bundle) else { return nil }
        return host(label: unit.label)
    }

    nonisolated var allHosts: [ExtensionHost] { hosts.all }
}
