#if canImport(Glibc)
import Glibc
#endif
import CSQLite

/// The SQL functions the compiled queries call, registered on each connection:
///
/// - `sl_match(value, pattern, modifiers)` → 1 when `value` (array elements joined by U+001F)
///   matches the `TextPattern`, else 0; NULL value → 0.
/// - `sl_compare(value, op, literal, modifiers)` → 1 when some element `op` (`<`, `<=`, `>`,
///   `>=`, `==`, `!=`) `literal` in `c`/`d`-folded order.
/// - `sl_range(value, low, high, modifiers)` → 1 when some element lies in `[low, high]`.
///
/// Compiled patterns and folded literals are cached per connection, by the argument's text
/// (`ArgumentCache`), so a scan compiles them once, not once per row.
public enum SQLFunctions {
    /// Registers the functions; the answer empties the connection's cache of compiled arguments
    /// by address (`Database` calls it after each read); what it keeps by content is bounded
    /// (`ArgumentCache.contentCapacity`).
    @discardableResult
    public static func register(on db: OpaquePointer) -> @Sendable () -> Void {
        let flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS
        let cache = ArgumentCache()
        // One reference per function, each released by SQLite when the function goes (xDestroy).
        func retained() -> UnsafeMutableRawPointer { Unmanaged.passRetained(cache).toOpaque() }
        let release: @convention(c) (UnsafeMutableRawPointer?) -> Void = { pointer in
            guard let pointer else { return }
            Unmanaged<ArgumentCache>.fromOpaque(pointer).release()
        }
        sqlite3_create_function_v2(db, "sl_match", 3, flags, retained(), slMatch, nil, nil, release)
        sqlite3_create_function_v2(db, "sl_compare", 4, flags, retained(), slCompare, nil, nil, release)
        sqlite3_create_function_v2(db, "sl_range", 4, flags, retained(), slRange, nil, nil, release)
        return { [weak cache] in cache?.clear() }
    }
}

/// What a connection made of pattern and literal arguments, by the address of the argument's
/// text, checked against its bytes (and the modifiers') before use. It replaced sqlite3's
/// auxdata, which lives on the statement in a list searched linearly at every call: with one
/// entry per `sl_match` of the query, a query of P alternatives cost P² per row (2 400 ORed
/// substrings on 20 000 items: 29 s). Used by one thread at a time, like its connection.
private final class ArgumentCache: @unchecked Sendable {
    struct Entry<Value> {
        var source: [UInt8]
        var modifiers: [UInt8]
        var value: Value
    }
    var patterns: [UInt: Entry<TextPattern>] = [:]
    /// The last pattern found, by its argument's address: a scan asks for the same one at every
    /// row, and this check costs less than hashing the address into `patterns`.
    var lastPatternKey: UInt = 0
    var lastPattern: Entry<TextPattern>?
    var literals: [UInt: Entry<[UInt8]>] = [:]
    /// An argument's text and modifiers, for the second level below.
    struct Content: Hashable {
        var source: [UInt8]
        var modifiers: [UInt8]
    }
    /// The same values by content: a statement binds its arguments anew on each call, at a new
    /// address, so the first level above misses once per call and per argument; compiling the
    /// pattern again cost about 45 000 instructions a `query.search` call (a term, a prefix).
    var patternsByContent: [Content: TextPattern] = [:]
    var literalsByContent: [Content: [UInt8]] = [:]
    /// Bytes of argument text held: past `capacity` the cache starts over (a query's arguments
    /// are at most its 64 KiB; entries of earlier statements are only ever stale).
    var bytes = 0
    static let capacity = 1 << 20

    /// Bytes of argument text in the second level: it outlives reads (`clear`) up to this.
    var contentBytes = 0
    static let contentCapacity = 256 << 10

    /// After each read: the first level's addresses mean nothing to the next statement. The
    /// second level stays (bounded by `contentCapacity`): the next call of the same query finds
    /// its compiled arguments there.
    func clear() {
        patterns.removeAll()
        lastPattern = nil
        literals.removeAll()
        bytes = 0
    }

    /// Room for an entry of `count` bytes of text.
    func make(room count: Int) {
        if bytes + count > Self.capacity { clear() }
        bytes += count
    }

    /// Room for a second-level entry of `count` bytes of text.
    func makeContentRoom(_ count: Int) {
        if contentBytes + count > Self.contentCapacity {
            patternsByContent.removeAll()
            literalsByContent.removeAll()
            contentBytes = 0
        }
        contentBytes += count
    }

    static func of(_ ctx: OpaquePointer?) -> ArgumentCache {
        Unmanaged<ArgumentCache>.fromOpaque(sqlite3_user_data(ctx)).takeUnretainedValue()
    }
}

private func text(_ v: OpaquePointer?) -> String? {
    guard sqlite3_value_type(v) != SQLITE_NULL, let p = sqlite3_value_text(v) else { return nil }
    return String(cString: p)
}

private func bytes(_ v: OpaquePointer?) -> UnsafeBufferPointer<UInt8>? {
    guard sqlite3_value_type(v) != SQLITE_NULL else { return nil }
    guard let p = sqlite3_value_text(v) else { return UnsafeBufferPointer(start: nil, count: 0) }
    return UnsafeBufferPointer(start: p, count: Int(sqlite3_value_bytes(v)))
}

private func same(_ stored: [UInt8], _ current: UnsafeBufferPointer<UInt8>) -> Bool {
    stored.count == current.count && stored.withUnsafeBufferPointer { s in
        current.count == 0 || memcmp(s.baseAddress!, current.baseAddress!, current.count) == 0
    }
}

/// The pattern made of argument `index` with `modifiers`, from the connection's cache when the
/// same text (at the same address) was seen before; nil when the argument is NULL. (Written out
/// for each kind, without a key path: this runs for every row and every comparison.)
private func cachedPattern(
    _ ctx: OpaquePointer?, _ argv: UnsafeMutablePointer<OpaquePointer?>, _ index: Int, modifiers: UnsafeBufferPointer<UInt8>
) -> TextPattern? {
    guard let source = bytes(argv[index]) else { return nil }
    let cache = ArgumentCache.of(ctx)
    let key = UInt(bitPattern: source.baseAddress)
    if key == cache.lastPatternKey, let entry = cache.lastPattern, same(entry.source, source), same(entry.modifiers, modifiers) {
        return entry.value
    }
    if let entry = cache.patterns[key], same(entry.source, source), same(entry.modifiers, modifiers) {
        cache.lastPatternKey = key
        cache.lastPattern = entry
        return entry.value
    }
    let content = ArgumentCache.Content(source: Array(source), modifiers: Array(modifiers))
    let value: TextPattern
    if let known = cache.patternsByContent[content] {
        value = known
        cache.make(room: source.count)
    } else {
        value = TextPattern(String(decoding: source, as: UTF8.self), modifiers: String(decoding: modifiers, as: UTF8.self))
        cache.make(room: source.count)
        cache.makeContentRoom(source.count + modifiers.count)
        cache.patternsByContent[content] = value
    }
    let entry = ArgumentCache.Entry(source: content.source, modifiers: content.modifiers, value: value)
    cache.patterns[key] = entry
    cache.lastPatternKey = key
    cache.lastPattern = entry
    return value
}

/// The folded literal of argument `index`, cached like `cachedPattern`.
private func cachedLiteral(
    _ ctx: OpaquePointer?, _ argv: UnsafeMutablePointer<OpaquePointer?>, _ index: Int, modifiers: UnsafeBufferPointer<UInt8>,
    _ order: TextOrder
) -> [UInt8]? {
    guard let source = bytes(argv[index]) else { return nil }
    let cache = ArgumentCache.of(ctx)
    let key = UInt(bitPattern: source.baseAddress)
    if let entry = cache.literals[key], same(entry.source, source), same(entry.modifiers, modifiers) { return entry.value }
    let content = ArgumentCache.Content(source: Array(source), modifiers: Array(modifiers))
    let value: [UInt8]
    if let known = cache.literalsByContent[content] {
        value = known
        cache.make(room: source.count)
    } else {
        value = order.folded(String(decoding: source, as: UTF8.self))
        cache.make(room: source.count)
        cache.makeContentRoom(source.count + modifiers.count)
        cache.literalsByContent[content] = value
    }
    cache.literals[key] = ArgumentCache.Entry(source: content.source, modifiers: content.modifiers, value: value)
    return value
}

/// A NULL modifiers argument: no modifiers.
private var noModifiers: UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(start: nil, count: 0) }

private func slMatch(_ ctx: OpaquePointer?, _ argc: Int32, _ argv: UnsafeMutablePointer<OpaquePointer?>?) {
    guard let argv, let value = bytes(argv[0]) else { return sqlite3_result_int(ctx, 0) }
    let modifierBytes = bytes(argv[2]) ?? noModifiers
    guard let pattern = cachedPattern(ctx, argv, 1, modifiers: modifierBytes) else {
        return sqlite3_result_int(ctx, 0)
    }
    sqlite3_result_int(ctx, pattern.matches(utf8: value) ? 1 : 0)
}

private func slCompare(_ ctx: OpaquePointer?, _ argc: Int32, _ argv: UnsafeMutablePointer<OpaquePointer?>?) {
    guard let argv, let value = bytes(argv[0]), let op = text(argv[1]) else { return sqlite3_result_int(ctx, 0) }
    let modifierBytes = bytes(argv[3]) ?? noModifiers
    let order = TextOrder(modifiers: String(decoding: modifierBytes, as: UTF8.self))
    guard let literal = cachedLiteral(ctx, argv, 2, modifiers: modifierBytes, order) else {
        return sqlite3_result_int(ctx, 0)
    }
    let found = order.forEachElement(value) { element in
        let c = TextOrder.compare(element, literal)
        switch op {
        case "<": return c < 0
        case "<=": return c <= 0
        case ">": return c > 0
        case ">=": return c >= 0
        case "==": return c == 0
        case "!=": return c != 0
        default: return false
        }
    }
    sqlite3_result_int(ctx, found ? 1 : 0)
}

private func slRange(_ ctx: OpaquePointer?, _ argc: Int32, _ argv: UnsafeMutablePointer<OpaquePointer?>?) {
    guard let argv, let value = bytes(argv[0]) else { return sqlite3_result_int(ctx, 0) }
    let modifierBytes = bytes(argv[3]) ?? noModifiers
    let order = TextOrder(modifiers: String(decoding: modifierBytes, as: UTF8.self))
    guard let low = cachedLiteral(ctx, argv, 1, modifiers: modifierBytes, order),
        let high = cachedLiteral(ctx, argv, 2, modifiers: modifierBytes, order)
    else { return sqlite3_result_int(ctx, 0) }
    let found = order.forEachElement(value) { TextOrder.compare($0, low) >= 0 && TextOrder.compare($0, high) <= 0 }
    sqlite3_result_int(ctx, found ? 1 : 0)
}
