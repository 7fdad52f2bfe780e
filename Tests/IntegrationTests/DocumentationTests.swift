#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit

/// The Swift in the documentation compiles against the SDK as built (issue 14: the guide's main
/// example once called a method that does not exist). Every ```swift block of README.md and
/// Docs/*.md is type-checked with the toolchain's `swiftc -typecheck` against the modules of this
/// build, so an SDK change that breaks a documented example fails `make test`.
///
/// A block is checked as written. Three HTML comments, invisible on a rendered page, say more:
/// - `<!-- doc-test: skip (reason) -->` on the line before a block: not checked, with the reason.
/// - `<!-- doc-test: body(index: SearchableIndex, ids: [String]) -->` before a block: the block is
///   the body of an `async throws` function with those parameters (a fragment of a handler).
/// - `<!-- doc-test: context` then a ```swift block, then `-->`: declarations every block of that
///   document may use (the `Recipe` type of the extension guide, say).
/// A block with `@main` is compiled as a library file; a manifest (`// swift-tools-version`)
/// against PackageDescription; anything else as a `main.swift`, where top-level code may run.
@Suite("Documentation", .onOwnThreads, .serialized)
struct DocumentationTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path

    static var documents: [String] {
        let docs = (try? FileManager.default.contentsOfDirectory(atPath: repository + "/Docs")) ?? []
        return ["README.md"] + docs.filter { $0.hasSuffix(".md") }.sorted().map { "Docs/" + $0 }
    }

    @Test("every Swift block of the documentation compiles against the SDK", arguments: documents)
    func swiftBlocksCompile(document: String) async throws {
        let text = try String(contentsOfFile: Self.repository + "/" + document, encoding: .utf8)
        let parsed = try DocSnippet.parse(text, document: document)
        let toolchain = try Toolchain.locate()
        let failures = DocSnippet.concurrentMap(parsed.snippets) { snippet in
            snippet.skipReason == nil ? snippet.typecheck(context: parsed.context, toolchain: toolchain) : nil
        }.compactMap { $0 }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n\n"))")
        for snippet in parsed.snippets where snippet.skipReason != nil {
            print("documentation: \(document):\(snippet.line) not compiled: \(snippet.skipReason!)")
        }
    }

    @Test("the extension guide and the README have Swift blocks, so the check above is not vacuous")
    func guideHasBlocks() throws {
        for document in ["README.md", "Docs/ExtensionGuide.md", "Docs/SDK.md"] {
            let text = try String(contentsOfFile: Self.repository + "/" + document, encoding: .utf8)
            let snippets = try DocSnippet.parse(text, document: document).snippets
            #expect(snippets.contains { $0.skipReason == nil }, "\(document) has no compiled Swift block")
        }
    }

    @Test("a block that calls a method the SDK does not have fails the check")
    func brokenBlockFails() throws {
        let text = """
            ```swift
            import SearchlightKit
            let index = SearchableIndex(bundleIdentifier: "a.b")
            for chunk in [1, 2, 3].chunked(by: 2) { print(chunk, index.name) }
            ```
            """
        let parsed = try DocSnippet.parse(text, document: "inline")
        let failure = parsed.snippets[0].typecheck(context: parsed.context, toolchain: try Toolchain.locate())
        #expect(failure?.contains("chunked") == true, "\(failure ?? "no failure")")
    }

    @Test("Docs/SDK.md describes every public type and member of SearchlightKit")
    func sdkReferenceIsComplete() async throws {
        let toolchain = try Toolchain.locate()
        let reference = try String(contentsOfFile: Self.repository + "/Docs/SDK.md", encoding: .utf8)
        let symbols = try await toolchain.publicSymbols(module: "SearchlightKit")
        #expect(symbols.count > 20, "the symbol graph of SearchlightKit looks empty: \(symbols)")
        let missing = symbols.filter { !reference.contains($0) }
        #expect(missing.isEmpty, "Docs/SDK.md does not mention: \(missing.joined(separator: ", "))")
    }
}

/// One ```swift block of a document.
struct DocSnippet: Sendable {
    var document: String
    /// The line of the opening fence (1-based).
    var line: Int
    var code: String
    var skipReason: String?
    /// The parameter list when the block is a function body.
    var bodyParameters: String?

    struct Parsed {
        var snippets: [DocSnippet]
        var context: String
    }

    static func parse(_ text: String, document: String) throws -> Parsed {
        let lines = text.components(separatedBy: "\n")
        var snippets: [DocSnippet] = []
        var context = ""
        var annotation: String?
        var inContextComment = false
        var i = 0
        while i < lines.count {
            let trimmed = lines[i].trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("<!-- doc-test: context") {
                inContextComment = true
            } else if inContextComment, trimmed.hasPrefix("-->") {
                inContextComment = false
            } else if trimmed.hasPrefix("<!-- doc-test:") {
                annotation = String(trimmed.dropFirst("<!-- doc-test:".count).dropLast(trimmed.hasSuffix("-->") ? 3 : 0))
                    .trimmingCharacters(in: .whitespaces)
            } else if trimmed.hasPrefix("```swift") {
                let indent = lines[i].prefix { $0 == " " }.count
                let start = i
                var body: [String] = []
                i += 1
                while i < lines.count, !lines[i].trimmingCharacters(in: .whitespaces).hasPrefix("```") {
                    body.append(String(lines[i].dropFirst(min(indent, lines[i].prefix { $0 == " " }.count))))
                    i += 1
                }
                guard i < lines.count else { throw HarnessError("\(document):\(start + 1): unterminated ```swift block") }
                let code = body.joined(separator: "\n")
                if inContextComment {
                    context += code + "\n"
                } else {
                    var snippet = DocSnippet(document: document, line: start + 1, code: code)
                    if let annotation {
                        if annotation.hasPrefix("skip") {
                            snippet.skipReason = String(annotation.dropFirst(4)).trimmingCharacters(in: .whitespaces)
                            if snippet.skipReason!.isEmpty { throw HarnessError("\(document):\(start): doc-test: skip needs a reason") }
                        } else if annotation.hasPrefix("body(") && annotation.hasSuffix(")") {
                            snippet.bodyParameters = String(annotation.dropFirst(5).dropLast())
                        } else {
                            throw HarnessError("\(document):\(start): unknown doc-test annotation \"\(annotation)\"")
                        }
                    }
                    snippets.append(snippet)
                }
                annotation = nil
            } else if !trimmed.isEmpty {
                annotation = nil
            }
            i += 1
        }
        return Parsed(snippets: snippets, context: context)
    }

    var isManifest: Bool { code.hasPrefix("// swift-tools-version") }

    /// Type-checks the block; nil when it compiles, else the compiler's complaint.
    func typecheck(context: String, toolchain: Toolchain) -> String? {
        let dir = TempDir("doc")
        var arguments = ["-typecheck"]
        var files: [(String, String)] = []
        if isManifest {
            arguments += ["-swift-version", "5", "-I", toolchain.manifestAPI, "-package-description-version", "6.0"]
            files.append(("Package.swift", code))
        } else {
            // The store delegate's module needs the system SQLite's module map (its `CSQLite`).
            // The SDK's modules need the C modules they import: SQLite's module map (`CSQLite`, the
            // store delegate's) and the signal handler's (`CSignalPipe`, SearchlightWire's).
            arguments += ["-swift-version", "6", "-I", toolchain.modules, "-I", DocumentationTests.repository + "/Sources/CSQLite",
                          "-I", DocumentationTests.repository + "/Sources/CSignalPipe/include"]
            let imports = code.components(separatedBy: "\n").filter { $0.hasPrefix("import ") }
            let rest = code.components(separatedBy: "\n").filter { !$0.hasPrefix("import ") }.joined(separator: "\n")
            let header = (["import Foundation", "import SearchlightKit", "import SearchlightSQLite"] + imports).joined(separator: "\n")
            if !context.isEmpty { files.append(("DocContext.swift", header + "\n" + context)) }
            if let parameters = bodyParameters {
                files.append(("Snippet.swift", header + "\nfunc documentationSnippet(\(parameters)) async throws {\n\(rest)\n}\n"))
                arguments.append("-parse-as-library")
            } else if code.contains("@main") {
                files.append(("Snippet.swift", code))
                arguments.append("-parse-as-library")
            } else if !context.isEmpty || !code.contains("import ") {
                // A fragment without imports of its own gets the documentation's usual ones.
                files.append(("main.swift", header + "\n" + rest))
            } else {
                files.append(("main.swift", code))
            }
        }
        for (name, text) in files {
            _ = FileManager.default.createFile(atPath: dir.path + "/" + name, contents: Data(text.utf8))
        }
        let result: CLIResult
        do {
            result = try runCLI(arguments + files.map { dir.path + "/" + $0.0 }, socket: nil, executable: toolchain.swiftc)
        } catch {
            return "\(document):\(line): cannot run swiftc: \(error)"
        }
        guard result.status != 0 else { return nil }
        return "\(document):\(line): this Swift block does not compile:\n\(code)\n--- swiftc:\n\(result.stderr)"
    }

    /// `transform` over `items` on two threads (each call runs a compiler): the calling one and a
    /// thread of its own, never Dispatch's pool (`concurrentPerform` held a thread of Swift's
    /// cooperative pool for the whole compile, starving the in-process suites).
    static func concurrentMap<T: Sendable, R: Sendable>(_ items: [T], _ transform: @escaping @Sendable (T) -> R) -> [R] {
        let results = ResultSlots<R>(count: items.count)
        let work: @Sendable (Int) -> Void = { worker in
            for i in stride(from: worker, to: items.count, by: 2) { results.set(i, transform(items[i])) }
        }
        let second = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            work(1)
            second.signal()
        }
        work(0)
        second.wait()
        return results.values
    }
}

private final class ResultSlots<R: Sendable>: @unchecked Sendable {
    private var slots: [R?]
    private let lock = NSLock()
    init(count: Int) { slots = Array(repeating: nil, count: count) }
    func set(_ i: Int, _ value: R) { lock.withLock { slots[i] = value } }
    var values: [R] { lock.withLock { slots.map { $0! } } }
}

/// The toolchain that runs the tests, and the modules of this build.
struct Toolchain: Sendable {
    var swiftc: String
    var manifestAPI: String
    var modules: String
    var symbolGraphExtract: String

    static func locate() throws -> Toolchain {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"
        let candidates = path.split(separator: ":").map { String($0) + "/swiftc" }
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw HarnessError("swiftc is not on PATH")
        }
        let real = URL(fileURLWithPath: found).resolvingSymlinksInPath().path
        let bin = (real as NSString).deletingLastPathComponent
        let usr = (bin as NSString).deletingLastPathComponent
        return Toolchain(swiftc: bin + "/swiftc", manifestAPI: usr + "/lib/swift/pm/ManifestAPI",
            modules: Products.directory + "/Modules", symbolGraphExtract: bin + "/swift-symbolgraph-extract")
    }

    /// The names a reader looks up in the reference: each public type (`SearchableIndex`) and each
    /// public member declared in the module's own sources, as its base name (`indexSearchableItems`).
    func publicSymbols(module: String) async throws -> [String] {
        let dir = TempDir("sym")
        let result = try await runCLI(["-module-name", module, "-I", modules, "-I", DocumentationTests.repository + "/Sources/CSignalPipe/include",
            "-I", DocumentationTests.repository + "/Sources/CSQLite", "-target", "x86_64-unknown-linux-gnu",
            "-output-dir", dir.path, "-minimum-access-level", "public"], socket: nil, executable: symbolGraphExtract)
        guard result.status == 0 else { throw HarnessError("swift-symbolgraph-extract failed: \(result.stderr)") }
        let data = try Data(contentsOf: URL(fileURLWithPath: dir.path + "/\(module).symbols.json"))
        guard let graph = try JSONSerialization.jsonObject(with: data) as? [String: Any],
              let symbols = graph["symbols"] as? [[String: Any]] else { throw HarnessError("unreadable symbol graph") }
        var names = Set<String>()
        for symbol in symbols {
            // Only what our sources declare: conformances add the standard library's members.
            guard let location = symbol["location"] as? [String: Any], let uri = location["uri"] as? String,
                  uri.contains("/Sources/\(module)/"),
                  let path = symbol["pathComponents"] as? [String], let last = path.last else { continue }
            let base = String(last.prefix { $0 != "(" })
            if base == "init" || base.hasPrefix("==") || base.isEmpty { continue }
            names.insert(base)
        }
        return names.sorted()
    }
}

/// The protocol document's Python extension, run as a real extension of the real daemon: what a
/// plugin author in another language copies must work as written.
@Suite("Documentation: the Python extension of Protocol.md", .onOwnThreads)
struct PythonExtensionDocumentTests {
    /// The first ```python block of Docs/Protocol.md.
    static func pythonExtension() throws -> String {
        let text = try String(contentsOfFile: DocumentationTests.repository + "/Docs/Protocol.md", encoding: .utf8)
        guard let start = text.range(of: "```python\n"),
              let end = text.range(of: "\n```", range: start.upperBound..<text.endIndex) else {
            throw HarnessError("Docs/Protocol.md has no ```python block")
        }
        return String(text[start.upperBound..<end.lowerBound]) + "\n"
    }

    @Test("it fills its index, answers reindex-identifiers (a vanished line is deleted) and fails negatively when its file is gone",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")))
    func pythonExtensionWorks() async throws {
        let dir = TempDir("py")
        let script = dir.path + "/lines-extension.py", lines = dir.path + "/lines.txt", units = dir.path + "/units"
        try FileManager.default.createDirectory(atPath: units, withIntermediateDirectories: true)
        try Self.pythonExtension().write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
        try "natural bridges\nangels landing\n\ndelicate arch\n".write(toFile: lines, atomically: true, encoding: .utf8)
        let label = "org.example.lines"
        try """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0"><dict>
                <key>Label</key><string>\(label)</string>
                <key>BundleIdentifier</key><string>org.example.lines</string>
                <key>ProgramArguments</key><array><string>\(script)</string><string>\(lines)</string></array>
                <key>ThrottleInterval</key><integer>0</integer>
            </dict></plist>
            """.write(toFile: units + "/\(label).plist", atomically: true, encoding: .utf8)
        let daemon = try await DaemonProcess(arguments: ["--units-dir", units, "--backoff", "0.2"], dir: dir)
        try await daemon.waitForLog("reindex request acknowledged", timeout: 60)

        func titles() async throws -> [String] {
            let r = try await runCLI(["query", "org.example.lines", #"title == "*""#, "--fetch", "title", "--json"], socket: daemon.socket)
            #expect(r.status == 0, "\(r.stderr)")
            return r.stdout.split(separator: "\n").compactMap { try? JSONValue.parse(String($0)) }
                .compactMap { $0["attributeSet"]?["title"]?.stringValue }.sorted()
        }
        await #expect(try titles() == ["angels landing", "delicate arch", "natural bridges"])

        try "natural bridges\ncanyonlands\n".write(toFile: lines, atomically: true, encoding: .utf8)
        let some = try await runCLI(["reindex", label, "--identifiers", "line-2", "line-4"], socket: daemon.socket)
        #expect(some.status == 0, "\(some.stdout) \(some.stderr)")
        await #expect(try titles() == ["canyonlands", "natural bridges"])

        try FileManager.default.removeItem(atPath: lines)
        let all = try await runCLI(["reindex", label, "--all", "--timeout", "30"], socket: daemon.socket)
        #expect(all.status == 1, "\(all.stdout) \(all.stderr)")
        #expect(all.stderr.contains("reindex failed") && all.stderr.contains("No such file"), "\(all.stderr)")
    }
}
