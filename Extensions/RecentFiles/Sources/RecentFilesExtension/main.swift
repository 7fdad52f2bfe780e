#if canImport(Glibc)
import Glibc
#endif
import Foundation
import RecentFilesCore
import SearchlightKit

/// The recent-files sample (Extensions/RecentFiles, Docs/ExtensionGuide.md): the user's
/// recently-used.xbel as user activities of the apps that opened each file.
///
/// - launched by searchlightd (unit `org.searchlight.sample.recentfiles`): a reindex-all imports
///   the file once (the first start, `searchlight reindex … --all`, idle maintenance);
/// - `recentfiles-extension --sync`: one import, then exits (1 when the file is refused);
/// - `recentfiles-extension --watch`: imports, then again each time the file changes (inotify),
///   for the user's session (an autostart entry or a systemd user unit).
///
/// It runs as the user whose file it reads, and reads no other.
struct RecentFilesExtension: IndexExtension {
    static let label = "org.searchlight.sample.recentfiles"
    let importer: RecentFilesImporter

    init(context: ExtensionContext) throws {
        importer = RecentFilesImporter(environment: context.environment, fallbackBundle: context.bundleIdentifier ?? Self.label,
                                       socketPath: context.environment["SEARCHLIGHT_SOCKET"])
    }

    func reindexAllSearchableItems(in index: SearchableIndex) async throws {
        let outcome = try await importer.sync()
        FileHandle.standardError.write(Data("recent files imported saved=\(outcome.saved) deleted=\(outcome.deleted) unchanged=\(outcome.unchanged)\n".utf8))
    }

    func reindexSearchableItems(withIdentifiers ids: [String], in index: SearchableIndex) async throws {
        try await reindexAllSearchableItems(in: index)
    }
}

func log(_ line: String) { FileHandle.standardError.write(Data((line + "\n").utf8)) }

let arguments = CommandLine.arguments
if arguments.contains("--sync") || arguments.contains("--watch") {
    let environment = ProcessInfo.processInfo.environment
    let importer = RecentFilesImporter(environment: environment, fallbackBundle: RecentFilesExtension.label,
                                       socketPath: environment["SEARCHLIGHT_SOCKET"])
    func pass() async -> Bool {
        do {
            let o = try await importer.sync()
            log("recent files imported saved=\(o.saved) deleted=\(o.deleted) unchanged=\(o.unchanged)")
            return true
        } catch {
            log("recent files not imported: \(error)")
            return false
        }
    }
    guard arguments.contains("--watch") else { exit(await pass() ? 0 : 1) }
    let watcher: RecentFilesWatcher
    do { watcher = try RecentFilesWatcher(path: importer.xbelPath) } catch { log("\(error)"); exit(1) }
    _ = await pass()
    log("watching \(importer.xbelPath)")
    while true {
        // The wait blocks: on a thread of its own, never one of the cooperative pool's.
        let changed: Bool = await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: (try? watcher.next()) != nil) }
        }
        guard changed else { log("watching stopped"); exit(1) }
        _ = await pass()
    }
} else {
    await RecentFilesExtension.main()
}
