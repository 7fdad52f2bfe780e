import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// The ranked index's dictionary against FTS5's vocabulary (the definition of suggestions) on an
/// index of many segments whose kept completion lists (`PrefixLists.topCompletions`) are full,
/// with ties at their ends: the case where completions are settled from the lists and bounds.
@Suite("Ranked suggestions", .onOwnThreads)
struct RankedSuggestionTests {
    /// 700 words beginning "lib" and 300 beginning "pa", drawn with Zipf-like frequencies, so
    /// that every 400-document segment has more than `PrefixLists.minTerms` "lib" words (a kept
    /// list of 64) and many words share a count at the lists' ends.
    static func words(_ random: inout SeededRandom, prefix: String, count: Int, draws: Int) -> [String] {
        (0..<draws).map { _ in
            let u = Double(random.next() % 1_000_000) / 1_000_000
            let j = min(count - 1, Int(pow(Double(count), u * u)))
            let a = Character(Unicode.Scalar(UInt8(97 + j / 26 % 26)))
            let b = Character(Unicode.Scalar(UInt8(97 + j % 26)))
            return "\(prefix)\(a)\(b)\(j / 676)"
        }
    }

    func compare(_ f: StoreFixture, _ phase: String, listsUsed: Bool) throws {
        try f.store.read { db in
            try db.transaction("DEFERRED") {
                for text in ["l", "li", "lib", "liba", "libb", "libc0", "p", "pa", "pab", "x"] {
                    let terms = try UserQueryTerms(text)
                    guard let ranked = try f.store.rankedVocabulary(db, terms: terms) else {
                        Issue.record("\(phase): no ranked vocabulary")
                        return
                    }
                    let definition = FullTextVocabulary(db: db, earlier: [])
                    for count in [1, 5, 40, 64] {
                        let fast = try ranked.completions(of: text, count: count)
                        let slow = try definition.completions(of: text, count: count)
                        #expect(fast == slow, "\(phase) \"\(text)\" \(count): \(fast) vs \(slow)")
                    }
                    for prefix in [true, false] {
                        #expect(try ranked.hasTerm(text, prefix: prefix) == definition.hasTerm(text, prefix: prefix),
                            "\(phase) hasTerm \"\(text)\" prefix \(prefix)")
                    }
                    if listsUsed, text == "lib" {
                        #expect(try ranked.completionsFromTopLists(Array("lib".utf8), Array("lib\u{10FFFF}".utf8), engaged: [:], count: 40) != nil,
                            "\(phase): the kept lists did not settle \"lib\"")
                    }
                    db.unionScratch.reclaim()
                }
            }
        }
    }

    @Test("completions settled from many segments' kept lists equal FTS5's vocabulary, through writes and engagement")
    func keptListsEqualTheDefinition() throws {
        let f = try StoreFixture(rankedBuilds: false)
        var options = StoreFixture.options(f.clock, maxItems: nil, rankedBuilds: false)
        options.rankedIndexSegmentDocs = 400
        f.store.close()
        f.store = try IndexStore(path: f.dir + "/b/_default.sqlite", options: options)
        var random = SeededRandom(state: 0x5067_9E57)
        func item(_ id: String, update: Bool = false) throws -> SearchableItem {
            let lib = Self.words(&random, prefix: "lib", count: 700, draws: 6)
            let pa = Self.words(&random, prefix: "pa", count: 300, draws: 2)
            return try f.item(id, ["title": .string(lib[0...1].joined(separator: " ")),
                "textContent": .string((lib[2...] + pa).joined(separator: " "))], update: update)
        }
        for start in stride(from: 0, to: 3_200, by: 400) {
            _ = try f.store.applySync([.items(try (start..<(start + 400)).map { try item("d\($0)") })])
        }
        try f.store.buildRankedIndex()
        let segments = try f.store.summary().rankedIndex?.segments ?? 0
        #expect(segments >= 8, "\(segments) segments")
        try compare(f, "built", listsUsed: true)

        // Rewritten documents (stale counts), new ones (the delta), deleted ones, chosen suggestions.
        _ = try f.store.applySync([.items(try stride(from: 3, to: 3_200, by: 23).map { try item("d\($0)", update: true) })])
        _ = try f.store.applySync([.items(try (0..<150).map { try item("n\($0)") })])
        _ = try f.store.applySync([.deleteIdentifiers(stride(from: 5, to: 3_200, by: 31).map { "d\($0)" })])
        for (word, weight) in [("libzz1", 40.0), ("libaa0", 2), ("libab0", 1), ("paqq0", 30)] {
            try f.store.recordEngagement(identifier: nil, suggestion: word, weight: weight)
        }
        try compare(f, "written", listsUsed: true)

        try f.store.buildRankedIndex()
        try compare(f, "rebuilt", listsUsed: true)
    }
}
