#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit

/// A client process for the integration tests that must run as another user (`setpriv`): the
/// daemon sees its real uid through SO_PEERCRED. Each mode prints one line of `key=value` results
/// on stdout:
/// - `hold SOCKET COUNT BUNDLE`: opens COUNT connections, each sending `initialize` as an app of
///   BUNDLE; prints `held=N refused=M codes=C,…` (the error codes of the refusals), then keeps the
///   held connections open, idle, until its stdin closes.
/// - `bundles SOCKET COUNT PREFIX`: donates one item to each of the bundles PREFIX.0 … PREFIX.(COUNT-1),
///   one connection each, four at a time; prints `created=N failed=M first_error=…`.
@main
struct TestClient {
    static func main() async {
        let args = Array(CommandLine.arguments.dropFirst())
        guard args.count == 4, let count = Int(args[2]) else {
            FileHandle.standardError.write(Data("usage: searchlight-test-client hold|bundles SOCKET COUNT NAME\n".utf8))
            exit(2)
        }
        switch args[0] {
        case "hold": hold(socket: args[1], count: count, bundle: args[3])
        case "bundles": await bundles(socket: args[1], count: count, prefix: args[3])
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
