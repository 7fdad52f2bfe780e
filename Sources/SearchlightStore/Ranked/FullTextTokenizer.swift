import CSQLite

/// FTS5's own tokenizer, as the `fts` table uses it (`unicode61 remove_diacritics 2`), reached
/// through the connection's fts5_api: the ranked index must count exactly the tokens FTS5
/// indexed (its bm25 reads them), so it never imitates the tokenizer. One instance per
/// connection and thread (the tokenizer object keeps scratch state).
final class FullTextTokenizer {
    /// FTS5 truncates longer tokens to this many bytes, on both sides (`FTS5_MAX_TOKEN_SIZE`).
    static let maxTokenBytes = 32768

    /// Called for each token; the pointer is valid only during the call.
    typealias Sink = (UnsafeRawBufferPointer) -> Void

    private var tokenizer = csqlite_tokenizer()

    init(_ db: Database) throws(DatabaseError) {
        // The arguments of the table's `tokenize=` option (Schema): FTS5 splits it the same way.
        let name = "unicode61", args = ["remove_diacritics", "2"]
        let rc = withCStringArray(args) { argv in
            csqlite_tokenizer_open(db.handle, name, argv, Int32(args.count), &tokenizer)
        }
        guard rc == SQLITE_OK else {
            throw DatabaseError(code: rc & 0xFF, extendedCode: rc, message: "cannot open FTS5's unicode61 tokenizer", sql: nil)
        }
    }

    deinit { csqlite_tokenizer_close(&tokenizer) }

    /// Tokenizes `text` as a document (`query: false`) or a query string, calling `sink` per token.
    func tokenize(_ text: UnsafeRawBufferPointer, query: Bool = false, _ sink: Sink) {
        guard let base = text.baseAddress, text.count > 0 else { return }
        withoutActuallyEscaping(sink) { sink in
            var box = SinkBox(sink: sink)
            withUnsafeMutablePointer(to: &box) { context in
                _ = csqlite_tokenize(&tokenizer, query ? FTS5_TOKENIZE_QUERY : FTS5_TOKENIZE_DOCUMENT,
                    base.assumingMemoryBound(to: CChar.self), Int32(text.count), context) { context, _, token, length, _, _ in
                    guard let context, let token else { return SQLITE_OK }
                    let n = min(Int(length), FullTextTokenizer.maxTokenBytes)
                    context.assumingMemoryBound(to: SinkBox.self).pointee.sink(UnsafeRawBufferPointer(start: token, count: n))
                    return SQLITE_OK
                }
            }
        }
    }

    func tokenize(_ text: String, query: Bool = false, _ sink: Sink) {
        var copy = text
        copy.withUTF8 { tokenize(UnsafeRawBufferPointer($0), query: query, sink) }
    }

    /// The tokens of `text`, as byte arrays.
    func tokens(_ text: String, query: Bool) -> [[UInt8]] {
        var out: [[UInt8]] = []
        tokenize(text, query: query) { out.append(Array($0.bindMemory(to: UInt8.self))) }
        return out
    }

    private struct SinkBox {
        let sink: Sink
    }
}

private func withCStringArray<R>(_ strings: [String], _ body: (UnsafeMutablePointer<UnsafePointer<CChar>?>) -> R) -> R {
    let duplicates = strings.map { strdup($0) }
    defer { duplicates.forEach { free($0) } }
    var pointers = duplicates.map { UnsafePointer($0) }
    return pointers.withUnsafeMutableBufferPointer { body($0.baseAddress!) }
}
