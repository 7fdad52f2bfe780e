import Foundation
import SearchlightKit

/// Starts the extension. `IndexExtension.main()` is the SDK's entry point, which serves the
/// supervisor; we call it ourselves only to offer `--dump` first, a way to check what would be
/// indexed without a daemon: `packages-extension --dump | head`.
@main
enum EntryPoint {
    static func main() async {
        guard ExtensionArguments(CommandLine.arguments).dump else { return await PackagesIndexer.main() }
        do {
            var writer = JSONLinesWriter()
            try await PackagesIndexer().forEachChunk { chunk in
                for item in chunk { writer.write(item) }
            }
            writer.flush()
        } catch {
            FileHandle.standardError.write(Data("packages-extension: \(error)\n".utf8))
            exit(1)
        }
    }
}
