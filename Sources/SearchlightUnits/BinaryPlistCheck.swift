import Foundation

/// Checks a binary property list's structure before Foundation decodes it. swift-corelibs
/// Foundation trusts the file: a set (`0xC_`) used where a dictionary key or value is bridged
/// crashes the process (found by the `unit` fuzz target, Docs/Reliability.md), and a reference
/// cycle or an out-of-range offset is not its problem either, and an object referenced many times
/// is copied once per reference when bridged to Swift, so 203 bytes of arrays that each hold four
/// references to the next expand to 4^24 objects (a hang, then memory exhaustion; found by
/// probing the same target). A unit file holds only booleans,
/// integers, reals, dates, data, strings, arrays and string-keyed dictionaries, so anything else
/// is refused here, with the reason.
public enum BinaryPlistCheck {
    static let magic = Array("bplist00".utf8)

    static func isBinary(_ data: Data) -> Bool { data.starts(with: Array("bplist".utf8)) }

    /// Nil when the structure is sound, else what is wrong with it.
    static func problem(in data: Data) -> String? {
        let bytes = [UInt8](data)
        var check = Walker(bytes: bytes)
        do {
            try check.run()
            return nil
        } catch {
            return error.reason
        }
    }

    struct Failure: Error {
        var reason: String
        init(_ reason: String) { self.reason = reason }
    }

    struct Walker {
        let bytes: [UInt8]
        var offsetSize = 0, refSize = 0, objectCount = 0, tableOffset = 0
        /// 1 while an object is being walked (seeing it again is a cycle), 2 once it is done.
        var state: [UInt8] = []
        /// Objects in each walked object's tree once shared references are copied out.
        var expanded: [Int] = []
        /// More than a unit of 1 MiB could hold written out: refused.
        static let maxExpandedObjects = 100_000

        init(bytes: [UInt8]) { self.bytes = bytes }

        func integer(at offset: Int, size: Int) throws(Failure) -> Int {
            guard size >= 1, size <= 8, offset >= 0, offset + size <= bytes.count else { throw Failure("a field runs past the end") }
            var value: UInt64 = 0
            for i in 0..<size { value = value << 8 | UInt64(bytes[offset + i]) }
            guard value <= UInt64(Int.max) else { throw Failure("a size or offset is out of range") }
            return Int(value)
        }

        mutating func run() throws(Failure) {
            guard bytes.starts(with: BinaryPlistCheck.magic) else { throw Failure("only version 00 (\"bplist00\") is read") }
            guard bytes.count >= BinaryPlistCheck.magic.count + 32 else { throw Failure("too short for its trailer") }
            let trailer = bytes.count - 32
            offsetSize = Int(bytes[trailer + 6])
            refSize = Int(bytes[trailer + 7])
            objectCount = try integer(at: trailer + 8, size: 8)
            let top = try integer(at: trailer + 16, size: 8)
            tableOffset = try integer(at: trailer + 24, size: 8)
            guard (1...8).contains(offsetSize), (1...8).contains(refSize) else { throw Failure("invalid offset or reference size") }
            guard objectCount >= 1, top < objectCount, tableOffset >= 8,
                objectCount <= (trailer - tableOffset) / offsetSize
            else { throw Failure("the offset table does not fit the file") }
            state = [UInt8](repeating: 0, count: objectCount)
            expanded = [Int](repeating: 0, count: objectCount)
            _ = try walk(top, depth: 0)
        }

        func offset(of object: Int) throws(Failure) -> Int {
            let offset = try integer(at: tableOffset + object * offsetSize, size: offsetSize)
            guard offset >= 8, offset < tableOffset else { throw Failure("object \(object) lies outside the object area") }
            return offset
        }

        /// The element count of a string, data, array or dictionary at `offset`, and where its
        /// contents start.
        func count(at offset: Int) throws(Failure) -> (count: Int, start: Int) {
            let low = Int(bytes[offset] & 0x0F)
            guard low == 0x0F else { return (low, offset + 1) }
            guard offset + 1 < tableOffset, bytes[offset + 1] & 0xF0 == 0x10 else { throw Failure("an invalid length") }
            let size = 1 << Int(bytes[offset + 1] & 0x0F)
            guard size <= 8 else { throw Failure("an invalid length") }
            return (try integer(at: offset + 2, size: size), offset + 2 + size)
        }

        func fits(_ start: Int, _ length: Int) throws(Failure) {
            guard length >= 0, length <= tableOffset - start else { throw Failure("an object runs into the offset table") }
        }

        func reference(_ start: Int, _ k: Int) throws(Failure) -> Int {
            let object = try integer(at: start + k * refSize, size: refSize)
            guard object < objectCount else { throw Failure("a reference to object \(object) of \(objectCount)") }
            return object
        }

        /// Checks `object` and what it holds; returns how many objects it expands to.
        mutating func walk(_ object: Int, depth: Int) throws(Failure) -> Int {
            guard state[object] != 1 else { throw Failure("object \(object) contains itself") }
            guard state[object] == 0 else { return expanded[object] }
            var size = 1
            func add(_ n: Int) throws(Failure) {
                size += n
                guard size <= Walker.maxExpandedObjects else {
                    throw Failure("its shared references expand to more than \(Walker.maxExpandedObjects) objects")
                }
            }
            guard depth < 512 else { throw Failure("nesting deeper than 512 levels") }
            state[object] = 1
            let at = try offset(of: object)
            let marker = bytes[at]
            switch marker >> 4 {
            case 0x0:
                guard marker == 0x08 || marker == 0x09 else { throw Failure("a null or fill object, which a unit cannot hold") }
            case 0x1:
                guard marker & 0x0F <= 4 else { throw Failure("an integer wider than 16 bytes") }
                try fits(at + 1, 1 << Int(marker & 0x0F))
            case 0x2:
                guard marker == 0x22 || marker == 0x23 else { throw Failure("a real that is not 4 or 8 bytes") }
                try fits(at + 1, 1 << Int(marker & 0x0F))
            case 0x3:
                guard marker == 0x33 else { throw Failure("a date that is not 8 bytes") }
                try fits(at + 1, 8)
            case 0x4, 0x5:
                let (n, start) = try count(at: at)
                try fits(start, n)
            case 0x6:
                let (n, start) = try count(at: at)
                guard n <= Int.max / 2 else { throw Failure("an invalid length") }
                try fits(start, 2 * n)
            case 0xA:
                let (n, start) = try count(at: at)
                guard n <= Int.max / refSize else { throw Failure("an invalid length") }
                try fits(start, n * refSize)
                for k in 0..<n { try add(try walk(try reference(start, k), depth: depth + 1)) }
            case 0xD:
                let (n, start) = try count(at: at)
                guard n <= Int.max / (2 * refSize) else { throw Failure("an invalid length") }
                try fits(start, 2 * n * refSize)
                for k in 0..<n {
                    let key = try reference(start, k)
                    let keyMarker = bytes[try offset(of: key)] >> 4
                    guard keyMarker == 0x5 || keyMarker == 0x6 else { throw Failure("a dictionary key that is not a string") }
                    try add(try walk(key, depth: depth + 1))
                    try add(try walk(try reference(start, n + k), depth: depth + 1))
                }
            default:
                throw Failure("a set or UID object (marker 0x\(String(marker, radix: 16))), which a unit cannot hold")
            }
            state[object] = 2
            expanded[object] = size
            return size
        }
    }
}
