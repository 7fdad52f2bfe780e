#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit

/// Keeps items the index would refuse out of the donations: one invalid item fails its whole
/// call (DESIGN §4), so a single odd paragraph would otherwise fail every reindex, forever.
/// Only paragraphs that could break a limit (large, or holding a NUL byte) are validated, so a
/// normal file pays for one `memchr` per paragraph.
struct RefusedPackages {
    static let validatedParagraphBytes = 64 << 10
    private let validator = ItemValidator()
    private(set) var count = 0
    private var first: String?

    mutating func accepts(_ item: SearchableItem, from paragraph: UnsafeBufferPointer<UInt8>) -> Bool {
        guard paragraph.count > Self.validatedParagraphBytes || item.uniqueIdentifier.utf8.count > 255
            || memchr(paragraph.baseAddress!, 0, paragraph.count) != nil
        else { return true }
        do {
            _ = try validator.validate(item: item.json)
            return true
        } catch {
            count += 1
            if first == nil { first = error.message }
            return false
        }
    }

    /// One line on stderr (the daemon's log, tagged with our label), not one per package.
    func report(path: String) {
        guard let first else { return }
        FileHandle.standardError.write(Data(
            "packages: skipped packages the index would refuse count=\(count) file=\(path) first=\"\(first.prefix(200))\"\n".utf8))
    }
}
