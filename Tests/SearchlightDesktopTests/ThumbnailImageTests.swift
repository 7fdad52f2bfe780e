#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
@testable import SearchlightDesktop

/// PNG files built by the tests: chunks with their CRCs, image data in stored (uncompressed)
/// deflate blocks, so that each test states its pixels byte by byte.
enum PNGBuilder {
    static func crc32(_ bytes: some Sequence<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for b in bytes {
            crc ^= UInt32(b)
            for _ in 0..<8 { crc = crc & 1 == 1 ? 0xEDB8_8320 ^ (crc >> 1) : crc >> 1 }
        }
        return ~crc
    }

    static func be32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }

    static func chunk(_ type: String, _ body: [UInt8]) -> [UInt8] {
        let typed = Array(type.utf8) + body
        return be32(UInt32(body.count)) + typed + be32(crc32(typed))
    }

    /// A zlib stream of stored blocks.
    static func zlibStored(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x78, 0x01]
        var blocks = stride(from: 0, to: data.count, by: 65535).map { Array(data[$0..<min($0 + 65535, data.count)]) }
        if blocks.isEmpty { blocks = [[]] }
        for (i, block) in blocks.enumerated() {
            let n = UInt16(block.count)
            out += [i == blocks.count - 1 ? 1 : 0, UInt8(n & 0xFF), UInt8(n >> 8), UInt8(~n & 0xFF), UInt8(~n >> 8)] + block
        }
        var a: UInt32 = 1, b: UInt32 = 0
        for byte in data { a = (a + UInt32(byte)) % 65521; b = (b + a) % 65521 }
        return out + be32(b << 16 | a)
    }

    static func header(width: UInt32, height: UInt32, depth: UInt8, color: UInt8, interlace: UInt8 = 0) -> [UInt8] {
        be32(width) + be32(height) + [depth, color, 0, 0, interlace]
    }

    /// A PNG with `rows` (each with its filter byte) as its image data.
    static func png(width: UInt32, height: UInt32, depth: UInt8, color: UInt8, rows: [UInt8], extra: [[UInt8]] = [], interlace: UInt8 = 0) -> [UInt8] {
        ThumbnailImage.pngSignature + chunk("IHDR", header(width: width, height: height, depth: depth, color: color, interlace: interlace))
            + extra.joined() + chunk("IDAT", zlibStored(rows)) + chunk("IEND", [])
    }

    /// Recomputes every chunk's CRC (a mutated file then reaches the decoder's later checks).
    static func fixingCRCs(_ data: [UInt8]) -> [UInt8] {
        var data = data, offset = 8
        while offset + 12 <= data.count {
            let length = Int(data[offset]) << 24 | Int(data[offset + 1]) << 16 | Int(data[offset + 2]) << 8 | Int(data[offset + 3])
            guard length <= data.count - offset - 12 else { break }
            let crc = be32(crc32(data[(offset + 4)..<(offset + 8 + length)]))
            data.replaceSubrange((offset + 8 + length)..<(offset + 12 + length), with: crc)
            offset += 12 + length
        }
        return data
    }
}

extension ThumbnailImage {
    static let pngSignature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
}

@Suite("Thumbnails as pixels (KRunner's icon-data)", .onOwnThreads)
struct ThumbnailImageTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    func pixel(_ image: ThumbnailImage, _ x: Int, _ y: Int) -> [UInt8] {
        Array(image.rgba[((y * image.width + x) * 4)..<((y * image.width + x) * 4 + 4)])
    }

    @Test("a real, deflate-compressed PNG (the Tags demo's photo) decodes to its size and colour")
    func demoPhoto() throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: Self.root + "/Extensions/Tags/Sample/photos/sipapu.png"))
        let image = try ThumbnailImage(png: Array(data))
        #expect(image.width == 24 && image.height == 16 && image.rgba.count == 24 * 16 * 4)
        #expect(pixel(image, 0, 0) == [214, 120, 60, 255] && pixel(image, 23, 15) == [214, 120, 60, 255])
    }

    @Test("each colour type and bit depth, and each row filter, gives the RGBA the file states")
    func colourTypesAndFilters() throws {
        // RGB 8-bit, 2×2: row 0 unfiltered, row 1 with "up" (adds the row above).
        let rgb = try ThumbnailImage(png: PNGBuilder.png(width: 2, height: 2, depth: 8, color: 2,
            rows: [0, 10, 20, 30, 40, 50, 60, 2, 1, 1, 1, 2, 2, 2]))
        #expect(rgb.rgba == [10, 20, 30, 255, 40, 50, 60, 255, 11, 21, 31, 255, 42, 52, 62, 255])
        // Grey 1-bit, 3×1: 1, 0, 1 stretched to 255, 0, 255.
        let grey = try ThumbnailImage(png: PNGBuilder.png(width: 3, height: 1, depth: 1, color: 0, rows: [0, 0b1010_0000]))
        #expect(grey.rgba == [255, 255, 255, 255, 0, 0, 0, 255, 255, 255, 255, 255])
        // Palette 2-bit with tRNS: entry 1 half transparent.
        let palette = try ThumbnailImage(png: PNGBuilder.png(width: 2, height: 1, depth: 2, color: 3, rows: [0, 0b0001_0000],
            extra: [PNGBuilder.chunk("PLTE", [1, 2, 3, 4, 5, 6]), PNGBuilder.chunk("tRNS", [255, 128])]))
        #expect(palette.rgba == [1, 2, 3, 255, 4, 5, 6, 128])
        // RGBA 16-bit keeps each sample's high byte; "sub" adds the pixel to the left (8 bytes).
        let deep = try ThumbnailImage(png: PNGBuilder.png(width: 2, height: 1, depth: 16, color: 6,
            rows: [1, 1, 0, 2, 0, 3, 0, 4, 0, 1, 0, 1, 0, 1, 0, 1, 0]))
        #expect(deep.rgba == [1, 2, 3, 4, 2, 3, 4, 5])
        // Grey + alpha 8-bit with "average" and Paeth rows.
        let ga = try ThumbnailImage(png: PNGBuilder.png(width: 1, height: 2, depth: 8, color: 4, rows: [3, 100, 200, 4, 1, 1]))
        #expect(ga.rgba == [100, 100, 100, 200, 101, 101, 101, 201])
    }

    @Test("hostile or unsupported files are errors, not traps",
        arguments: [
            ("not a PNG", Array("GIF89a....".utf8)),
            ("truncated", Array(PNGBuilder.png(width: 2, height: 1, depth: 8, color: 2, rows: [0, 1, 2, 3, 4, 5, 6]).prefix(40))),
            ("too wide for KRunner", PNGBuilder.png(width: 100_000, height: 1, depth: 8, color: 2, rows: [0, 1, 2, 3])),
            ("inflates past the bound", PNGBuilder.png(width: 2048, height: 2048, depth: 16, color: 6, rows: [0])),
            ("fewer rows than the header says", PNGBuilder.png(width: 2, height: 2, depth: 8, color: 2, rows: [0, 1, 2, 3, 4, 5, 6])),
            ("more rows than the header says", PNGBuilder.png(width: 1, height: 1, depth: 8, color: 0, rows: [0, 1, 0, 1])),
            ("an unknown filter", PNGBuilder.png(width: 1, height: 1, depth: 8, color: 0, rows: [9, 1])),
            ("a palette index past the palette", PNGBuilder.png(width: 1, height: 1, depth: 8, color: 3, rows: [0, 7],
                extra: [PNGBuilder.chunk("PLTE", [1, 2, 3])])),
            ("a palette image without a palette", PNGBuilder.png(width: 1, height: 1, depth: 8, color: 3, rows: [0, 0])),
            ("interlaced", PNGBuilder.png(width: 1, height: 1, depth: 8, color: 0, rows: [0, 1], interlace: 1)),
            ("a bit depth PNG has not", PNGBuilder.png(width: 1, height: 1, depth: 4, color: 2, rows: [0, 1])),
            ("an unknown critical chunk", PNGBuilder.png(width: 1, height: 1, depth: 8, color: 0, rows: [0, 1],
                extra: [PNGBuilder.chunk("ZZZZ", [])])),
            ("a chunk longer than the file", ThumbnailImage.pngSignature + [0x7F, 0xFF, 0xFF, 0xFF] + Array("IHDR".utf8) + [0, 0, 0, 0]),
        ] as [(String, [UInt8])])
    func hostile(_ what: String, _ data: [UInt8]) {
        #expect(throws: ThumbnailImage.DecodeError.self, "\(what)") { try ThumbnailImage(png: data) }
    }

    @Test("a chunk whose CRC does not match is refused")
    func badCRC() throws {
        var data = PNGBuilder.png(width: 1, height: 1, depth: 8, color: 0, rows: [0, 1])
        data[data.count - 1] ^= 1  // IEND's CRC
        #expect(throws: ThumbnailImage.DecodeError.self) { try ThumbnailImage(png: data) }
        #expect(throws: Never.self) { try ThumbnailImage(png: PNGBuilder.fixingCRCs(data)) }
    }

    @Test("every one-byte change of a real PNG (CRCs then fixed) decodes or is an error, never a trap")
    func everyByteChanged() throws {
        let data = Array(try Data(contentsOf: URL(fileURLWithPath: Self.root + "/Extensions/Tags/Sample/photos/kachina.png")))
        var decoded = 0, refused = 0
        for i in 8..<data.count {
            for value: UInt8 in [0, 1, 0x7F, 0x80, 0xFF, data[i] ^ 0x10] {
                var mutated = data
                mutated[i] = value
                do {
                    let image = try ThumbnailImage(png: PNGBuilder.fixingCRCs(mutated))
                    #expect(image.rgba.count == image.width * image.height * 4)
                    decoded += 1
                } catch {
                    refused += 1
                }
            }
        }
        #expect(decoded > 0 && refused > 0, "decoded \(decoded), refused \(refused)")
    }

    @Test("scaling to fit keeps the aspect and weighs colour by alpha; an image that fits is unchanged")
    func scaling() {
        // 4×2: left half opaque red, right half a transparent green that must not tint it.
        var pixels: [UInt8] = []
        for _ in 0..<2 { pixels += [255, 0, 0, 255, 255, 0, 0, 255, 0, 255, 0, 0, 0, 255, 0, 0] }
        let image = ThumbnailImage(width: 4, height: 2, rgba: pixels)
        let half = image.scaled(toFit: 2)
        #expect(half.width == 2 && half.height == 1)
        #expect(half.rgba == [255, 0, 0, 255, 0, 0, 0, 0])
        let mixed = image.scaled(toFit: 1)
        #expect(mixed.width == 1 && mixed.height == 1 && mixed.rgba == [255, 0, 0, 127])
        #expect(image.scaled(toFit: 64) == image)
    }

    @Test("a file: thumbnail is read only when it is a local regular file within the limit; a FIFO, a device, another host or scheme, or a larger file gives nothing, at once")
    func thumbnailFiles() throws {
        var template = Array("/tmp/slthumb-XXXXXX".utf8CString)
        let dir = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let photo = Self.root + "/Extensions/Tags/Sample/photos/sipapu.png"
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: photo)))
        try Data(bytes).write(to: URL(fileURLWithPath: dir + "/a photo.png"))
        #expect(ThumbnailImage.contentsOfFile(uri: "file://" + dir + "/a%20photo.png", limit: 1024) == bytes)
        #expect(ThumbnailImage.contentsOfFile(uri: "file://localhost" + dir + "/a%20photo.png", limit: 1024) == bytes)
        #expect(ThumbnailImage.contentsOfFile(uri: "file://" + dir + "/a%20photo.png", limit: bytes.count - 1) == nil)
        // A FIFO with no writer: a blocking open or read would hang the runner.
        #expect(mkfifo(dir + "/fifo", 0o600) == 0)
        #expect(ThumbnailImage.contentsOfFile(uri: "file://" + dir + "/fifo", limit: 1024) == nil)
        #expect(ThumbnailImage.contentsOfFile(uri: "file:///dev/zero", limit: 1024) == nil)
        #expect(ThumbnailImage.contentsOfFile(uri: "file://" + dir, limit: 1024) == nil)
        #expect(ThumbnailImage.contentsOfFile(uri: "file://elsewhere.example" + dir + "/a%20photo.png", limit: 1024) == nil)
        #expect(ThumbnailImage.contentsOfFile(uri: "https://example.org/a.png", limit: 1024) == nil)
        #expect(ThumbnailImage.contentsOfFile(uri: "file://" + dir + "/missing.png", limit: 1024) == nil)
    }
}
