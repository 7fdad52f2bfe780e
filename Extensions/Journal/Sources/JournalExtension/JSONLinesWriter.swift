#if canImport(Glibc)
import Glibc
#endif
import SearchlightKit

/// Writes items to standard output as JSON lines in the wire shape that
/// `searchlight import BUNDLE FILE.jsonl` reads; buffered, because `--dump` may print many.
struct JSONLinesWriter {
    private var buffer: [UInt8] = []

    mutating func write(_ item: SearchableItem) {
        item.json.write(to: &buffer, sortedKeys: true)
        buffer.append(UInt8(ascii: "\n"))
        if buffer.count >= 1 << 20 { flush() }
    }

    mutating func flush() {
        buffer.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(1, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { exit(1) }  // stdout closed (e.g. `| head`): nobody is reading
                offset += n
            }
        }
        buffer.removeAll(keepingCapacity: true)
    }
}
