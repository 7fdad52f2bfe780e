// sdkloop's term or prefix first page from a minimal blocking client on the calling thread: the
// same request (`QuerySearch` framed by `RPCMessage`), `write`, `read` on this thread until the
// frame is whole, the result decoded with the SDK's `SearchPageAnswer.decode`; no reader thread,
// no continuation, no actor. sdkloop's p50 minus this one's is what the SDK's threading costs a
// call (`git show 8eae301:Docs/Performance.md`, "The client's wake-ups"). The envelope is found by
// position, not scanned (the SDK's scan skips the result once more: about 45 k instructions of a
// term call).
//
// Built like sdkloop:  Scripts/transport/build-sdkloop.sh /tmp/blockloop Scripts/transport/blockloop.swift
//   then   /tmp/blockloop SOCKET term|prefix N
import Foundation
import SearchlightWire

let args = CommandLine.arguments
guard args.count == 4, let n = Int(args[3]), args[2] == "term" || args[2] == "prefix" else {
    FileHandle.standardError.write("usage: blockloop SOCKET term|prefix N\n".data(using: .utf8)!)
    exit(2)
}
let socket = try UnixSocket.connect(path: args[1])
let query = args[2] == "term" ? "textContent == \"library\"cdw" : "title == \"pars*\"cdw"
var decoder = FrameDecoder()
let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 1)
var nextID = 1

func roundTrip(_ method: String, _ params: JSONValue) throws -> [UInt8] {
    defer { nextID += 1 }
    try socket.writeAll(RPCMessage.request(id: .number(nextID), method: method, params: params).frame())
    while true {
        if let frame = try decoder.next() { return Array(frame) }
        let got = try socket.read(into: chunk)
        guard got > 0 else { fatalError("the daemon closed the connection") }
        decoder.append(UnsafeRawBufferPointer(rebasing: chunk[0..<got]))
    }
}

func once() throws {
    let request = QuerySearch(query: query, fetchAttributes: ["title"], limit: 20, index: "")
    let frame = try roundTrip(QuerySearch.method, request.params)
    // `{"jsonrpc":"2.0","id":N,"result":…}`: the result runs from after `"result":` to the last `}`.
    let key = Array(#""result":"#.utf8)
    guard let at = (0...(frame.count - key.count)).first(where: { frame[$0..<$0 + key.count].elementsEqual(key) }) else {
        fatalError("not a success answer: \(String(decoding: frame.prefix(300), as: UTF8.self))")
    }
    let end = frame.lastIndex(of: UInt8(ascii: "}"))!
    let page = try frame.withUnsafeBufferPointer { try SearchPageAnswer.decode(UnsafeBufferPointer(rebasing: $0[(at + key.count)..<end])) }
    precondition(page.items.count == 20)
}

func switches() -> Int {
    var total = 0
    for t in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
        guard let status = try? String(contentsOfFile: "/proc/self/task/\(t)/status", encoding: .utf8) else { continue }
        total += status.split(separator: "\n").filter { $0.contains("ctxt_switches") }
            .compactMap { Int($0.split(separator: "\t").last?.trimmingCharacters(in: .whitespaces) ?? "") }.reduce(0, +)
    }
    return total
}

func cpuSeconds() -> Double {
    var u = rusage()
    getrusage(RUSAGE_SELF.rawValue, &u)
    return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6 + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6
}

_ = try roundTrip("initialize", ["protocolVersion": 1, "role": "app", "bundleIdentifier": "bench.query"])
for _ in 0..<20 { try once() }
let s0 = switches(), cpu0 = cpuSeconds(), wall0 = Date()
var times: [Double] = []
times.reserveCapacity(n)
for _ in 0..<n {
    let t = Date()
    try once()
    times.append(Date().timeIntervalSince(t) * 1e6)
}
let wall = Date().timeIntervalSince(wall0), cpu = cpuSeconds() - cpu0, s = switches() - s0
times.sort()
print(String(format: "blocking %@ n %d p50 %.0f us p99 %.0f us; wall/call %.0f us; client cpu/call %.0f us; client context switches/call %.2f",
    args[2], n, times[n / 2], times[min(n - 1, n * 99 / 100)], wall / Double(n) * 1e6, cpu / Double(n) * 1e6, Double(s) / Double(n)))
