#if canImport(Glibc)
import Glibc
#endif
import Foundation
@testable import SearchlightStore
import SearchlightWire
import Testing
import TestThreads

/// The store's part of corruption recovery: telling a damaged file from a whole one, closing a
/// store for good before its file moves, and salvaging the readable rows of a damaged file.
@Suite("Store recovery", .onOwnThreads)
struct StoreRecoveryTests {
    static func filled(_ n: Int) throws -> StoreFixture {
        let f = try StoreFixture()
        let filler = String(repeating: "words to fill a page ", count: 15)
        let items = try (0..<n).map { try f.item("i\($0)", ["title": .string("item \($0)"), "textContent": .string(filler)]) }
        _ = try f.store.applySync([.items(items)])
        return f
    }

    @Test("the header check tells a whole file from a truncated or foreign one, and quick_check confirms damage")
    func fileDamage() throws {
        let f = try Self.filled(200)
        let path = f.dir + "/b/_default.sqlite"
        f.store.shutDown()
        #expect(IndexStore.fileDamage(at: path, deep: true) == nil)
        #expect(IndexStore.fileDamage(at: f.dir + "/missing.sqlite", deep: true) == nil)
        let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        #expect(truncate(path, off_t(size / 2)) == 0)
        #expect(IndexStore.fileDamage(at: path, deep: false)?.contains("truncated") == true)
        #expect(truncate(path, 10) == 0)
        #expect(IndexStore.fileDamage(at: path, deep: false)?.contains("truncated to 10 bytes") == true)
        let other = f.dir + "/other.sqlite"
        try Data(repeating: 0x41, count: 8192).write(to: URL(fileURLWithPath: other))
        #expect(IndexStore.fileDamage(at: other, deep: false)?.contains("not a database") == true)
    }

    @Test("a store shut down closes every connection and refuses later calls with indexUnavailable")
    func shutDown() throws {
        let f = try Self.filled(3)
        #expect(f.store.shutDown())
        #expect(throws: SearchlightError.self) { _ = try f.store.clientState() }
        #expect(throws: SearchlightError.self) { try f.donate(try f.item("late", ["title": "late"])) }
    }

    @Test("salvage copies every readable row of a file with a damaged page into a fresh index")
    func salvage() throws {
        let f = try Self.filled(300)
        let path = f.dir + "/b/_default.sqlite"
        f.store.shutDown()
        let raw = try Database(path: path)
        let leaves = try raw.rows("SELECT pageno FROM dbstat WHERE name = 'items' AND pagetype = 'leaf' ORDER BY pageno").compactMap { $0.int(0) }
        raw.close()
        #expect(leaves.count > 4)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.seek(toOffset: UInt64((Int(leaves[leaves.count / 2]) - 1) * 4096))
        try handle.write(contentsOf: Data(repeating: 0xA5, count: 4096))
        try handle.close()

        let fresh = try IndexStore(path: f.dir + "/fresh/_default.sqlite", options: StoreFixture.options(f.clock, maxItems: nil))
        defer { fresh.close() }
        let report = try fresh.salvage(from: path)
        #expect(report.copied > 250 && report.copied < 300, "\(report)")
        #expect(report.unreadableRows > 0)
        #expect(fresh.count == report.copied)
        #expect(try fresh.check(repair: false).ok, "the full-text index was rebuilt from the copied rows")
    }
}
