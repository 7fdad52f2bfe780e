import Foundation
import Testing
import TestThreads
@testable import SearchlightStore

/// `Statement.bind` gives SQLite a text without a NUL as NUL-terminated (so `sl_match` reads its
/// pattern without a copy) and a text holding a NUL with its length: the value is the same.
@Suite("Statement text bindings", .onOwnThreads)
struct StatementBindingTests {
    @Test("texts with and without NULs keep every byte, as parameters and as arguments of the query functions")
    func textsKeepTheirBytes() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bind-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let db = try Database(path: dir + "/t.sqlite")
        db.registerFunctions()
        for text in ["", "plain", "ab\u{0}cd", "\u{0}", "tail\u{0}", "é\u{0}ü 漢字", String(repeating: "x", count: 5_000) + "\u{0}y"] {
            let row = try db.rows("SELECT length(CAST(? AS BLOB)), hex(?), typeof(?)", [.text(text), .text(text), .text(text)]).first
            #expect(row?.int(0) == Int64(text.utf8.count), "\(text.debugDescription.prefix(40)): its bytes")
            #expect(row?.string(1) == text.utf8.map { String(format: "%02X", $0) }.joined(), "\(text.debugDescription.prefix(40))")
            #expect(row?.string(2) == "text")
        }
        // A pattern with a NUL matches only values holding it (the NUL is not an end).
        let match = try db.rows("SELECT sl_match(?, ?, ''), sl_match(?, ?, '')",
            [.text("ab\u{0}cd"), .text("ab\u{0}cd"), .text("ab"), .text("ab\u{0}cd")]).first
        #expect(match?.int(0) == 1 && match?.int(1) == 0, "\(String(describing: match))")
        db.close()
    }
}
