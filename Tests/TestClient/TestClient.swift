#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import Synchronization

/// A client process for the integration tests that must run as another user (`setpriv`): the
/// daemon sees its real uid through SO_PEERCRED. Each mode prints one line of `key=value` results
/// on stdout:
/// - `hold SOCKET COUNT BUNDLE`: opens COUNT connections, each sending `initialize` as an app of
///   BUNDLE; prints `held=N refused=M codes=C,…` (the error codes of the refusals), then keeps the
///   held connections open, idle, until its stdin closes.
/// - `bundles SOCKET COUNT PREFIX`: donates one item to each of the bundles PREFIX.0 … PREFIX.(COUNT-1),
///   one connection each, four at a time; prints `created=N failed=M first_error=…`.
/// - `flood SOCKET COUNT BUNDLE`: as an app of BUNDLE, `query.prepare` (the transformer loaded),
///   then COUNT connections each sending `query.user` with a 60 KB CJK text, two in flight each,
///   again and again; prints `flooding=N` once every connection has sent, and when its stdin
///   closes `answered=N cancelled=M other=K` (the answers so far) and exits (the kernel closes
///   every socket at once).
/// - `ask SOCKET COUNT BUNDLE`: COUNT one-word `query.user` calls (semantic on) on one connection,
///   one after the other, each waited for 30 s at most; prints `answered=N cancelled=M failed=K
///   p50_ms=… p99_ms=… max_ms=…`.
/// - `current SOCKET ID BUNDLE`: a `UserActivity` of BUNDLE with persistent identifier ID becomes
///   current through the SDK; prints `current=ok` (or `current=failed message=…`), then waits until
///   it is killed or its stdin closes (an app that quits or crashes with a current activity).
/// - `probe SOCKET ROLE BUNDLE` (the sandbox tests run it inside `bwrap`): one connection that
///   sends `initialize` in ROLE (app, desktop, admin) for BUNDLE (`-` for none), then, when that
///   was answered, writes one item (role app) and searches (role app or desktop); prints
///   `init=ok|CODE write=ok|CODE|- read=ok:N|CODE|- message=…` (the first refusal's text).
@main
struct TestClient {
    static func main() async {
        let args = Array(CommandLine.arguments.dropFirst())
        if args.count == 4, args[0] == "probe" {
            probe(socket: args[1], role: args[2], bundle: args[3] == "-" ? nil : args[3])
            return
        }
        if args.count == 4, args[0] == "current" {
            await current(socket: args[1], identifier: args[2], bundle: args[3])
            return
        }
        guard args.count == 4, let count = Int(args[2]) else {
            FileHandle.standardError.write(Data("usage: searchlight-test-client hold|bundles SOCKET COUNT NAME\n".utf8))
            exit(2)
        }
        switch args[0] {
        case "hold": hold(socket: args[1], count: count, bundle: args[3])
        case "bundles": await bundles(socket: args[1], count: count, prefix: args[3])
        case "flood": flood(socket: args[1], count: count, bundle: args[3])
        case "ask": ask(socket: args[1], count: count, bundle: args[3])
        default:
            FileHandle.standardError.write(Data("unknown mode \(args[0])\n".utf8))
            exit(2)
        }
    }

    /// One line read from a socket (a JSON-RPC answer), or nil at end of stream.
    static func readLine(_ socket: UnixSocket) -> JSONValue? {
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n = withUnsafeMutableBytes(of: &byte) { (try? socket.read(into: $0)) ?? 0 }
            if n <= 0 { return nil }
            if byte == 0x0A { return try? JSONValue.parse(line) }
            line.append(byte)
        }
    }

    static func hold(socket path: String, count: Int, bundle: String) {
        var held: [UnixSocket] = []
        var codes: [Int] = []
        let initialize = #"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"role":"app","bundleIdentifier":"\#(bundle)","capabilities":{}}}"# + "\n"
        for _ in 0..<count {
            guard let socket = try? UnixSocket.connect(path: path) else {
                codes.append(0)
                continue
            }
            socket.setReceiveTimeout(seconds: 30)
            try? socket.writeAll(Array(initialize.utf8))
            let answer = readLine(socket)
            if answer?["result"] != nil {
                held.append(socket)
            } else {
                codes.append(answer?["error"]?["code"]?.intValue ?? 0)
                socket.close()
            }
        }
        let line = "held=\(held.count) refused=\(codes.count) codes=\(Set(codes).sorted().map(String.init).joined(separator: ","))\n"
        FileHandle.standardOutput.write(Data(line.utf8))
        _ = FileHandle.standardInput.readDataToEndOfFile()
        withExtendedLifetime(held) {}
    }

    static func current(socket path: String, identifier: String, bundle: String) async {
        let activity = UserActivity(activityType: bundle + ".view", configuration: .init(bundleIdentifier: bundle, socketPath: path))
        activity.persistentIdentifier = identifier
        activity.title = "Bridges view held by a client"
        activity.isEligibleForSearch = true
        var line = "current=ok\n"
        do {
            try await activity.becomeCurrent()
        } catch {
            line = "current=failed message=\(error)\n"
        }
        FileHandle.standardOutput.write(Data(line.utf8))
        // Off the cooperative pool: the caller kills this process (or closes its stdin).
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                _ = FileHandle.standardInput.readDataToEndOfFile()
                done.resume()
            }
        }
        withExtendedLifetime(activity) {}
    }

    static func probe(socket path: String, role: String, bundle: String?) {
        guard let s = try? UnixSocket.connect(path: path) else {
            print("init=connect write=- read=- message=cannot connect to \(path)")
            exit(1)
        }
        s.setReceiveTimeout(seconds: 30)
        var message = ""
        func call(_ id: Int, _ method: String, _ params: JSONValue) -> (ok: Bool, text: String, answer: JSONValue?) {
            let request: JSONValue = ["jsonrpc": "2.0", "id": .number(Double(id)), "method": .string(method), "params": params]
            var out: [UInt8] = []
            request.write(to: &out)
            out.append(0x0A)
            guard (try? s.writeAll(out)) != nil, let answer = readLine(s) else { return (false, "closed", nil) }
            if answer["result"] != nil { return (true, "ok", answer["result"]) }
            if message.isEmpty { message = answer["error"]?["message"]?.stringValue ?? "" }
            return (false, String(answer["error"]?["code"]?.intValue ?? 0), nil)
        }
        var hello: [String: JSONValue] = ["protocolVersion": 1, "role": .string(role), "capabilities": [:]]
        if let bundle { hello["bundleIdentifier"] = .string(bundle) }
        let initialized = call(1, "initialize", .object(hello))
        var write = "-", read = "-"
        if initialized.ok, role == "app" {
            write = call(2, "index.items", ["items": [["uniqueIdentifier": "probe", "attributeSet": ["title": "probe item"]]]]).text
        }
        if initialized.ok, role == "app" || role == "desktop" {
            let found = role == "app"
                ? call(3, "query.search", ["query": #"uniqueIdentifier == "*""#])
                : call(3, "query.user", ["text": "probe", "context": [:]])
            read = found.ok ? "ok:\(found.answer?["items"]?.arrayValue?.count ?? 0)" : found.text
        }
        print("init=\(initialized.text) write=\(write) read=\(read) message=\(message)")
        exit(0)
    }

    static func initialize(_ socket: UnixSocket, bundle: String) -> Bool {
        let initialize = #"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"role":"app","bundleIdentifier":"\#(bundle)","capabilities":{}}}"# + "\n"
        guard (try? socket.writeAll(Array(initialize.utf8))) != nil else { return false }
        return readLine(socket)?["result"] != nil
    }

    static func userQuery(id: Int, bundle: String, text: String) -> [UInt8] {
        let params: JSONValue = ["bundle": .string(bundle), "text": .string(text), "context": ["semanticWeight": 0.5]]
        let message: JSONValue = ["jsonrpc": "2.0", "id": .number(Double(id)), "method": "query.user", "params": params]
        var out: [UInt8] = []
        message.write(to: &out)
        out.append(0x0A)
        return out
    }

    static func flood(socket path: String, count: Int, bundle: String) {
        // 20,000 CJK ideographs (60 KB of UTF-8), no whitespace: one word per character.
        let scalars = (0..<20_000).map { Character(Unicode.Scalar(0x4E00 + UInt32(($0 * 7919) % 20_000))!) }
        let text = String(scalars)
        guard let first = try? UnixSocket.connect(path: path), initialize(first, bundle: bundle) else {
            print("flooding=0 error=connect")
            exit(1)
        }
        try? first.writeAll(Array((#"{"jsonrpc":"2.0","id":2,"method":"query.prepare","params":{"bundle":"\#(bundle)"}}"# + "\n").utf8))
        let prepared = readLine(first)
        guard prepared?["result"]?["semantic"]?["state"]?.stringValue == "loaded" else {
            print("flooding=0 error=prepare \(String(describing: prepared))")
            exit(1)
        }
        let request = userQuery(id: 3, bundle: bundle, text: text)
        let tally = Mutex<(answered: Int, cancelled: Int, other: Int)>((0, 0, 0))
        let sent = DispatchGroup()
        var sockets: [UnixSocket] = []
        for _ in 0..<count {
            guard let s = try? UnixSocket.connect(path: path), initialize(s, bundle: bundle) else { continue }
            sockets.append(s)
            sent.enter()
            let t = Thread {
                // Two in flight: send one ahead, then one more for every answer read.
                guard (try? s.writeAll(request)) != nil, (try? s.writeAll(request)) != nil else {
                    sent.leave()
                    return
                }
                sent.leave()
                while let answer = readLine(s) {
                    tally.withLock { t in
                        if answer["result"] != nil {
                            t.answered += 1
                        } else if answer["error"]?["code"]?.intValue == -2003 {
                            t.cancelled += 1
                        } else {
                            t.other += 1
                        }
                    }
                    guard (try? s.writeAll(request)) != nil else { return }
                }
            }
            t.start()
        }
        sent.wait()
        FileHandle.standardOutput.write(Data("flooding=\(sockets.count)\n".utf8))
        _ = FileHandle.standardInput.readDataToEndOfFile()
        let t = tally.withLock { $0 }
        FileHandle.standardOutput.write(Data("answered=\(t.answered) cancelled=\(t.cancelled) other=\(t.other)\n".utf8))
        exit(0)
    }

    static func ask(socket path: String, count: Int, bundle: String) {
        guard let s = try? UnixSocket.connect(path: path), initialize(s, bundle: bundle) else {
            print("answered=0 cancelled=0 failed=\(count) error=connect")
            exit(1)
        }
        s.setReceiveTimeout(seconds: 30)
        var answered = 0, cancelled = 0, failed = 0
        var times: [Double] = []
        for k in 0..<count {
            let started = Date()
            guard (try? s.writeAll(userQuery(id: 10 + k, bundle: bundle, text: "chess"))) != nil, let answer = readLine(s) else {
                failed += 1
                break  // a timed-out read leaves the connection out of step
            }
            times.append(Date().timeIntervalSince(started) * 1000)
            if answer["result"]?["items"] != nil {
                answered += 1
            } else if answer["error"]?["code"]?.intValue == -2003 {
                cancelled += 1
            } else {
                failed += 1
            }
        }
        times.sort()
        func quantile(_ q: Double) -> Int { times.isEmpty ? -1 : Int(times[min(times.count - 1, Int(Double(times.count) * q))].rounded()) }
        print("answered=\(answered) cancelled=\(cancelled) failed=\(failed) p50_ms=\(quantile(0.5)) p99_ms=\(quantile(0.99)) max_ms=\(quantile(1))")
    }

    static func bundles(socket: String, count: Int, prefix: String) async {
        let failures = await withTaskGroup(of: [String].self) { group in
            for worker in 0..<4 {
                group.addTask {
                    var errors: [String] = []
                    for k in stride(from: worker, to: count, by: 4) {
                        let index = SearchableIndex(bundleIdentifier: "\(prefix).\(k)", socketPath: socket)
                        var attributes = AttributeSet(contentType: "public.plain-text")
                        attributes.title = "bundle \(k) of \(prefix)"
                        let item = SearchableItem(uniqueIdentifier: "item-\(k)", attributeSet: attributes)
                        do {
                            try await index.indexSearchableItems([item])
                        } catch {
                            errors.append("\(error)")
                        }
                        await index.close()
                    }
                    return errors
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        let firstError = failures.first.map { "\"\($0.replacingOccurrences(of: "\"", with: "'"))\"" } ?? "none"
        print("created=\(count - failures.count) failed=\(failures.count) first_error=\(firstError)")
    }
}
