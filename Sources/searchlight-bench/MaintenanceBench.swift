import Foundation
import SearchlightKit

extension BenchRun {
    // MARK: - Idle maintenance cost

    /// `admin.simulate idle` on one index of `size` items donated for it: the whole run (purge,
    /// refresh query, scrub slice, optimize, checkpoint) and the scrub slice alone. The first run
    /// optimizes a full-text index built by many commits (many segments); the later ones find it
    /// merged already, so they show the steady cost.
    func maintenanceCost(size: Int = 100_000) async throws {
        let bundle = "bench.maintenance"
        let items = (0..<size).map { corpus.entry($0).searchableItem }
        _ = try await donate(items, socket: daemon.socket, bundle: bundle, clients: 4, batch: options.batch)
        let admin = SearchlightConnection(role: .admin, socketPath: daemon.socket)
        var first = 0.0
        var later: [Double] = [], scrub: [Double] = []
        for run in 0..<max(3, options.runs) {
            let s = try await admin.call("admin.simulate", ["event": "idle", "bundle": .string(bundle)])
            let elapsed = s["elapsedMilliseconds"]?.doubleValue ?? .nan
            if run == 0 { first = elapsed } else { later.append(elapsed) }
            scrub.append(s["scrubMilliseconds"]?.doubleValue ?? .nan)
            progress(String(format: "maintenance of a %@-item index, run %d: %.0f ms, scrub slice %.1f ms (%d items, %d tables)",
                sizeLabel(size), run + 1, elapsed, scrub.last!, s["rowsScrubbed"]?.intValue ?? 0, s["tablesChecked"]?.intValue ?? 0))
        }
        await admin.close()
        rows.append(Row(scenario: "idle maintenance of a \(sizeLabel(size))-item index, first run (optimize merges every segment)",
            figure: Figure([first]), unit: "ms", higherIsBetter: false))
        rows.append(Row(scenario: "idle maintenance of a \(sizeLabel(size))-item index, later runs", figure: Figure(later), unit: "ms",
            higherIsBetter: false))
        rows.append(Row(scenario: "idle scrub slice (5 000 checksums and 2 slots of the rotation: the FTS5 integrity-check one run in 4, else quick_check of 2 tables), \(sizeLabel(size)) items",
            figure: Figure(scrub), unit: "ms", higherIsBetter: false))
    }
}
