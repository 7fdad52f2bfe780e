import Foundation
import SearchlightSemantic
import Testing

/// The model files for the tests that need them: `SEARCHLIGHT_MODEL_DIR` (set by `make test` after
/// its `make model` set-up), else the user-mode default. Those tests are disabled, with this
/// reason shown, only when the files cannot be found.
enum TestModel {
    static let directory: ModelDirectory = {
        if let d = ProcessInfo.processInfo.environment["SEARCHLIGHT_MODEL_DIR"], !d.isEmpty {
            return ModelDirectory(path: d)
        }
        return ModelDirectory.resolve(systemMode: false)
    }()

    static var available: Bool { directory.hasTransformer }
    static var skipReason: Comment {
        Comment(rawValue: "SKIPPED: \(directory.unavailableReason ?? "")")
    }

    /// A file of the repository (fixtures, the committed static table), found from this source file.
    static func repositoryFile(_ relative: String) -> String {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.appendingPathComponent(relative).path
    }

    static let tokenizer: WordPieceTokenizer? = try? WordPieceTokenizer(vocabularyFile: directory.vocabularyFile)

    /// JSON lines of a fixture file.
    static func jsonLines(_ relative: String) throws -> [[String: Any]] {
        let data = try Data(contentsOf: URL(fileURLWithPath: repositoryFile(relative)))
        return try data.split(separator: 0x0A).map {
            try JSONSerialization.jsonObject(with: Data($0)) as! [String: Any]
        }
    }
}
