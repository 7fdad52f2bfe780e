import Foundation

/// A document's terms as FTS5 indexed them, for the items no segment holds in their current
/// version (the delta: above `rank_covered`, or in `rank_dirty`).
struct TokenizedDocument: Sendable {
    /// `items.checksum` of the version tokenized: a new version of the row has another.
    var checksum: Int64
    var length: UInt32
    /// Sorted by term bytes.
    var terms: [[UInt8]]
    var frequencies: [UInt32]
    var columns: [UInt8]
    /// Per term, the text columns holding it (`Posting.mask`).
    var masks: [UInt8]

    init(checksum: Int64, columns texts: [String?], tokenizer: FullTextTokenizer) {
        self.checksum = checksum
        var table = TermTable()
        var scratch = DocumentScratch()
        length = DocumentTokenizer.tokenize(texts, tokenizer: tokenizer, table: &table, scratch: &scratch)
        let order = scratch.terms.indices.sorted {
            table.bytes(Int(scratch.terms[$0])).lexicographicallyPrecedes(table.bytes(Int(scratch.terms[$1])))
        }
        terms = order.map { Array(table.bytes(Int(scratch.terms[$0]))) }
        frequencies = order.map { scratch.frequencies[$0] }
        columns = order.map { UInt8(scratch.masks[$0].nonzeroBitCount) }
        masks = order.map { scratch.masks[$0] }
    }

    /// Whether FTS5 matches the document with the one-token phrase `token` (a prefix: any term
    /// it begins), in a column of `columns` (`Posting.mask` bits), or in any column, `aux`
    /// included, when `columns` is nil.
    func matches(_ token: [UInt8], prefix: Bool, columns: UInt8?) -> Bool {
        var i = lowerBound(token)
        while i < terms.count {
            if prefix ? !terms[i].starts(with: token) : terms[i] != token { return false }
            if columns.map({ masks[i] & $0 != 0 }) ?? true { return true }
            if !prefix { return false }
            i += 1
        }
        return false
    }

    /// The first term at or after `key`.
    func lowerBound(_ key: [UInt8]) -> Int {
        var low = 0, high = terms.count
        while low < high {
            let mid = (low + high) / 2
            if terms[mid].lexicographicallyPrecedes(key) { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// bm25's frequency of a phrase of one token (a prefix sums every term it begins), 0 when absent.
    func frequency(of phrase: QueryPhrase) -> UInt32 {
        var i = lowerBound(phrase.token)
        guard phrase.prefix else { return i < terms.count && terms[i] == phrase.token ? frequencies[i] : 0 }
        var f: UInt32 = 0
        while i < terms.count, terms[i].starts(with: phrase.token) {
            f += frequencies[i]
            i += 1
        }
        return f
    }
}

/// Tokenized delta documents, shared by the readers of one store and kept while their row does
/// not change, so a query pays for a new item once, not at every keystroke.
final class DeltaCache: @unchecked Sendable {
    private let lock = NSLock()
    private var documents: [Int64: TokenizedDocument] = [:]

    func document(_ rowid: Int64, checksum: Int64) -> TokenizedDocument? {
        lock.withLock {
            guard let d = documents[rowid], d.checksum == checksum else { return nil }
            return d
        }
    }

    func store(_ rowid: Int64, _ document: TokenizedDocument) {
        lock.withLock { documents[rowid] = document }
    }

    /// Forgets documents that left the delta.
    func retain(only rowids: Set<Int64>) {
        lock.withLock {
            guard documents.count > rowids.count else { return }
            documents = documents.filter { rowids.contains($0.key) }
        }
    }

    func removeAll() { lock.withLock { documents.removeAll() } }

    /// Forgets documents a segment now holds: at or below `covered` and not rewritten since.
    func retain(above covered: Int64, dirty: [Int64]) {
        lock.withLock {
            let rewritten = Set(dirty)
            documents = documents.filter { $0.key > covered || rewritten.contains($0.key) }
        }
    }
}
