#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// Serves one `IndexExtension` over its connection to the supervisor: the socket inherited on fd 3
/// when the supervisor launched it, else the daemon socket (attached by label, for debugging).
final class ExtensionRuntime<Extension: IndexExtension>: Sendable {
    let implementation: Extension
    let label: String?
    let socketPath: String?
    let inheritedDescriptor: Int32?
    let usageProblem: String?
    /// Handlers running, by request id, so that a shutdown can cancel them.
    private let running = Mutex<[String: Task<Void, Never>]>([:])
    private let exitCode: AsyncStream<Int32>
    private let finish: AsyncStream<Int32>.Continuation

    convenience init(extension implementation: Extension, arguments: [String], environment: [String: String], defaultLabel: String) {
        self.init(extension: implementation, options: LaunchOptions(arguments: arguments, environment: environment, defaultLabel: defaultLabel))
    }

    init(extension implementation: Extension, options: LaunchOptions) {
        self.implementation = implementation
        label = options.context.label.isEmpty ? nil : options.context.label
        socketPath = options.socketPath
        inheritedDescriptor = options.inheritedDescriptor
        usageProblem = options.problem
        (exitCode, finish) = AsyncStream<Int32>.makeStream()
    }

    /// Connects, then serves requests until told to stop or disconnected; returns the exit status.
    func run() async -> Int32 {
        if let usageProblem {
            FileHandle.standardError.write(Data("searchlight extension: \(usageProblem)\n".utf8))
            return 2
        }
        let connection = SearchlightConnection(
            extensionLabel: label ?? "", socketPath: socketPath, inheritedDescriptor: inheritedDescriptor,
            onNotification: { [self] method, _ in self.notification(method) },
            onRequest: { [self] method, params, reply in self.request(method, params, reply) },
            onClose: { [finish] in finish.yield(0) })
        let bundle: String
        do {
            let info = try await connection.open()
            guard let b = info["bundleIdentifier"]?.stringValue else {
                throw SearchlightError(.remoteConnection, "searchlightd did not say which bundle this extension serves; upgrade searchlightd")
            }
            bundle = b
        } catch {
            FileHandle.standardError.write(Data("searchlight extension: cannot attach as \(label ?? "?"): \(error)\n".utf8))
            return 1
        }
        // Requests that arrived before the handshake's answer was read wait for it here.
        let early: [@Sendable () -> Void] = bundleAndConnection.withLock {
            $0 = (bundle, connection)
            defer { earlyRequests.removeAll() }
            return earlyRequests
        }
        for request in early { request() }
        if inheritedDescriptor == nil {
            FileHandle.standardError.write(Data("searchlight extension: attached to searchlightd as \(label ?? "") for \(bundle); waiting for requests\n".utf8))
        }
        var code: Int32 = 0
        for await c in exitCode {
            code = c
            break
        }
        // The connection's handlers hold this runtime: let go of it and close the socket, so that
        // nothing outlives the run (an extension embedded in a longer-lived process, or a test).
        bundleAndConnection.withLock { $0 = nil }
        await connection.close()
        return code
    }

    private let bundleAndConnection = Mutex<(String, SearchlightConnection)?>(nil)
    /// Guarded by `bundleAndConnection`'s lock (touched only inside it).
    nonisolated(unsafe) private var earlyRequests: [@Sendable () -> Void] = []

    private func notification(_ method: String) {
        switch method {
        case Method.extensionShutdown:
            let tasks = running.withLock { Array($0.values) }
            for task in tasks { task.cancel() }
            let finish = self.finish
            Task {
                for task in tasks { await task.value }
                finish.yield(0)
            }
        case Method.extensionDidThrottle:
            Task { await implementation.searchableIndexDidThrottle() }
        case Method.extensionDidFinishThrottle:
            Task { await implementation.searchableIndexDidFinishThrottle() }
        default:
            break
        }
    }

    private func request(_ method: String, _ params: JSONValue,
                         _ reply: @escaping @Sendable (Result<JSONValue, SearchlightError>) -> Void) {
        let ready: (String, SearchlightConnection)? = bundleAndConnection.withLock {
            if $0 == nil { earlyRequests.append { [self] in self.request(method, params, reply) } }
            return $0
        }
        guard let (bundle, connection) = ready else { return }
        let implementation = self.implementation
        let work: @Sendable () async throws -> JSONValue
        do {
            switch method {
            case Method.extensionReindexAll:
                let r = try ExtensionReindexAll.decode(params)
                let index = SearchableIndex(name: r.header.index, bundleIdentifier: bundle, connection: connection, requestID: r.header.requestId)
                work = {
                    try await implementation.reindexAllSearchableItems(in: index)
                    return ["requestId": .string(r.header.requestId)]
                }
            case Method.extensionReindexIdentifiers:
                let r = try ExtensionReindexIdentifiers.decode(params)
                let index = SearchableIndex(name: r.header.index, bundleIdentifier: bundle, connection: connection, requestID: r.header.requestId)
                work = {
                    try await implementation.reindexSearchableItems(withIdentifiers: r.identifiers, in: index)
                    return ["requestId": .string(r.header.requestId)]
                }
            case Method.extensionDataForItem:
                let r = try ExtensionDataForItem.decode(params)
                work = { try await IndexFetchData.Response(data: implementation.data(forItem: r.identifier, typeIdentifier: r.typeIdentifier)).result }
            case Method.extensionFileURLForItem:
                let r = try ExtensionFileURLForItem.decode(params)
                work = {
                    try await IndexFetchFileURL.Response(url: implementation.fileURL(forItem: r.identifier, typeIdentifier: r.typeIdentifier,
                        inPlace: r.inPlace)).result
                }
            default:
                reply(.failure(SearchlightError(.methodNotFound, "this extension does not serve \(method.prefix(64)); update the SDK")))
                return
            }
        } catch {
            reply(.failure(error))
            return
        }
        let key = UUID().uuidString
        // Registered under the lock so that a handler finishing at once cannot remove itself first.
        running.withLock { tasks in tasks[key] = Task { [self] in
            let result: Result<JSONValue, SearchlightError>
            do {
                result = .success(try await work())
            } catch let error as SearchlightError {
                result = .failure(error)
            } catch is CancellationError {
                result = .failure(SearchlightError(.cancelled, "the extension was asked to stop before it finished"))
            } catch {
                result = .failure(SearchlightError(.extensionFailed, "\(error)"))
            }
            reply(result)
            _ = self.running.withLock { $0.removeValue(forKey: key) }
        } }
    }
}

/// The SDK's part of an extension's command line and environment (DESIGN §5): `--label LABEL`,
/// `--socket PATH`, `--dump` and `--dump-index NAME` are the SDK's; everything else is the
/// extension's own (`ExtensionContext.arguments`).
struct LaunchOptions: Sendable {
    var context: ExtensionContext
    var socketPath: String?
    var inheritedDescriptor: Int32?
    /// `--dump`: print what a reindex-all of `dumpIndex` would donate, and exit.
    var dump = false
    var dumpIndex = ""
    /// Why the extension cannot run as asked (exit status 2).
    var problem: String?

    static let sdkOptionsWithValue: Set<String> = ["--label", "--socket", "--dump-index"]

    init(arguments: [String], environment: [String: String], defaultLabel: String) {
        var label = environment[ExtensionEnvironment.label].flatMap { $0.isEmpty ? nil : $0 }
        var own: [String] = []
        var rest = arguments.dropFirst()
        while let argument = rest.popFirst() {
            if argument == "--" {
                own.append(argument)
                own += rest
                break
            }
            switch argument {
            case "--label": label = rest.popFirst()
            case "--socket": socketPath = rest.popFirst()
            case "--dump": dump = true
            case "--dump-index": dumpIndex = rest.popFirst() ?? ""
            default: own.append(argument)  // the extension's own (from ProgramArguments)
            }
        }
        if label == nil, !defaultLabel.isEmpty { label = defaultLabel }
        var mode = ExtensionContext.LaunchMode.attached
        if dump {
            mode = .dump
        } else if let fdText = environment[ExtensionEnvironment.fd] {
            var info = stat()
            if let fd = Int32(fdText), fd >= 0, fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFSOCK {
                inheritedDescriptor = fd
                mode = .launched
            } else {
                problem = "\(ExtensionEnvironment.fd)=\(fdText) is not an inherited socket; unset it to attach to the daemon by label"
            }
        } else if label == nil {
            problem = "no label to attach under: pass --label LABEL (the unit's Label), set \(ExtensionEnvironment.label), or let searchlightd launch the extension (or pass --dump to print what it would index)"
        }
        context = ExtensionContext(label: label ?? "", bundleIdentifier: environment[ExtensionEnvironment.bundleIdentifier],
            arguments: own, environment: environment, mode: mode, executable: arguments.first ?? "")
    }
}
