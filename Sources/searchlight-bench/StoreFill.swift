import Foundation
import SearchlightStore

/// `--scenarios fill`: the write path of a reindex-all in this process, no socket and no
/// extension: an `IndexStore` emptied, then filled to the largest `--sizes` in calls of 1000 items
/// with three in flight (as the Packages extension sends them). Prints items/s and the file reads
/// and writes per item of every tenth of the way, so a cost that grows with the index shows where
/// it starts; the loop to run under a profiler or strace while working on large indexes.
enum StoreFill {
    static func run(options: Options, corpus: Corpus) throws -> [Row] {
        let size = options.sizes.last ?? 1_000_000
        let dir = "/tmp/slbench-fill-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try IndexStore(path: dir + "/b/_default.sqlite")
        defer { store.close() }
        _ = try store.applySync([.deleteAll])
        let chunk = 1000, step = max(size / 10, chunk)
        let start = now()
        var segmentStart = start, io = IOCounters.read(), cpu = cpuSeconds()
        var rates: [Double] = []
        let calls = DispatchGroup(), slots = DispatchSemaphore(value: 3)
        let failure = FailureBox()
        var i = 0
        while i < size {
            let items = (i..<min(i + chunk, size)).map { corpus.entry($0).searchableItem }
            slots.wait()
            calls.enter()
            DispatchQueue.global().async {
                do { _ = try store.applySync([.items(items)]) } catch { failure.set("\(error)") }
                slots.signal()
                calls.leave()
            }
            i += items.count
            if i % step == 0 || i == size {
                calls.wait()
                if let message = failure.message { fatal("fill failed: \(message)") }
                let t = now(), next = IOCounters.read(), n = Double(i % step == 0 ? step : i % step)
                rates.append(n / (t - segmentStart))
                let cpuNext = cpuSeconds()
                progress(String(format: "fill %@: %.0f items/s, %.1f CPU-µs per item; per item %.2f reads (%.0f bytes), %.2f writes (%.0f bytes)",
                    sizeLabel(i), rates.last!, (cpuNext - cpu) * 1e6 / n, Double(next.reads - io.reads) / n, Double(next.readBytes - io.readBytes) / n,
                    Double(next.writes - io.writes) / n, Double(next.writtenBytes - io.writtenBytes) / n))
                segmentStart = t
                io = next
                cpu = cpuNext
            }
        }
        let total = Double(size) / (now() - start)
        return [
            Row(scenario: "IndexStore fill to \(sizeLabel(size)) in calls of \(chunk)", figure: Figure([total]), unit: "items/s", higherIsBetter: true),
            Row(scenario: "IndexStore fill, last tenth ÷ first tenth", figure: Figure([rates.last! / rates.first!]), unit: "ratio", higherIsBetter: true),
        ]
    }
}

/// This process's user and system CPU time, all threads.
func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// This process's read and write system calls and bytes (`/proc/self/io`: rchar, wchar, syscr, syscw).
struct IOCounters {
    var reads = 0, writes = 0, readBytes = 0, writtenBytes = 0

    static func read() -> IOCounters {
        var c = IOCounters()
        guard let text = try? String(contentsOfFile: "/proc/self/io", encoding: .utf8) else { return c }
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: ":")
            guard parts.count == 2, let v = Int(parts[1].trimmingCharacters(in: .whitespaces)) else { continue }
            switch parts[0] {
            case "syscr": c.reads = v
            case "syscw": c.writes = v
            case "rchar": c.readBytes = v
            case "wchar": c.writtenBytes = v
            default: break
            }
        }
        return c
    }
}

final class FailureBox: @unchecked Sendable {
    private let lock = NSLock()
    private var value: String?
    var message: String? { lock.withLock { value } }
    func set(_ m: String) { lock.withLock { if value == nil { value = m } } }
}
