import Foundation

/// The words suggestions are made of (`IndexStore.suggestions`): FTS5's own vocabulary
/// (`FullTextVocabulary`, the definition) or the ranked index's dictionary
/// (`RankedVocabulary`, the same answers from precomputed counts instead of walking doclists).
protocol SuggestionVocabulary {
    /// The `count` best completions of `prefix`: words of the text columns (not `aux`) that begin
    /// with it, by weight (documents summed over the text columns, plus ten per time the word was
    /// chosen as a suggestion), then by the word; best first.
    func completions(of prefix: String, count: Int) throws -> [String]
    /// Whether some row of the full-text index holds the earlier words and `term`.
    func stillFinds(_ term: String) throws -> Bool
    /// Whether the index has `term` in any column (any term it begins, with `prefix`).
    func hasTerm(_ term: String, prefix: Bool) throws -> Bool
    /// The word of the text columns nearest to `word`, other than `word` itself
    /// (`IndexStore.nearestTerm`'s definition).
    func nearestTerm(to word: String) throws -> NearTerm?
    /// The documents of `term`, summed over the text columns (the count `NearTerm` compares).
    func documents(of term: String) throws -> Int
}

/// A correction's word: its edit distance from the word typed, and its documents (summed over
/// the text columns): across apps the nearest, then the most frequent over all of them, wins.
public struct NearTerm: Sendable, Equatable {
    public var term: String
    public var distance: Int
    public var documents: Int
    /// The documents of the word typed (0: absent). A word the index holds is corrected only
    /// when it is rare and far rarer than its correction (`IndexStore.farRarer`).
    public var typedDocuments = 0
}

/// FTS5's vocabulary tables (`fts_vocab`, `fts_vocab_col`): walks doclists for every count.
struct FullTextVocabulary: SuggestionVocabulary {
    let db: Database
    /// The earlier words as FTS5 phrases.
    let earlier: [String]
    /// The query's budget: the nearest-word scan checks it in its loop.
    var budget: QueryBudget? = nil

    func completions(of prefix: String, count: Int) throws -> [String] {
        // Words people type, from the real text columns: not the auxiliary column's bigrams
        // and compound-word pieces ("postgre" of "PostgreSQL" is no word to offer).
        try db.rows("""
            SELECT v.term, sum(v.doc) + coalesce(e.count, 0) * 10 AS weight FROM fts_vocab_col v
            LEFT JOIN engagement e ON e.kind = 'suggestion' AND e.key = v.term
            WHERE v.term >= ? AND v.term < ? AND v.col != 'aux' GROUP BY v.term ORDER BY weight DESC, v.term LIMIT ?
            """, [.text(prefix), .text(prefix + "\u{10FFFF}"), .integer(Int64(count))]).compactMap { $0.string(0) }
    }

    func stillFinds(_ term: String) throws -> Bool {
        guard !earlier.isEmpty else { return true }
        let probe = (earlier + [TextAnalysis.ftsQuoted(term)]).joined(separator: " AND ")
        return try db.scalar("SELECT 1 FROM fts WHERE fts MATCH ? LIMIT 1", [.text(probe)]) != nil
    }

    func hasTerm(_ term: String, prefix: Bool) throws -> Bool {
        try IndexStore.hasTerm(term, prefix: prefix, db: db)
    }

    func nearestTerm(to word: String) throws -> NearTerm? {
        try IndexStore.nearestTerm(to: word, db: db, budget: budget)
    }

    func documents(of term: String) throws -> Int {
        let n = try db.scalar("SELECT sum(doc) FROM fts_vocab_col WHERE term = ? AND col != 'aux'", [.text(term)])
        if case .integer(let n)? = n { return Int(n) }
        return 0
    }
}

/// The ranked index's dictionary: per segment and term the documents (`docs`) and the documents
/// per text column (`column_docs`), read through the covering index `rank_terms_key`, plus the
/// delta's tokenized documents, minus the rewritten (`rank_dirty`) documents' old versions, which
/// are looked up in the term's posting list only when a segment has such documents.
final class RankedVocabulary: SuggestionVocabulary {
    let db: Database
    let snapshot: RankSnapshot
    let delta: [RankedTopK.DeltaDocument]
    let earlier: [QueryPhrase]
    private var earlierMatches: [[UInt32]]?
    private var earlierDelta: [TokenizedDocument] = []

    /// The query's budget: the nearest-word scan checks it in its loop.
    let budget: QueryBudget?

    init(db: Database, snapshot: RankSnapshot, delta: [RankedTopK.DeltaDocument], earlier: [QueryPhrase], budget: QueryBudget? = nil) {
        self.db = db
        self.budget = budget
        self.snapshot = snapshot
        self.delta = delta
        self.earlier = earlier
    }

    /// A term's counts over the whole index; `stale` lists the segments whose counts still
    /// include rewritten documents.
    struct Entry {
        var term: [UInt8]
        var docs = 0
        var columnDocs = 0
        var stale: [Int] = []
    }

    /// Every term in `[low, high)`, counted over the segments and the delta, in byte order. Counts
    /// are upper bounds while `stale` is not empty (`exact` settles them).
    func range(_ low: [UInt8], _ high: [UInt8]) throws -> [Entry] {
        // One hash lookup per row, entries in an array (the dictionary holds their places).
        var slots: [[UInt8]: Int] = [:]
        var entries: [Entry] = []
        func slot(_ term: [UInt8]) -> Int {
            if let i = slots[term] { return i }
            slots[term] = entries.count
            entries.append(Entry(term: term))
            return entries.count - 1
        }
        let scan = try db.statement("SELECT term, docs, column_docs FROM rank_terms WHERE segment = ? AND term >= ? AND term < ?")
        for (k, segment) in snapshot.segments.enumerated() {
            scan.reset()
            try scan.bind([.integer(segment.id), .blob(low), .blob(high)])
            while try scan.step() {
                let i = slot(scan.bytes(0))
                entries[i].docs += Int(scan.int64(1))
                entries[i].columnDocs += Int(scan.int64(2))
                if !segment.dirty.isEmpty { entries[i].stale.append(k) }
            }
            scan.reset()
        }
        for doc in delta {
            var i = doc.document.lowerBound(low)
            while i < doc.document.terms.count, doc.document.terms[i].lexicographicallyPrecedes(high) {
                let e = slot(doc.document.terms[i])
                entries[e].docs += 1
                entries[e].columnDocs += Int(doc.document.columns[i])
                i += 1
            }
        }
        return entries.sorted { $0.term.lexicographicallyPrecedes($1.term) }
    }

    /// The entry with the old versions of rewritten documents taken out.
    func exact(_ entry: Entry) throws -> Entry {
        var e = entry
        for k in entry.stale {
            let segment = snapshot.segments[k]
            guard case .list(let list)? = try PhraseSource.load(QueryPhrase(token: entry.term, prefix: false), segment: segment, db: db) else {
                continue
            }
            for d in segment.dirty {
                if let p = list.find(d) {
                    e.docs -= 1
                    e.columnDocs -= Int(p.columns)
                }
            }
        }
        e.stale = []
        return e
    }

    func completions(of prefix: String, count: Int) throws -> [String] {
        let low = Array(prefix.utf8), high = Array((prefix + "\u{10FFFF}").utf8)
        var engaged: [[UInt8]: Double] = [:]
        for row in try db.rows("SELECT key, count FROM engagement WHERE kind = 'suggestion' AND key >= ? AND key < ?",
            [.text(prefix), .text(prefix + "\u{10FFFF}")]) {
            if let key = row.string(0), let c = row.double(1) { engaged[Array(key.utf8)] = c }
        }
        if let best = try completionsFromTopLists(low, high, engaged: engaged, count: count) { return best }
        return try best(try range(low, high), engaged: engaged, count: count)
    }

    /// The `count` best of `entries` by weight (`completions`). Stale weights are upper bounds: a
    /// term is taken once its exact weight still leads every bound behind it.
    private func best(_ entries: [Entry], engaged: [[UInt8]: Double], count: Int) throws -> [String] {
        func weight(_ e: Entry) -> Double { Double(e.columnDocs) + (engaged[e.term] ?? 0) * 10 }
        func before(_ a: Entry, _ b: Entry) -> Bool {
            let wa = weight(a), wb = weight(b)
            return wa != wb ? wa > wb : a.term.lexicographicallyPrecedes(b.term)
        }
        var pending = entries.filter { $0.columnDocs > 0 }.sorted(by: before)
        var out: [String] = []
        while out.count < count, !pending.isEmpty {
            let top = pending.removeFirst()
            if top.stale.isEmpty {
                out.append(String(decoding: top.term, as: UTF8.self))
                continue
            }
            let settled = try exact(top)
            guard settled.columnDocs > 0 else { continue }
            let at = pending.firstIndex { before(settled, $0) } ?? pending.count
            pending.insert(settled, at: at)
        }
        return out
    }

    /// The answer from the segments' kept completions (`PrefixLists.topCompletions`), or nil
    /// when they cannot prove it. Candidates: every word of a segment's list, of the delta, or
    /// engaged; their counts completed from the segments whose list lacks them. A word in no list
    /// has at most the sum of the lists' last counts in every segment: when the `count`-th best
    /// candidate weighs more, no other word can be among the best.
    func completionsFromTopLists(_ low: [UInt8], _ high: [UInt8], engaged: [[UInt8]: Double], count: Int) throws -> [String]? {
        let key = PrefixLists.completionsKey(low)
        guard count <= PrefixLists.topCompletions, !snapshot.segments.isEmpty else { return nil }
        let lookup = try db.statement("SELECT postings FROM rank_terms WHERE segment = ? AND term = ?")
        var lists: [[(term: [UInt8], columnDocs: Int)]?] = []
        for segment in snapshot.segments {
            lookup.reset()
            try lookup.bind([.integer(segment.id), .blob(key)])
            let blob = try lookup.step() ? lookup.bytes(0) : nil
            lookup.reset()
            guard let blob else {
                lists.append(nil)
                continue
            }
            guard let list = PrefixLists.decodeCompletions(blob) else { return nil }
            lists.append(list)
        }
        // A segment without a list has few words there: they are all candidates.
        guard lists.contains(where: { $0 != nil }) else { return nil }
        // Candidates by slot; `known[slot * segments + k]`: segment k's count of the word is in.
        let segments = snapshot.segments.count
        var slots: [[UInt8]: Int] = [:]
        slots.reserveCapacity(PrefixLists.topCompletions * 2)
        var candidates: [Entry] = []
        var known: [Bool] = []
        func slot(_ term: [UInt8]) -> Int {
            if let i = slots[term] { return i }
            slots[term] = candidates.count
            candidates.append(Entry(term: term))
            known.append(contentsOf: repeatElement(false, count: segments))
            return candidates.count - 1
        }
        var outside = 0
        let scan = try db.statement("SELECT term, docs, column_docs FROM rank_terms WHERE segment = ? AND term >= ? AND term < ?")
        for (k, segment) in snapshot.segments.enumerated() {
            if let list = lists[k] {
                for item in list {
                    let i = slot(item.term)
                    candidates[i].columnDocs += item.columnDocs
                    if !segment.dirty.isEmpty { candidates[i].stale.append(k) }
                    known[i * segments + k] = true
                }
                if list.count == PrefixLists.topCompletions { outside += list.last!.columnDocs }
                continue
            }
            scan.reset()
            try scan.bind([.integer(segment.id), .blob(low), .blob(high)])
            while try scan.step() {
                let i = slot(scan.bytes(0))
                candidates[i].columnDocs += Int(scan.int64(2))
                if !segment.dirty.isEmpty { candidates[i].stale.append(k) }
                known[i * segments + k] = true
            }
            scan.reset()
        }
        for doc in delta {
            var i = doc.document.lowerBound(low)
            while i < doc.document.terms.count, doc.document.terms[i].lexicographicallyPrecedes(high) {
                candidates[slot(doc.document.terms[i])].columnDocs += Int(doc.document.columns[i])
                i += 1
            }
        }
        for term in engaged.keys { _ = slot(term) }
        func weight(_ e: Entry) -> Double { Double(e.columnDocs) + (engaged[e.term] ?? 0) * 10 }
        func precedes(_ a: Entry, _ b: Entry) -> Bool {
            let wa = weight(a), wb = weight(b)
            return wa != wb ? wa > wb : a.term.lexicographicallyPrecedes(b.term)
        }
        // A candidate's count is still missing from each full list that lacks it, where it is at
        // most that list's last count: its weight so far plus those is an upper bound (stale
        // counts only make it larger). Candidates are completed best bound first, and no longer
        // once the `count`-th completed one beats the next bound: every candidate after it is
        // beaten too, so the best `count` are those of completing them all, as the definition
        // does. At 1M items (16 segments) "lib" had 130 candidates and completed each from every
        // list lacking it, about 1 000 lookups a keystroke; the bound settles it with a few.
        let full = snapshot.segments.indices.filter { lists[$0]?.count == PrefixLists.topCompletions }
        var bounded: [(slot: Int, bound: Double)] = candidates.indices.map { i in
            var missing = 0
            for k in full where !known[i * segments + k] { missing += lists[k]!.last!.columnDocs }
            return (i, weight(candidates[i]) + Double(missing))
        }
        bounded.sort {
            $0.bound != $1.bound ? $0.bound > $1.bound : candidates[$0.slot].term.lexicographicallyPrecedes(candidates[$1.slot].term)
        }
        let exactRow = try db.statement("SELECT column_docs FROM rank_terms WHERE segment = ? AND term = ?")
        var settled: [Entry] = []  // completed, best first
        for (i, bound) in bounded {
            var e = candidates[i]
            if settled.count >= count {
                let last = settled[count - 1], w = weight(last)
                if w > bound || (w == bound && last.term.lexicographicallyPrecedes(e.term)) { break }
            }
            for k in full where !known[i * segments + k] {
                let segment = snapshot.segments[k]
                exactRow.reset()
                try exactRow.bind([.integer(segment.id), .blob(e.term)])
                if try exactRow.step() {
                    e.columnDocs += Int(exactRow.int64(0))
                    if !segment.dirty.isEmpty { e.stale.append(k) }
                }
                exactRow.reset()
            }
            let x = e.stale.isEmpty ? e : try exact(e)
            guard x.columnDocs > 0 else { continue }
            let at = settled.firstIndex { precedes(x, $0) } ?? settled.count
            settled.insert(x, at: at)
        }
        // Words in no list weigh at most `outside` (never engaged, never in the delta).
        if settled.count >= count, !settled.isEmpty, weight(settled[count - 1]) <= Double(outside) { return nil }
        if settled.count < count, outside > 0 { return nil }
        return settled.prefix(count).map { String(decoding: $0.term, as: UTF8.self) }
    }

    func stillFinds(_ term: String) throws -> Bool {
        guard !earlier.isEmpty else { return true }
        let matches = try earlierDocuments()
        let token = Array(term.utf8)
        for (k, segment) in snapshot.segments.enumerated() where !matches[k].isEmpty {
            guard case .list(let list)? = try PhraseSource.load(QueryPhrase(token: token, prefix: false), segment: segment, db: db) else {
                continue
            }
            // Walk the smaller side, look up in the other.
            let e = matches[k]
            if list.count < e.count {
                var found = false
                list.forEachPosting { d, _, _, _ in
                    guard !found else { return }
                    var low = 0, high = e.count
                    while low < high {
                        let mid = (low + high) / 2
                        if e[mid] < d { low = mid + 1 } else { high = mid }
                    }
                    found = low < e.count && e[low] == d
                }
                if found { return true }
            } else {
                var reader = SourceReader(source: .list(list))
                for d in e where reader.frequency(of: d) != nil { return true }
            }
        }
        let phrase = QueryPhrase(token: token, prefix: false)
        return earlierDelta.contains { $0.frequency(of: phrase) > 0 }
    }

    /// Per segment, its documents (current, not rewritten) that hold every earlier phrase.
    private func earlierDocuments() throws -> [[UInt32]] {
        if let earlierMatches { return earlierMatches }
        var all: [[UInt32]] = []
        for segment in snapshot.segments {
            var sources: [PhraseSource] = []
            for phrase in earlier {
                guard let s = try PhraseSource.load(phrase, segment: segment, db: db) else {
                    throw DatabaseError(code: 11, extendedCode: 11, message: "a posting list of the ranked index is malformed", sql: nil)
                }
                sources.append(s)
            }
            var docs: [UInt32] = []
            if !sources.contains(where: { $0.count == 0 }) {
                let driver = sources.indices.min { sources[$0].count < sources[$1].count }!
                var readers = sources.map(SourceReader.init)
                var candidates: [UInt32] = []
                candidates.reserveCapacity(sources[driver].count)
                switch sources[driver] {
                case .empty: break
                // The documents only, without a `Posting` array per block.
                case .list(let l): l.forEachPosting { d, _, _, _ in candidates.append(d) }
                case .union(let u): u.forEach { d, _, _, _ in candidates.append(d) }
                }
                if sources.count == 1, segment.dirty.isEmpty {
                    docs = candidates
                } else {
                    next: for d in candidates where !segment.isDirty(d) {
                        for i in sources.indices where i != driver {
                            if readers[i].frequency(of: d) == nil { continue next }
                        }
                        docs.append(d)
                    }
                }
            }
            all.append(docs)
        }
        earlierDelta = delta.map(\.document).filter { doc in earlier.allSatisfy { doc.frequency(of: $0) > 0 } }
        earlierMatches = all
        return all
    }

    /// The first term found settles it: the delta's documents are current, and a segment's count
    /// is exact unless it has rewritten documents (then the term's list is checked). Counting
    /// every term of the range first (`range`) read all 16 segments' rows of "pars" at 1M items.
    func hasTerm(_ term: String, prefix: Bool) throws -> Bool {
        let low = Array(term.utf8)
        let high = prefix ? Array((term + "\u{10FFFF}").utf8) : low + [0]
        for doc in delta {
            let i = doc.document.lowerBound(low)
            if i < doc.document.terms.count, doc.document.terms[i].lexicographicallyPrecedes(high) { return true }
        }
        let scan = try db.statement("SELECT term, docs FROM rank_terms WHERE segment = ? AND term >= ? AND term < ?")
        defer { scan.reset() }
        for (k, segment) in snapshot.segments.enumerated() {
            scan.reset()
            try scan.bind([.integer(segment.id), .blob(low), .blob(high)])
            while try scan.step() {
                let docs = Int(scan.int64(1))
                guard docs > 0 else { continue }
                if segment.dirty.isEmpty { return true }
                if try exact(Entry(term: scan.bytes(0), docs: docs, stale: [k])).docs > 0 { return true }
            }
        }
        return false
    }

    func nearestTerm(to word: String) throws -> NearTerm? {
        guard let first = word.unicodeScalars.first else { return nil }
        let maxDistance = word.count <= 4 ? 1 : 2
        let low = String(first)
        let high = String(Character(Unicode.Scalar(first.value + 1) ?? first))
        let lengths = (word.count - maxDistance)...max(word.count - maxDistance, word.count + maxDistance)
        var best: (term: String, distance: Int, doc: Int)?
        let target = Array(word.unicodeScalars)
        // As `IndexStore.nearestTerm`: the first 50 000 words of the text columns in byte order
        // whose length (in characters, like SQL's length()) is in the window.
        var seen = 0
        for var e in try range(Array(low.utf8), Array(high.utf8)) where e.columnDocs > 0 {
            let term = String(decoding: e.term, as: UTF8.self)
            guard lengths.contains(term.unicodeScalars.count) else { continue }
            if !e.stale.isEmpty {
                e = try exact(e)
                guard e.columnDocs > 0 else { continue }
            }
            seen += 1
            if seen > 50_000 { break }
            if seen & 255 == 0 { try budget?.check() }
            let d = IndexStore.editDistance(target, Array(term.unicodeScalars), limit: maxDistance)
            guard d <= maxDistance, d > 0 else { continue }
            if best == nil || d < best!.distance || (d == best!.distance && e.columnDocs > best!.doc) {
                best = (term, d, e.columnDocs)
            }
        }
        return best.map { NearTerm(term: $0.term, distance: $0.distance, documents: $0.doc) }
    }

    func documents(of term: String) throws -> Int {
        let low = Array(term.utf8)
        var n = 0
        for var e in try range(low, low + [0]) where e.term == low {
            if !e.stale.isEmpty { e = try exact(e) }
            n += e.columnDocs
        }
        return n
    }
}

extension IndexStore {
    /// The ranked index's dictionary for this query, or nil when it cannot answer (an older file,
    /// a delta too large, an earlier word that is not one token).
    func rankedVocabulary(_ db: Database, terms: UserQueryTerms, budget: QueryBudget? = nil) throws -> RankedVocabulary? {
        guard formatVersion >= RankWriter.firstFormat,
              let earlier = QueryPhrase.phrases(UserQueryTerms(words: Array(terms.words.dropLast())), tokenizer: try db.fullTextTokenizer())
        else { return nil }
        let snapshot = try RankSnapshot.read(db)
        guard let delta = try RankedTopK.deltaDocuments(snapshot, db: db, store: self) else { return nil }
        return RankedVocabulary(db: db, snapshot: snapshot, delta: delta, earlier: earlier, budget: budget)
    }
}
