import Foundation
import SearchlightSemantic
import SearchlightStore
import SearchlightWire

/// `--name value` options, looked up by name.
struct ToolOptions {
    var values: [String: String] = [:]

    init(_ arguments: [String]) {
        var i = 0
        while i < arguments.count {
            let a = arguments[i]
            guard a.hasPrefix("--") else { fail("unexpected argument \(a)") }
            if i + 1 < arguments.count, !arguments[i + 1].hasPrefix("--") {
                values[String(a.dropFirst(2))] = arguments[i + 1]
                i += 2
            } else {
                values[String(a.dropFirst(2))] = ""
                i += 1
            }
        }
    }

    subscript(_ name: String) -> String? { values[name] }

    func int(_ name: String, _ fallback: Int) -> Int {
        guard let v = values[name] else { return fallback }
        guard let n = parseCount(v) else { fail("--\(name) takes a count like 500, 64k or 1m, not \(v)") }
        return n
    }

    func counts(_ name: String, _ fallback: [Int]) -> [Int] {
        guard let v = values[name] else { return fallback }
        return v.split(separator: ",").map { part -> Int in
            guard let n = parseCount(String(part)) else { fail("--\(name): bad count \(part)") }
            return n
        }
    }

    var modelDirectory: ModelDirectory {
        if let d = values["model-dir"] { return ModelDirectory(path: d) }
        if let d = ProcessInfo.processInfo.environment["SEARCHLIGHT_MODEL_DIR"], !d.isEmpty { return ModelDirectory(path: d) }
        return ModelDirectory.resolve(systemMode: false)
    }

    var corpusPath: String { values["corpus"] ?? "../shared/corpus/debian-packages.jsonl.gz" }
    /// The committed table (the tools run from the repository root), or `--table`.
    var staticTablePath: String { values["table"] ?? "Models/all-MiniLM-L6-v2-static.bin" }
}

func parseCount(_ s: String) -> Int? {
    let lower = s.lowercased()
    if lower.hasSuffix("k"), let n = Int(lower.dropLast()) { return n * 1000 }
    if lower.hasSuffix("m"), let n = Int(lower.dropLast()) { return n * 1_000_000 }
    return Int(lower)
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("searchlight-semantic: \(message)\n".utf8))
    exit(2)
}

func progress(_ message: String) {
    FileHandle.standardError.write(Data("\(message)\n".utf8))
}

/// One corpus document (the shared corpus's JSON lines).
struct Document {
    var id: String
    var title: String
    var synopsis: String
    var description: String
    var keywords: [String]

    /// What gets embedded: Scripts/semantic/documents.py's document_text.
    var text: String { "\(title). \(synopsis). \(description)" }

    /// Which keywords an item donated from the document carries.
    enum Keywords {
        /// None (the tuning and refinement stores).
        case none
        /// All but the debtags tags (`a::b`): the relevance set's answers stay out of the text.
        case withoutTags
        /// All of them (the donation speed runs).
        case all
    }

    /// The document as a donated item: title, synopsis as contentDescription, description as
    /// textContent.
    func item(keywords: Keywords) -> SearchableItem {
        var a = AttributeSet(contentType: "org.debian.deb-archive")
        a.title = title
        a.contentDescription = synopsis
        a.textContent = description
        switch keywords {
        case .none: break
        case .withoutTags: a.keywords = self.keywords.filter { !$0.contains("::") }
        case .all: a.keywords = self.keywords
        }
        return SearchableItem(uniqueIdentifier: id, attributeSet: a)
    }
}

/// Donates `docs` to `store`, 2 000 items per call.
func donate(_ docs: [Document], to store: IndexStore, keywords: Document.Keywords) throws {
    var start = 0
    while start < docs.count {
        _ = try store.applySync([.items(docs[start..<min(docs.count, start + 2000)].map { $0.item(keywords: keywords) })])
        start += 2000
    }
}

func loadCorpus(_ path: String) throws -> [Document] {
    // A corpus that is not gzipped is read as it is (under valgrind, which cannot run the child).
    if !path.hasSuffix(".gz") {
        guard let data = FileManager.default.contents(atPath: path) else { fail("cannot read the corpus \(path)") }
        return documents(data)
    }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/bin/sh")
    p.arguments = ["-c", "gzip -dc \"$0\"", path]
    let pipe = Pipe()
    p.standardOutput = pipe
    try p.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    guard p.terminationStatus == 0 else { fail("cannot read the corpus \(path)") }
    return documents(data)
}

/// The documents of the corpus's JSON lines.
private func documents(_ data: Data) -> [Document] {
    var docs: [Document] = []
    for line in data.split(separator: 0x0A) {
        guard let o = try? JSONValue.parse(Array(line)), let id = o["id"]?.stringValue else { continue }
        docs.append(Document(id: id, title: o["title"]?.stringValue ?? "", synopsis: o["contentDescription"]?.stringValue ?? "",
                             description: o["textContent"]?.stringValue ?? "",
                             keywords: o["keywords"]?.arrayValue?.compactMap(\.stringValue) ?? []))
    }
    return docs
}

/// Seconds of wall-clock time of `body`.
func time(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

/// Seconds of CPU time of the whole process (every thread) spent in `body`: on a machine shared
/// with other work, the figure that wall-clock time hides.
func cpuTime(_ body: () throws -> Void) rethrows -> Double {
    func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
    let start = now()
    try body()
    return now() - start
}

func median(_ xs: [Double]) -> Double {
    let s = xs.sorted()
    return s.isEmpty ? 0 : s[s.count / 2]
}

func percentile(_ xs: [Double], _ p: Double) -> Double {
    let s = xs.sorted()
    return s.isEmpty ? 0 : s[min(s.count - 1, Int(Double(s.count) * p))]
}

func format(_ x: Double, _ digits: Int = 3) -> String { String(format: "%.\(digits)f", x) }

func writeFloats(_ values: [Float], to path: String) throws {
    try values.withUnsafeBytes { try Data($0).write(to: URL(fileURLWithPath: path)) }
}

func readFloats(_ path: String) throws -> [Float] {
    let data = try Data(contentsOf: URL(fileURLWithPath: path))
    return data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
}
