import CSQLite

/// The SQL functions the compiled queries call, registered on each connection:
///
/// - `sl_match(value, pattern, modifiers)` → 1 when `value` (array elements joined by U+001F)
///   matches the `TextPattern`, else 0; NULL value → 0.
/// - `sl_compare(value, op, literal, modifiers)` → 1 when some element `op` (`<`, `<=`, `>`,
///   `>=`, `==`, `!=`) `literal` in `c`/`d`-folded order.
/// - `sl_range(value, low, high, modifiers)` → 1 when some element lies in `[low, high]`.
///
/// Compiled patterns and folded literals are cached on the statement (sqlite3 auxdata), so a
/// scan compiles them once, not once per row.
public enum SQLFunctions {
    public static func register(on db: OpaquePointer) {
        let flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS
        sqlite3_create_function_v2(db, "sl_match", 3, flags, nil, slMatch, nil, nil, nil)
        sqlite3_create_function_v2(db, "sl_compare", 4, flags, nil, slCompare, nil, nil, nil)
        sqlite3_create_function_v2(db, "sl_range", 4, flags, nil, slRange, nil, nil, nil)
    }
}

private final class Cached<Value> {
    let value: Value
    let key: String
    init(_ value: Value, key: String) {
        self.value = value
        self.key = key
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

/// The value built from argument `index` (keyed by the modifiers), from the statement's cache
/// when the argument is a constant.
private func cached<Value>(
    _ ctx: OpaquePointer?, _ argv: UnsafeMutablePointer<OpaquePointer?>, _ index: Int32, key: String,
    _ make: (String) -> Value
) -> Value? {
    if let aux = sqlite3_get_auxdata(ctx, index) {
        let box = Unmanaged<Cached<Value>>.fromOpaque(aux).takeUnretainedValue()
        if box.key == key { return box.value }
    }
    guard let source = text(argv[Int(index)]) else { return nil }
    let box = Cached(make(source), key: key)
    sqlite3_set_auxdata(ctx, index, Unmanaged.passRetained(box).toOpaque()) { pointer in
        guard let pointer else { return }
        Unmanaged<AnyObject>.fromOpaque(pointer).release()
    }
    return box.value
}

private func slMatch(_ ctx: OpaquePointer?, _ argc: Int32, _ argv: UnsafeMutablePointer<OpaquePointer?>?) {
    guard let argv, let value = bytes(argv[0]) else { return sqlite3_result_int(ctx, 0) }
    let modifiers = text(argv[2]) ?? ""
    guard let pattern = cached(ctx, argv, 1, key: modifiers, { TextPattern($0, modifiers: modifiers) }) else {
        return sqlite3_result_int(ctx, 0)
    }
    sqlite3_result_int(ctx, pattern.matches(utf8: value) ? 1 : 0)
}

private func slCompare(_ ctx: OpaquePointer?, _ argc: Int32, _ argv: UnsafeMutablePointer<OpaquePointer?>?) {
    guard let argv, let value = bytes(argv[0]), let op = text(argv[1]) else { return sqlite3_result_int(ctx, 0) }
    let modifiers = text(argv[3]) ?? ""
    let order = TextOrder(modifiers: modifiers)
    guard let literal = cached(ctx, argv, 2, key: modifiers, { order.folded($0) }) else {
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
    let modifiers = text(argv[3]) ?? ""
    let order = TextOrder(modifiers: modifiers)
    guard let low = cached(ctx, argv, 1, key: modifiers, { order.folded($0) }),
        let high = cached(ctx, argv, 2, key: modifiers, { order.folded($0) })
    else { return sqlite3_result_int(ctx, 0) }
    let found = order.forEachElement(value) { TextOrder.compare($0, low) >= 0 && TextOrder.compare($0, high) <= 0 }
    sqlite3_result_int(ctx, found ? 1 : 0)
}
