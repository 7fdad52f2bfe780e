import Foundation
import SearchlightKit

/// Indexes the installed Debian packages for the bundle `org.searchlight.sample.packages`, from
/// dpkg's status file: one item per package, searchable by name, synopsis, long description,
/// section, debtags and priority.
///
/// Built for size: the file is parsed as a byte stream and donated while it is parsed, so a
/// million packages take seconds and constant memory.
struct PackagesIndexer: IndexExtension {
    static let chunkSize = 1000

    let statusPath: String
    /// Packages of this architecture keep their bare name as identifier (see `InstalledPackage.identifier`).
    let nativeArchitecture: String

    init() {
        let arguments = ExtensionArguments(CommandLine.arguments, valueOptions: ["--native-arch"])
        statusPath = arguments.path ?? "/var/lib/dpkg/status"
        nativeArchitecture = arguments.values["--native-arch"] ?? Self.buildArchitecture
    }

    func reindexAllSearchableItems(in index: SearchableIndex) async throws {
        // The total first, by a quick scan, so that progress means something from the start.
        let total = try StatusFileReader.countInstalled(path: statusPath)
        await index.reportProgress(completed: 0, total: total)
        try await index.deleteAllSearchableItems()
        var pipeline = DonationPipeline(index: index)
        do {
            try await forEachChunk { chunk in
                if try await pipeline.donate(chunk) {
                    await index.reportProgress(completed: pipeline.donated, total: max(total, pipeline.donated))
                }
            }
            try await pipeline.finish()
        } catch {
            pipeline.cancel()
            throw error
        }
        await index.reportProgress(completed: pipeline.donated, total: max(total, pipeline.donated))
    }

    func reindexSearchableItems(withIdentifiers identifiers: [String], in index: SearchableIndex) async throws {
        var missing = Set(identifiers)
        var pipeline = DonationPipeline(index: index)
        do {
            try await forEachChunk(where: { missing.contains($0) }) { chunk in
                for item in chunk { missing.remove(item.uniqueIdentifier) }
                try await pipeline.donate(chunk)
            }
            try await pipeline.finish()
        } catch {
            pipeline.cancel()
            throw error
        }
        if !missing.isEmpty { try await index.deleteSearchableItems(withIdentifiers: Array(missing)) }
    }

    /// Parses the status file and hands over its installed packages as items, `chunkSize` at a
    /// time, keeping those whose identifier passes `filter`. Runs on the caller's actor, so
    /// `body` may mutate the caller's state.
    func forEachChunk(isolation: isolated (any Actor)? = #isolation, where filter: (String) -> Bool = { _ in true },
                      _ body: ([SearchableItem]) async throws -> Void) async throws {
        let reader = try StatusFileReader(path: statusPath)
        var refused = RefusedPackages()
        var chunk: [SearchableItem] = []
        chunk.reserveCapacity(Self.chunkSize)
        while let paragraph = try reader.nextParagraph() {
            guard let package = InstalledPackage(ControlParagraph(paragraph)) else { continue }
            let identifier = package.identifier(nativeArchitecture: nativeArchitecture)
            guard filter(identifier) else { continue }
            let item = package.searchableItem(nativeArchitecture: nativeArchitecture)
            guard refused.accepts(item, from: paragraph) else { continue }
            chunk.append(item)
            if chunk.count == Self.chunkSize {
                try Task.checkCancellation()
                try await body(chunk)
                chunk.removeAll(keepingCapacity: true)
            }
        }
        if !chunk.isEmpty { try await body(chunk) }
        refused.report(path: statusPath)
    }

    /// dpkg's name for the architecture this extension was built for: dpkg's native
    /// architecture is the one it was built for, too. `--native-arch` overrides it.
    static var buildArchitecture: String {
        #if arch(x86_64)
        "amd64"
        #elseif arch(arm64)
        "arm64"
        #elseif arch(i386)
        "i386"
        #elseif arch(arm)
        "armhf"
        #elseif arch(powerpc64le)
        "ppc64el"
        #elseif arch(s390x)
        "s390x"
        #elseif arch(riscv64)
        "riscv64"
        #else
        "unknown"
        #endif
    }
}
