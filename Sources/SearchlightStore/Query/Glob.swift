#if canImport(Glibc)
import Glibc
#endif

/// A compiled wildcard pattern over UTF-8 bytes. Matching bytes is exact for UTF-8 because a
/// literal segment always starts with a lead byte, which never occurs inside a character.
struct Glob: Sendable {
    private let segments: [[UInt8]]
    private let anchoredStart: Bool
    private let anchoredEnd: Bool
    private let exact: [UInt8]?

    init(parts: [TextPattern.Part]) {
        var segments: [[UInt8]] = []
        var hasWildcard = false
        for part in parts {
            switch part {
            case .wildcard: hasWildcard = true
            case .text(let t): if !t.isEmpty { segments.append(Array(t.utf8)) }
            }
        }
        anchoredStart = parts.first != .wildcard
        anchoredEnd = parts.last != .wildcard
        exact = hasWildcard ? nil : (segments.first ?? [])
        self.segments = segments
    }

    func matches(_ v: UnsafeBufferPointer<UInt8>) -> Bool {
        if let exact {
            return v.count == exact.count && exact.withUnsafeBufferPointer { Glob.memoryEqual($0, v, at: 0) }
        }
        var lower = 0
        var upper = v.count
        var first = 0
        var last = segments.count - 1
        if anchoredStart, let s = segments.first {
            guard s.count <= v.count, s.withUnsafeBufferPointer({ Glob.memoryEqual($0, v, at: 0) }) else { return false }
            lower = s.count
            first = 1
        }
        if anchoredEnd, last >= first {
            let s = segments[last]
            guard s.count <= upper - lower, s.withUnsafeBufferPointer({ Glob.memoryEqual($0, v, at: upper - s.count) })
            else { return false }
            upper -= s.count
            last -= 1
        }
        if first > last { return true }
        for k in first...last {
            guard let found = segments[k].withUnsafeBufferPointer({ Glob.find($0, in: v, from: lower, to: upper) })
            else { return false }
            lower = found + segments[k].count
        }
        return true
    }

    static func memoryEqual(_ needle: UnsafeBufferPointer<UInt8>, _ v: UnsafeBufferPointer<UInt8>, at offset: Int) -> Bool {
        for i in 0..<needle.count where needle[i] != v[offset + i] { return false }
        return true
    }

    static func find(_ needle: UnsafeBufferPointer<UInt8>, in v: UnsafeBufferPointer<UInt8>, from: Int, to: Int) -> Int? {
        guard needle.count <= to - from else { return nil }
        if needle.isEmpty { return from }
        // memchr finds candidates for the first byte (vectorised in glibc; memmem is not exported
        // to Swift without _GNU_SOURCE), memcmp checks the rest.
        guard let base = v.baseAddress, let n = needle.baseAddress else { return nil }
        let first = Int32(needle[0])
        var i = from
        while i + needle.count <= to {
            guard let hit = memchr(base + i, first, to - needle.count + 1 - i) else { return nil }
            let at = base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
            if memcmp(base + at, n, needle.count) == 0 { return at }
            i = at + 1
        }
        return nil
    }
}

/// Lexicographic comparison of strings after the `c`/`d` folding (SQL functions `sl_compare` and
/// `sl_range`): UTF-8 byte order, which is Unicode scalar order.
public struct TextOrder: Sendable {
    let caseInsensitive: Bool
    let diacriticInsensitive: Bool

    public init(modifiers: String) {
        caseInsensitive = modifiers.contains("c") || modifiers.contains("t")
        diacriticInsensitive = modifiers.contains("d")
    }

    public func folded(_ s: String) -> [UInt8] {
        Array(TextAnalysis.fold(s, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive).utf8)
    }

    /// Calls `body` with each array element of `value` (split at U+001F), folded.
    func forEachElement(_ value: UnsafeBufferPointer<UInt8>, _ body: ([UInt8]) -> Bool) -> Bool {
        var start = 0
        for k in 0...value.count where k == value.count || value[k] == 0x1F {
            let element = UnsafeBufferPointer(rebasing: value[start..<k])
            if body(folded(String(decoding: element, as: UTF8.self))) { return true }
            start = k + 1
        }
        return false
    }

    /// -1, 0 or 1 as `a` sorts before, equal to or after `b`.
    static func compare(_ a: [UInt8], _ b: [UInt8]) -> Int {
        for i in 0..<min(a.count, b.count) where a[i] != b[i] { return a[i] < b[i] ? -1 : 1 }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }
}
