// The SDK's side of one call (`git show 8eae301:Docs/Performance.md`, "The SDK's side, profiled"):
// N calls of the bench's term first page or lexical user query through SearchlightKit, one after
// another from one task, against a running daemon (the bench's index: `--keep`, bundle
// bench.query). Prints the round trip's p50/p99, this process's CPU and context switches per call
// (every thread, from /proc/self/task), so the client can be compared with drive.py's
// single-threaded one; run it under `valgrind --tool=callgrind` with two values of N and subtract
// for instructions per call.
//
// Built against a release build's objects (no package target: a profiling tool, not a product):
//   Scripts/transport/build-sdkloop.sh   then   /tmp/sdkloop SOCKET term|prefix|userlex N
import Foundation
import SearchlightKit

let args = CommandLine.arguments
guard args.count == 4, let n = Int(args[3]) else {
    FileHandle.standardError.write("usage: sdkloop SOCKET term|prefix|userlex N\n".data(using: .utf8)!)
    exit(2)
}
let socket = args[1], kind = args[2]

func switches() -> [String: Int] {
    var out: [String: Int] = [:]
    for t in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
        guard let status = try? String(contentsOfFile: "/proc/self/task/\(t)/status", encoding: .utf8) else { continue }
        let name = ((try? String(contentsOfFile: "/proc/self/task/\(t)/comm", encoding: .utf8)) ?? "?")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let v = status.split(separator: "\n").filter { $0.contains("ctxt_switches") }
            .compactMap { Int($0.split(separator: "\t").last?.trimmingCharacters(in: .whitespaces) ?? "") }.reduce(0, +)
        out["\(name)/\(t)"] = v
    }
    return out
}

func cpuSeconds() -> Double {
    var u = rusage()
    getrusage(RUSAGE_SELF.rawValue, &u)
    return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6 + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6
}

func once(_ index: SearchableIndex) async throws {
    switch kind {
    case "term", "prefix":
        var context = SearchQueryContext(fetchAttributes: ["title"])
        context.pageSize = 20
        let query = kind == "term" ? "textContent == \"library\"cdw" : "title == \"pars*\"cdw"
        var iterator = SearchQuery(queryString: query, queryContext: context, index: index).results.makeAsyncIterator()
        _ = try await iterator.next()
    case "userlex":
        var c = UserQueryContext()
        c.semanticSearch = false
        c.maxResultCount = 20
        c.maxRankedResultCount = 20
        c.fetchAttributes = ["title"]
        _ = try await UserQuery(userQueryString: "gtk theme", userQueryContext: c, index: index).run()
    default:
        fatalError("term, prefix or userlex")
    }
}

// Nonisolated, so the loop runs on the cooperative pool as an app's task (and the bench's) does:
// top-level code runs on the main actor, and each call would hop to it and back.
func measure() async throws {
    let index = SearchableIndex(bundleIdentifier: "bench.query", socketPath: socket)
    for _ in 0..<20 { try await once(index) }
    let before = switches(), cpu0 = cpuSeconds()
    var times: [Double] = []
    times.reserveCapacity(n)
    let wall0 = Date()
    for _ in 0..<n {
        let t = Date()
        try await once(index)
        times.append(Date().timeIntervalSince(t) * 1e6)
    }
    let wall = Date().timeIntervalSince(wall0)
    let cpu = cpuSeconds() - cpu0
    let after = switches()
    var total = 0
    for (k, v) in after.sorted(by: { $0.key < $1.key }) {
        let d = v - (before[k] ?? 0)
        total += d
        if d > 0 { print(String(format: "  %-32@ %7d  %.2f/call", k as NSString, d, Double(d) / Double(max(n, 1)))) }
    }
    times.sort()
    if n > 0 {
        print(String(format: "%@ n %d p50 %.0f us p99 %.0f us; wall/call %.0f us; client cpu/call %.0f us; client context switches/call %.2f",
            kind, n, times[n / 2], times[min(n - 1, n * 99 / 100)], wall / Double(n) * 1e6, cpu / Double(n) * 1e6, Double(total) / Double(n)))
    }
    await index.close()
}

// Main blocks on a semaphore rather than being an async main: valgrind 3.19 crashes in the
// async main's signal handling (callgrind is what this tool is for).
let done = DispatchSemaphore(value: 0)
Task {
    do { try await measure() } catch { print("error: \(error)"); exit(1) }
    done.signal()
}
done.wait()
