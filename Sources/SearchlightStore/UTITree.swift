import SearchlightWire

/// A built-in subset of the Uniform Type Identifier hierarchy, so that `contentTypeTree` can be
/// derived when a donor sets only `contentType` (filter queries like
/// `contentTypeTree == "public.image"` then work as on Apple platforms).
public enum UTITree {
    static let parents: [String: [String]] = [
        "public.item": [],
        "public.content": ["public.item"],
        "public.data": ["public.item"],
        "public.composite-content": ["public.content"],
        "public.text": ["public.data", "public.content"],
        "public.plain-text": ["public.text"],
        "public.utf8-plain-text": ["public.plain-text"],
        "public.utf16-plain-text": ["public.plain-text"],
        "public.rtf": ["public.text"],
        "public.html": ["public.text"],
        "public.xml": ["public.text"],
        "public.json": ["public.text"],
        "public.source-code": ["public.plain-text"],
        "public.swift-source": ["public.source-code"],
        "public.c-source": ["public.source-code"],
        "public.python-script": ["public.source-code"],
        "public.shell-script": ["public.source-code"],
        "net.daringfireball.markdown": ["public.plain-text"],
        "public.comma-separated-values-text": ["public.plain-text"],
        "public.message": ["public.item"],
        "public.email-message": ["public.message"],
        "public.contact": ["public.item"],
        "public.vcard": ["public.contact", "public.text"],
        "public.calendar-event": ["public.item"],
        "public.url": ["public.item"],
        "public.file-url": ["public.url"],
        "public.folder": ["public.item"],
        "public.directory": ["public.item"],
        "public.executable": ["public.item"],
        "public.archive": ["public.data"],
        "public.zip-archive": ["public.archive"],
        "org.debian.deb-archive": ["public.archive"],
        "com.adobe.pdf": ["public.data", "public.composite-content"],
        "public.image": ["public.data", "public.content"],
        "public.jpeg": ["public.image"],
        "public.png": ["public.image"],
        "public.tiff": ["public.image"],
        "public.svg-image": ["public.image"],
        "public.heic": ["public.image"],
        "public.audiovisual-content": ["public.data", "public.content"],
        "public.movie": ["public.audiovisual-content"],
        "public.video": ["public.movie"],
        "public.mpeg-4": ["public.movie"],
        "public.audio": ["public.audiovisual-content"],
        "public.mp3": ["public.audio"],
        "public.font": ["public.data"],
        "public.presentation": ["public.composite-content"],
        "public.spreadsheet": ["public.content"],
        "com.apple.application": ["public.item"],
        "public.software-package": ["public.item"],
        "com.apple.journal.entry": ["public.text"],
    ]

    /// The type followed by all its ancestors, nearest first, without duplicates. An unknown type
    /// gets `public.data`, `public.item` as Apple does for dynamic types.
    public static func tree(for type: String) -> [String] {
        knownTrees[type] ?? computeTree(for: type)
    }

    /// `contentTypeTree` as the store keeps it, for a donated `contentType`.
    static func treeValue(for type: String) -> JSONValue {
        knownTreeValues[type] ?? .array(computeTree(for: type).map(JSONValue.string))
    }

    /// The trees of the built-in types, made once: an item's `contentTypeTree` was derived on every
    /// donation (about 5 000 instructions an item).
    private static let knownTrees: [String: [String]] = Dictionary(uniqueKeysWithValues: parents.keys.map { ($0, computeTree(for: $0)) })
    private static let knownTreeValues: [String: JSONValue] = knownTrees.mapValues { .array($0.map(JSONValue.string)) }

    private static func computeTree(for type: String) -> [String] {
        var out: [String] = []
        var queue = [type]
        while !queue.isEmpty {
            let t = queue.removeFirst()
            if out.contains(t) { continue }
            out.append(t)
            queue.append(contentsOf: parents[t] ?? (t == type ? ["public.data", "public.item"] : []))
        }
        return out
    }
}
