#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightSQLite
import TagsStore

/// `tags`: the photo-tagging app as a CLI (DESIGN §10). Each command that changes data starts
/// the store delegate first (so the change is recorded in the history), makes the change, and
/// waits until it is indexed. With no daemon to reach, the change is saved and indexed later:
/// by the next `tags` command or `tags watch`, or by `tags-extension` when searchlightd runs.
struct TagsCommand {
    static let usage = """
        usage: tags [--store PATH] [--socket PATH] COMMAND
          add PATH --name NAME     add a photo; prints its id
          tag ID TAG               put a tag on a photo
          untag ID TAG             take a tag off a photo
          rename-tag OLD NEW       rename a tag (its photos are indexed again)
          delete ID                delete a photo (not its file)
          list                     the photos and their tags
          search TEXT              search the index (keywords and names, as you type)
          watch                    keep the index up to date until SIGINT/SIGTERM, whoever writes the store
          delete-index             delete the index and the store's history triggers (the photos stay)
        The store defaults to $XDG_DATA_HOME/searchlight-tags/tags.sqlite.
        """

    static func run() async {
        var arguments = Array(CommandLine.arguments.dropFirst())
        let store = TagsModel.storeURL()
        let socket = take("--socket", from: &arguments)
        _ = take("--store", from: &arguments)
        let name = take("--name", from: &arguments)
        guard let command = arguments.first else { fail(usage, status: 2) }
        let operands = Array(arguments.dropFirst())
        do {
            let app = TagsCommand(store: store, socket: socket)
            switch (command, operands.count) {
            case ("add", 1):
                guard let name else { fail("tags add: --name NAME is required\n\(usage)", status: 2) }
                let path = URL(fileURLWithPath: operands[0]).standardizedFileURL.path
                guard FileManager.default.fileExists(atPath: path) else { fail("tags add: no file at \(path)", status: 1) }
                let id = try await app.change { try $0.addPhoto(path: path, name: name) }
                print(id)
            case ("tag", 2): try await app.change { try $0.tag(photo: try photoID(operands[0]), operands[1]) }
            case ("untag", 2): try await app.change { try $0.untag(photo: try photoID(operands[0]), operands[1]) }
            case ("rename-tag", 2): try await app.change { try $0.renameTag(operands[0], to: operands[1]) }
            case ("delete", 1): try await app.change { try $0.deletePhoto(try photoID(operands[0])) }
            case ("list", 0): try app.list()
            case ("search", 1...): try await app.search(operands.joined(separator: " "))
            case ("watch", 0): try await app.watch()
            case ("delete-index", 0): try await app.deleteIndex()
            case ("help", _), ("--help", _), ("-h", _): print(usage)
            default: fail("tags: cannot read \"\(([command] + operands).joined(separator: " "))\"\n\(usage)", status: 2)
            }
        } catch {
            fail("tags: \(error)", status: 1)
        }
    }

    let store: URL
    let socket: String?

    /// Starts the delegate, makes the change, waits until it is indexed.
    func change<T>(_ body: (PhotoLibrary) throws -> T) async throws -> T {
        let library = try PhotoLibrary(url: store)
        let delegate = try TagsDelegate(store: store, socketPath: socket)
        try await delegate.startSpotlightIndexing()
        let result: T
        do {
            result = try body(library)
        } catch {
            await delegate.stopSpotlightIndexing()
            throw error
        }
        if let unreachable = await daemonUnreachable() {
            await delegate.stopSpotlightIndexing()
            warn("tags: saved; not indexed yet (\(unreachable)). It will be: by the next tags command or tags watch, or by tags-extension when searchlightd runs")
            return result
        }
        do {
            try await delegate.waitUntilIndexed(timeout: .seconds(30))
        } catch {
            await delegate.stopSpotlightIndexing()
            throw error
        }
        await delegate.stopSpotlightIndexing()
        return result
    }

    func list() throws {
        for photo in try PhotoLibrary(url: store).photos() {
            let tags = photo.tags.isEmpty ? "" : "  [" + photo.tags.joined(separator: ", ") + "]"
            print("\(photo.id)  \(photo.name)  \(photo.path)\(tags)")
        }
    }

    /// The query of the WWDC21 session: keywords (and names) matching as the user types, case-
    /// and diacritic-insensitive, word by word (`cwd`).
    func search(_ text: String) async throws {
        let escaped = text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
        let query = "keywords == \"\(escaped)*\"cwd || displayName == \"\(escaped)*\"cwd"
        let index = SearchableIndex(bundleIdentifier: TagsModel.bundleIdentifier, socketPath: socket)
        defer { Task { await index.close() } }
        let context = SearchQueryContext(fetchAttributes: ["displayName", "keywords", "contentType"])
        for try await item in SearchQuery(queryString: query, queryContext: context, index: index).results {
            let keywords = item.attributeSet.keywords.map { "  [" + $0.joined(separator: ", ") + "]" } ?? ""
            print("\(item.uniqueIdentifier)  \(item.attributeSet.displayName ?? "")\(keywords)")
        }
    }

    /// Runs the delegate until SIGINT or SIGTERM: changes by any process reach the index.
    func watch() async throws {
        _ = try PhotoLibrary(url: store)
        let delegate = try TagsDelegate(store: store, socketPath: socket)
        try await delegate.startSpotlightIndexing()
        warn("tags: watching \(store.path); Ctrl-C stops")
        let updates = Task {
            for try await update in delegate.indexDidUpdate {
                // Unbuffered: a reader of the pipe sees each line as it happens.
                FileHandle.standardOutput.write(Data("indexed history through \(update.historyToken)\n".utf8))
            }
        }
        await Signals.wait(for: Signals.handled)
        updates.cancel()
        await delegate.stopSpotlightIndexing()
        if case .failure(let error) = await updates.result, !(error is CancellationError) { throw error }
    }

    func deleteIndex() async throws {
        _ = try PhotoLibrary(url: store)
        try await TagsDelegate(store: store, socketPath: socket).deleteSpotlightIndex()
    }

    /// Why the daemon cannot be reached, or nil when it can.
    func daemonUnreachable() async -> String? {
        let connection = SearchlightConnection(role: .app(bundleIdentifier: TagsModel.bundleIdentifier), socketPath: socket)
        defer { Task { await connection.close() } }
        do {
            try await connection.open()
            return nil
        } catch {
            return "cannot reach searchlightd at \(await connection.socketPath)"
        }
    }

    static func photoID(_ text: String) throws -> Int64 {
        guard let id = Int64(text), id > 0 else { throw PhotoLibrary.Failure("\"\(text)\" is not a photo id (a number; tags list shows them)") }
        return id
    }

    /// Removes `--option VALUE` from the arguments; the value.
    static func take(_ option: String, from arguments: inout [String]) -> String? {
        guard let i = arguments.firstIndex(of: option) else { return nil }
        guard i + 1 < arguments.count else { fail("tags: \(option) needs a value\n\(usage)", status: 2) }
        defer { arguments.removeSubrange(i...(i + 1)) }
        return arguments[i + 1]
    }

    static func fail(_ message: String, status: Int32) -> Never {
        warn(message)
        exit(status)
    }
}

func warn(_ message: String) { FileHandle.standardError.write(Data((message + "\n").utf8)) }

/// SIGINT and SIGTERM for `tags watch`: blocked in the main thread before any other thread
/// exists (threads inherit the mask), then taken with `sigwait` on a thread of their own.
enum Signals {
    static let handled = [SIGINT, SIGTERM]

    static func block() {
        var set = signalSet()
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    static func wait(for signals: [Int32]) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                var received: Int32 = 0
                var set = signalSet()
                sigwait(&set, &received)
                continuation.resume()
            }
        }
    }

    private static func signalSet() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for s in handled { sigaddset(&set, s) }
        return set
    }
}
