import Foundation

/// An index extension (CSIndexExtensionRequestHandler): a separately built executable that
/// `searchlightd` launches when an app's index must be rebuilt, during migration, corruption
/// recovery or idle maintenance, and when a user asks (`searchlight reindex LABEL --all`).
///
/// Write a type, mark it `@main`, and the SDK owns `main()` and the process: it reads its own
/// options (`--label`, `--socket`, `--dump`) and hands the rest to `init(context:)`:
///
/// ```swift
/// import SearchlightKit
///
/// @main
/// struct JournalIndexer: IndexExtension {
///     func reindexAllSearchableItems(in index: SearchableIndex) async throws { … }
///     func reindexSearchableItems(withIdentifiers ids: [String], in index: SearchableIndex) async throws { … }
/// }
/// ```
///
/// Returning from a handler acknowledges the request; throwing acknowledges it negatively and the
/// supervisor retries it later. Donate through the `SearchableIndex` you are handed: it is the same
/// API apps use. When the supervisor asks the extension to stop, running handlers are cancelled.
/// Every extension also answers `--dump`: it prints what a reindex-all would donate, as JSON
/// lines in the shape `searchlight import` reads, without a daemon.
public protocol IndexExtension: Sendable {
    /// Made once per process, with the extension's own arguments and how it was started. The
    /// default calls `init()`: an extension that needs no context writes neither. A throw ends the
    /// process with its message (exit status 2: a usage problem).
    init(context: ExtensionContext) throws

    /// The initializer of an extension that needs no context; not called when `init(context:)`
    /// is implemented.
    init()

    /// Rebuilds every item of `index`: donate them all (deleting what no longer exists).
    func reindexAllSearchableItems(in index: SearchableIndex) async throws

    /// Rebuilds these items of `index`: donate the ones that exist, delete the ones that vanished.
    func reindexSearchableItems(withIdentifiers identifiers: [String], in index: SearchableIndex) async throws

    /// The item's data in the representation `typeIdentifier` (a UTI), for drag and drop.
    func data(forItem identifier: String, typeIdentifier: String) async throws -> Data

    /// A file holding the item in the representation `typeIdentifier`; `inPlace` asks for the
    /// original file rather than a copy.
    func fileURL(forItem identifier: String, typeIdentifier: String, inPlace: Bool) async throws -> URL

    /// The machine is busy: background work should slow down until `searchableIndexDidFinishThrottle`.
    func searchableIndexDidThrottle() async

    /// The machine is no longer busy.
    func searchableIndexDidFinishThrottle() async

    /// The unit label to attach under when started by hand (under a debugger) without
    /// `SEARCHLIGHT_EXTENSION_LABEL` or `--label`. Empty means "not set".
    static var label: String { get }
}

extension IndexExtension {
    public init(context: ExtensionContext) throws { self.init() }

    public init() {
        fatalError("\(Self.self) implements neither init(context:) nor init(): write one of them")
    }

    public func data(forItem identifier: String, typeIdentifier: String) async throws -> Data {
        throw SearchlightError(.indexingUnsupported, "this extension provides no data for items (\(typeIdentifier))")
    }

    public func fileURL(forItem identifier: String, typeIdentifier: String, inPlace: Bool) async throws -> URL {
        throw SearchlightError(.indexingUnsupported, "this extension provides no files for items (\(typeIdentifier))")
    }

    public func searchableIndexDidThrottle() async {}
    public func searchableIndexDidFinishThrottle() async {}

    public static var label: String { "" }

    /// The extension's entry point: connects to the supervisor and serves its requests until the
    /// supervisor asks it to stop or goes away (or, with `--dump`, prints what a reindex-all would
    /// donate). Exits the process.
    public static func main() async {
        let options = LaunchOptions(arguments: CommandLine.arguments, environment: ProcessInfo.processInfo.environment,
            defaultLabel: label)
        let name = (options.context.executable as NSString).lastPathComponent
        if let problem = options.problem {
            FileHandle.standardError.write(Data("\(name): \(problem)\n".utf8))
            exit(2)
        }
        let implementation: Self
        do {
            implementation = try Self(context: options.context)
        } catch {
            FileHandle.standardError.write(Data("\(name): \(error)\n".utf8))
            exit(2)
        }
        if options.dump {
            exit(await ItemDump.run(implementation, index: options.dumpIndex, name: name))
        }
        exit(await ExtensionRuntime(extension: implementation, options: options).run())
    }
}
