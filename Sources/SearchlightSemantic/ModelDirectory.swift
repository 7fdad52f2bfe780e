import Foundation

/// Where the model files are (DESIGN §11): `--model-dir PATH`, else
/// `$XDG_DATA_HOME/searchlight/models/all-MiniLM-L6-v2` in user mode or
/// `/usr/share/searchlight/models/all-MiniLM-L6-v2` in system mode.
public struct ModelDirectory: Sendable, Equatable {
    public static let modelName = "all-MiniLM-L6-v2"
    /// The command that installs the files, for messages that say what to do.
    public static let installCommand = "make model"

    public var path: String

    public init(path: String) { self.path = path }

    /// The folder for the mode, `explicit` (the flag) first.
    public static func resolve(explicit: String? = nil, systemMode: Bool,
                               environment: [String: String] = ProcessInfo.processInfo.environment) -> ModelDirectory {
        if let explicit, !explicit.isEmpty { return ModelDirectory(path: explicit) }
        if systemMode { return ModelDirectory(path: "/usr/share/searchlight/models/\(modelName)") }
        let data: String
        if let x = environment["XDG_DATA_HOME"], x.hasPrefix("/") {
            data = x
        } else {
            data = (environment["HOME"] ?? NSHomeDirectory()) + "/.local/share"
        }
        return ModelDirectory(path: "\(data)/searchlight/models/\(modelName)")
    }

    public var weightsFile: String { path + "/model.safetensors" }
    public var vocabularyFile: String { path + "/vocab.txt" }
    /// The static token table (`make model` installs the repository's copy, checksum verified).
    public var staticTableFile: String { path + "/static-table.bin" }

    /// Whether both files are there (their checksums are verified by `make model`, not here).
    public var hasTransformer: Bool {
        FileManager.default.isReadableFile(atPath: weightsFile) && FileManager.default.isReadableFile(atPath: vocabularyFile)
    }

    /// Why the transformer cannot be loaded from here, with the fix; nil when the files are there.
    public var unavailableReason: String? {
        if hasTransformer { return nil }
        return "the model files (model.safetensors, vocab.txt) are not in \(path); run `\(Self.installCommand)` in the source tree to fetch and verify them"
    }
}
