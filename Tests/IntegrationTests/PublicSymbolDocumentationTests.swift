import Foundation
import Testing
import TestThreads

/// Every public type of the SDK is named in its reference (issue 38: `waitUntilIndexed(timeout:)`'s
/// argument, `UserQuery`'s result types and others were used by apps and found nowhere in the
/// docs). The declarations are read from the sources: a `public`/`open` struct, class, enum,
/// protocol or actor, nested ones by their qualified name (`UserQuery.Item`, which the doc must
/// spell so, or as its last two components, `Results.Iterator`).
@Suite("Public symbols in the docs", .onOwnThreads)
struct PublicSymbolDocumentationTests {
    static let repository = DocumentationTests.repository

    /// The public types declared in the Swift files of `folder`, qualified by the types and
    /// extensions they are declared in (by indentation, the house style).
    static func publicTypes(inFolder folder: String) throws -> [(name: String, file: String)] {
        let declaration = /^(\s*)((?:@\w+\s+)*(?:(?:public|open|internal|package|private|fileprivate|final|indirect)\s+)*)(struct|class|enum|protocol|actor|extension)\s+([A-Za-z_][A-Za-z0-9_.]*)/
        var found: [(name: String, file: String)] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: folder).sorted() where file.hasSuffix(".swift") {
            var enclosing: [(indent: Int, name: String)] = []
            let text = try String(contentsOfFile: folder + "/" + file, encoding: .utf8)
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                guard let m = try declaration.prefixMatch(in: line) else { continue }
                let indent = m.output.1.count
                while let last = enclosing.last, last.indent >= indent { enclosing.removeLast() }
                let name = enclosing.last.map { $0.name + "." + m.output.4 } ?? String(m.output.4)
                let modifiers = m.output.2.split(whereSeparator: \.isWhitespace)
                if m.output.3 != "extension", modifiers.contains("public") || modifiers.contains("open") {
                    found.append((name, file))
                }
                enclosing.append((indent, name))
            }
        }
        return found
    }

    /// Whether `doc` names `qualified` as a whole word (not inside a longer name).
    static func names(_ doc: String, _ qualified: String) -> Bool {
        let parts = qualified.split(separator: ".")
        let spellings = parts.count > 2 ? [qualified, parts.suffix(2).joined(separator: ".")] : [qualified]
        return spellings.contains { spelling in
            var searchRange = doc.startIndex..<doc.endIndex
            while let r = doc.range(of: spelling, range: searchRange) {
                let before = r.lowerBound > doc.startIndex ? doc[doc.index(before: r.lowerBound)] : " "
                let after = r.upperBound < doc.endIndex ? doc[r.upperBound] : " "
                let isName: (Character) -> Bool = { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "." }
                if !isName(before), !(after.isLetter || after.isNumber || after == "_") { return true }
                searchRange = r.upperBound..<doc.endIndex
            }
            return false
        }
    }

    @Test("every public type of a library is named in its reference", arguments: [
        ("Sources/SearchlightKit", "Docs/SDK.md"),
        ("Sources/SearchlightSQLite", "Docs/StoreDelegate.md"),
    ])
    func publicTypesDocumented(sources: String, document: String) throws {
        let types = try Self.publicTypes(inFolder: Self.repository + "/" + sources)
        #expect(types.count >= 10, "the scan found only \(types.map(\.name)) in \(sources)")
        let doc = try String(contentsOfFile: Self.repository + "/" + document, encoding: .utf8)
        let missing = types.filter { !Self.names(doc, $0.name) }
        #expect(missing.isEmpty, "\(document) does not name: \(missing.map { "\($0.name) (\(sources)/\($0.file))" }.joined(separator: ", "))")
    }

    @Test("the scan finds nested public types and a doc that leaves one out fails")
    func scanCanFail() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("symbols-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try """
            public struct Outer: Sendable {
                public enum Inner { case a }
                struct Hidden {}
            }
            extension Outer {
                public struct Added {
                    public struct Deep {}
                }
            }
            final class NotPublic {}
            open class Base {}
            """.write(toFile: folder + "/A.swift", atomically: true, encoding: .utf8)
        let names = try Self.publicTypes(inFolder: folder).map(\.name)
        #expect(names == ["Outer", "Outer.Inner", "Outer.Added", "Outer.Added.Deep", "Base"])
        #expect(Self.names("`Outer.Inner` and `Added.Deep`", "Outer.Inner"))
        #expect(Self.names("`Outer.Added.Deep`", "Outer.Added.Deep"))
        #expect(Self.names("`Added.Deep`", "Outer.Added.Deep"))
        #expect(!Self.names("`Inner` alone", "Outer.Inner"))
        #expect(!Self.names("`BaseClass`, `MyOuter.Inner`", "Base"))
        #expect(!Self.names("`MyOuter.Inner`", "Outer.Inner"))
    }
}
