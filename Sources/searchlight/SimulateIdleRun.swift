import Foundation
import SearchlightKit
import Synchronization

/// `searchlight simulate idle [BUNDLE] [--wait | --no-wait]`: asks searchlightd for a maintenance
/// run now. Waiting (the default, as `reindex` and `systemctl start` wait), it shows each index as
/// the run reaches it and the refinement's progress, and returns with the run's summary when it
/// ends: no client-side timeout, the run takes as long as its work. Ctrl-C stops waiting only.
struct SimulateIdleRun {
    let bundle: String?
    let wait: Bool

    func run(_ context: CommandContext) async throws {
        let request = AdminSimulate(event: .idle, bundle: bundle, wait: wait)
        guard wait else {
            let answer = try await context.admin(request)
            if context.json {
                Console.out(answer)
            } else {
                let what = bundle.map { "maintenance of \($0)" } ?? "maintenance"
                Console.out(answer["queued"]?.boolValue == true
                    ? "\(what) queued behind the run in progress; it runs in searchlightd (follow it with `searchlight status` or `searchlight monitor`)"
                    : "\(what) started in searchlightd (follow it with `searchlight status` or `searchlight monitor`)")
            }
            return
        }
        let progress = MaintenanceProgress()
        defer { progress.finish() }
        let outcome = try await Interrupt.race {
            try await context.admin(request) { method, params in
                guard method == Method.progress else { return }
                progress.show(params)
            }
        }
        progress.finish()
        guard let summary = outcome else {
            Console.error("stopped waiting; the maintenance run goes on in searchlightd (see `searchlight status`)")
            throw ExitStatus(code: 130)
        }
        if context.json {
            Console.out(summary)
        } else {
            MaintenanceOutput.printSummary(summary)
        }
    }
}

/// The `$/progress` of a maintenance run: a line as each index begins, then the refinement's
/// counter or bar (`ReindexProgress`, one per index).
final class MaintenanceProgress: Sendable {
    private let current = Mutex<(key: String, bar: ReindexProgress)?>(nil)

    func show(_ params: JSONValue) {
        let name = "\(params["bundle"]?.stringValue ?? "?")/\(params["index"]?.stringValue.map { $0.isEmpty ? "_default" : $0 } ?? "?")"
        current.withLock { current in
            if let message = params["message"]?.stringValue {
                current?.bar.finish()
                current = nil
                Console.errorLine(Format.clip(message, 300))
                return
            }
            guard let completed = try? NumericParameter.integer(params["completed"], field: "completed", in: 0...NumericParameter.maxCount)
            else { return }
            let total = try? NumericParameter.integer(params["total"], field: "total", in: 0...NumericParameter.maxCount)
            if current?.key != name {
                current?.bar.finish()
                current = (name, ReindexProgress(label: "refining \(name)"))
            }
            current?.bar.update(completed: completed, total: total)
        }
    }

    func finish() {
        current.withLock { current in
            current?.bar.finish()
            current = nil
        }
    }
}
