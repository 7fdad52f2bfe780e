import Foundation
import SearchlightKit

/// Indexes the installed Debian packages for the bundle `org.searchlight.sample.packages`, from
/// dpkg's status file: one item per package, searchable by name, synopsis, long description,
/// section, debtags and priority.
///
/// Built for size: the file is parsed as a byte stream while the SDK donates it, so a million
/// packages take seconds and constant memory.
@main
struct PackagesIndexer: IndexExtension {
    let statusPath: String
    /// Packages of this architecture keep their bare name as identifier (see `InstalledPackage.identifier`).
    let nativeArchitecture: String

    /// `packages-extension [STATUS-FILE] [--native-arch ARCH]` (default `/var/lib/dpkg/status`);
    /// `--dump` prints the items.
    init(context: ExtensionContext) {
        var arguments = ArgumentExtractor(context.arguments)
        nativeArchitecture = arguments.extractOption(named: "native-arch").last ?? Self.buildArchitecture
        statusPath = arguments.positionalArguments.first ?? "/var/lib/dpkg/status"
    }

    func reindexAllSearchableItems(in index: SearchableIndex) async throws {
        // The total first, by a quick scan, so that progress means something from the start.
        await index.reportProgress(completed: 0, total: try StatusFileReader.countInstalled(path: statusPath))
        try await index.deleteAllSearchableItems()
        try await donate(to: index)
    }

    func reindexSearchableItems(withIdentifiers identifiers: [String], in index: SearchableIndex) async throws {
        let wanted = Set(identifiers)
        let donated = try await donate(to: index, where: { wanted.contains($0) })
        let missing = wanted.subtracting(donated)
        if !missing.isEmpty { try await index.deleteSearchableItems(withIdentifiers: Array(missing)) }
    }

    /// Donates the installed packages whose identifier passes `filter`, parsed as the SDK sends
    /// them (a million packages take seconds and constant memory); returns their identifiers
    /// when a filter is given.
    @discardableResult
    private func donate(to index: SearchableIndex, where filter: (@Sendable (String) -> Bool)? = nil) async throws -> Set<String> {
        let packages = try InstalledPackageItems(path: statusPath, nativeArchitecture: nativeArchitecture, filter: filter)
        try await index.indexSearchableItems(packages)
        if let error = packages.error { throw error }
        packages.refused.report(path: statusPath)
        return packages.donated
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

/// The installed packages of a status file as items, each parsed when the SDK asks for the next
/// one. A read error ends the sequence and is kept in `error`.
final class InstalledPackageItems: Sequence, IteratorProtocol {
    private let reader: StatusFileReader
    private let nativeArchitecture: String
    private let filter: ((String) -> Bool)?
    private(set) var refused = RefusedPackages()
    private(set) var error: StatusFileError?
    /// The identifiers handed out, when a filter chose them.
    private(set) var donated: Set<String> = []

    init(path: String, nativeArchitecture: String, filter: ((String) -> Bool)?) throws {
        reader = try StatusFileReader(path: path)
        self.nativeArchitecture = nativeArchitecture
        self.filter = filter
    }

    func next() -> SearchableItem? {
        do {
            while let paragraph = try reader.nextParagraph() {
                guard let package = InstalledPackage(ControlParagraph(paragraph)) else { continue }
                if let filter, !filter(package.identifier(nativeArchitecture: nativeArchitecture)) { continue }
                let item = package.searchableItem(nativeArchitecture: nativeArchitecture)
                guard refused.accepts(item, from: paragraph) else { continue }
                if filter != nil { donated.insert(item.uniqueIdentifier) }
                return item
            }
        } catch {
            self.error = error
        }
        return nil
    }
}
