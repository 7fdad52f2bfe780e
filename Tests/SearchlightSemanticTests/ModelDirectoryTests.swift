import Testing
import TestThreads
@testable import SearchlightSemantic

@Suite("Model directory", .onOwnThreads)
struct ModelDirectoryTests {
    @Test("the model folder follows DESIGN §11: flag, then XDG_DATA_HOME or HOME in user mode, /usr/share in system mode")
    func resolve() {
        #expect(ModelDirectory.resolve(explicit: "/m", systemMode: true).path == "/m")
        #expect(ModelDirectory.resolve(systemMode: true, environment: ["XDG_DATA_HOME": "/x"]).path
            == "/usr/share/searchlight/models/all-MiniLM-L6-v2")
        #expect(ModelDirectory.resolve(systemMode: false, environment: ["XDG_DATA_HOME": "/x", "HOME": "/h"]).path
            == "/x/searchlight/models/all-MiniLM-L6-v2")
        #expect(ModelDirectory.resolve(systemMode: false, environment: ["XDG_DATA_HOME": "relative", "HOME": "/h"]).path
            == "/h/.local/share/searchlight/models/all-MiniLM-L6-v2")
    }

    @Test("a folder without the files says so and names the command that installs them")
    func missing() {
        let d = ModelDirectory(path: "/nonexistent/model")
        #expect(!d.hasTransformer)
        #expect(d.unavailableReason?.contains("make model") == true)
        #expect(throws: SemanticError.self) { try TransformerEncoder(directory: d) }
    }
}
