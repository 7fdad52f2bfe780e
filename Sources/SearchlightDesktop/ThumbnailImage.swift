#if canImport(Glibc)
import Glibc
#endif
import CZlib
import Foundation

/// A thumbnail as 8-bit RGBA pixels (rows top to bottom, no padding): what KRunner's `icon-data`
/// carries, since KRunner takes pixels where GNOME Shell takes the image file's bytes.
///
/// Decoded from an item's `thumbnailData`, which any app may donate: every length, size and
/// index in it is checked before use, and a bad one is a `DecodeError`, never a trap.
public struct ThumbnailImage: Equatable, Sendable {
    public let width: Int
    public let height: Int
    /// `width * height * 4` bytes: red, green, blue, alpha.
    public let rgba: [UInt8]

    public struct DecodeError: Error, Equatable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    /// The largest image decoded: 2048 pixels a side (KRunner refuses larger), and at most 1 MiB
    /// of inflated rows (512 × 512 RGBA, plenty for a 64-pixel icon): a small compressed file can
    /// inflate a thousandfold, and a keystroke in KRunner may decode ten thumbnails (a 1023 ×
    /// 1023 RGBA one took 0.87 s in a debug build).
    public static let maximumSide = 2048
    public static let maximumInflatedBytes = 1 << 20

    public init(width: Int, height: Int, rgba: [UInt8]) {
        precondition(width > 0 && height > 0 && rgba.count == width * height * 4)
        self.width = width
        self.height = height
        self.rgba = rgba
    }

    /// Decodes a PNG file (every colour type and bit depth of the standard, not interlaced;
    /// chunk CRCs checked).
    public init(png data: [UInt8]) throws(DecodeError) {
        let file = try PNGFile(data)
        let rows = try Self.inflate(file.compressed, exactly: file.header.height * (file.header.rowBytes + 1))
        let pixels = try Self.unfilter(rows, file.header)
        self.init(width: file.header.width, height: file.header.height, rgba: try file.rgba(pixels))
    }

    /// The image made to fit `side` × `side` (its aspect kept), each pixel the alpha-weighted mean
    /// of the pixels it covers; the image itself when it fits.
    public func scaled(toFit side: Int) -> ThumbnailImage {
        guard side > 0, width > side || height > side else { return self }
        let longer = max(width, height)
        let w = max(1, width * side / longer), h = max(1, height * side / longer)
        var out = [UInt8](repeating: 0, count: w * h * 4)
        for y in 0..<h {
            let y0 = y * height / h, y1 = max(y0 + 1, (y + 1) * height / h)
            for x in 0..<w {
                let x0 = x * width / w, x1 = max(x0 + 1, (x + 1) * width / w)
                var sums = (r: 0, g: 0, b: 0, a: 0)
                for sy in y0..<y1 {
                    for sx in x0..<x1 {
                        let i = (sy * width + sx) * 4
                        let a = Int(rgba[i + 3])
                        sums.r += Int(rgba[i]) * a
                        sums.g += Int(rgba[i + 1]) * a
                        sums.b += Int(rgba[i + 2]) * a
                        sums.a += a
                    }
                }
                let o = (y * w + x) * 4
                if sums.a > 0 {
                    out[o] = UInt8(sums.r / sums.a)
                    out[o + 1] = UInt8(sums.g / sums.a)
                    out[o + 2] = UInt8(sums.b / sums.a)
                    out[o + 3] = UInt8(sums.a / ((y1 - y0) * (x1 - x0)))
                }
            }
        }
        return ThumbnailImage(width: w, height: h, rgba: out)
    }

    /// zlib's inflate into a buffer of exactly `count` bytes: more or less is an error.
    static func inflate(_ input: [UInt8], exactly count: Int) throws(DecodeError) -> [UInt8] {
        guard count <= maximumInflatedBytes else { throw DecodeError("the image inflates to more than \(maximumInflatedBytes >> 20) MiB") }
        var output = [UInt8](repeating: 0, count: count + 1)  // one more: room to see excess data
        var input = input
        let (status, produced) = input.withUnsafeMutableBufferPointer { inBuffer in
            output.withUnsafeMutableBufferPointer { outBuffer -> (Int32, Int) in
                var stream = z_stream()
                guard inflateInit_(&stream, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else { return (Z_MEM_ERROR, 0) }
                defer { inflateEnd(&stream) }
                stream.next_in = inBuffer.baseAddress
                stream.avail_in = UInt32(inBuffer.count)
                stream.next_out = outBuffer.baseAddress
                stream.avail_out = UInt32(outBuffer.count)
                let status = CZlib.inflate(&stream, Z_FINISH)
                return (status, outBuffer.count - Int(stream.avail_out))
            }
        }
        guard status == Z_STREAM_END else { throw DecodeError("the image data does not inflate (zlib status \(status))") }
        guard produced == count else { throw DecodeError("the image data inflates to \(produced) bytes, not \(count)") }
        output.removeLast()
        return output
    }

    /// Undoes PNG's per-row filters (none, sub, up, average, Paeth): the rows without their
    /// filter bytes.
    static func unfilter(_ data: [UInt8], _ header: PNGFile.Header) throws(DecodeError) -> [UInt8] {
        let stride = header.rowBytes, unit = max(1, header.bitsPerPixel / 8)
        var out = [UInt8](repeating: 0, count: header.height * stride)
        for y in 0..<header.height {
            let filter = data[y * (stride + 1)]
            let source = y * (stride + 1) + 1, row = y * stride, previous = row - stride
            for i in 0..<stride {
                let a = i >= unit ? Int(out[row + i - unit]) : 0
                let b = y > 0 ? Int(out[previous + i]) : 0
                let c = y > 0 && i >= unit ? Int(out[previous + i - unit]) : 0
                let predicted: Int
                switch filter {
                case 0: predicted = 0
                case 1: predicted = a
                case 2: predicted = b
                case 3: predicted = (a + b) / 2
                case 4:
                    let p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c)
                    predicted = pa <= pb && pa <= pc ? a : (pb <= pc ? b : c)
                default: throw DecodeError("row \(y) has an unknown filter type \(filter)")
                }
                out[row + i] = UInt8(truncatingIfNeeded: Int(data[source + i]) + predicted)
            }
        }
        return out
    }
}

extension ThumbnailImage {
    /// The bytes of a local `file:` thumbnail (an item's `thumbnailURL`), read as the user, as
    /// GNOME Shell reads it: nil for another scheme or host, for anything but a regular file (a
    /// FIFO would block, a device never end; opened non-blocking, then checked), and for a file
    /// over `limit` bytes.
    public static func contentsOfFile(uri: String, limit: Int) -> [UInt8]? {
        guard let url = URL(string: uri), url.isFileURL, (url.host ?? "").isEmpty || url.host == "localhost",
              url.path.hasPrefix("/") else { return nil }
        let fd = open(url.path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_size <= limit else { return nil }
        // One byte more than the limit: a file that grew since fstat is refused too.
        var data = [UInt8](repeating: 0, count: limit + 1)
        var total = 0
        while total < data.count {
            let n = data.withUnsafeMutableBytes { read(fd, $0.baseAddress! + total, $0.count - total) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { return nil }
            if n == 0 { break }
            total += n
        }
        return total <= limit ? Array(data[..<total]) : nil
    }
}

/// A PNG file's chunks, checked: its header, palette and compressed image data.
struct PNGFile {
    struct Header {
        var width: Int, height: Int, bitDepth: Int, colorType: Int
        var channels: Int { colorType == 2 ? 3 : colorType == 4 ? 2 : colorType == 6 ? 4 : 1 }
        var bitsPerPixel: Int { channels * bitDepth }
        var rowBytes: Int { (width * bitsPerPixel + 7) / 8 }
    }

    typealias DecodeError = ThumbnailImage.DecodeError
    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    let header: Header
    /// Palette entries as RGBA (alpha from tRNS, else opaque).
    let palette: [UInt8]
    let compressed: [UInt8]

    init(_ data: [UInt8]) throws(DecodeError) {
        guard data.count >= 8, Array(data[0..<8]) == Self.signature else { throw DecodeError("not a PNG file") }
        var header: Header?
        var palette: [UInt8] = []
        var alphas: [UInt8] = []
        var compressed: [UInt8] = []
        var offset = 8
        var ended = false
        while !ended {
            guard data.count - offset >= 12 else { throw DecodeError("the file ends before its IEND chunk") }
            let length = Int(Self.uint32(data, offset))
            guard length <= data.count - offset - 12 else { throw DecodeError("a chunk of \(length) bytes overruns the file") }
            let type = String(decoding: data[(offset + 4)..<(offset + 8)], as: UTF8.self)
            let ancillary = data[offset + 4] & 0x20 != 0  // bit 5 of the type's first byte
            let body = Array(data[(offset + 8)..<(offset + 8 + length)])
            let crc = data[(offset + 4)..<(offset + 8 + length)].withContiguousStorageIfAvailable {
                crc32(0, $0.baseAddress, UInt32($0.count))
            } ?? 0
            guard crc == UInt(Self.uint32(data, offset + 8 + length)) else { throw DecodeError("chunk \(type) fails its CRC") }
            offset += 12 + length
            switch type {
            case "IHDR":
                guard header == nil, length == 13 else { throw DecodeError("a bad IHDR chunk") }
                header = try Self.header(body)
            case "PLTE":
                guard header != nil, length % 3 == 0, (1...256).contains(length / 3) else { throw DecodeError("a bad PLTE chunk") }
                palette = body
            case "tRNS": alphas = body
            case "IDAT":
                guard header != nil else { throw DecodeError("image data before the IHDR chunk") }
                compressed += body
            case "IEND": ended = true
            default:
                // An unknown critical chunk (upper-case first letter) changes how to read the image.
                guard ancillary else { throw DecodeError("an unsupported critical chunk \(type)") }
            }
        }
        guard let header, !compressed.isEmpty else { throw DecodeError("no IHDR or no image data") }
        if header.colorType == 3 {
            guard !palette.isEmpty else { throw DecodeError("a palette image without a PLTE chunk") }
            var rgba: [UInt8] = []
            for i in 0..<(palette.count / 3) {
                rgba += palette[(i * 3)..<(i * 3 + 3)]
                rgba.append(i < alphas.count ? alphas[i] : 255)
            }
            palette = rgba
        }
        self.header = header
        self.palette = palette
        self.compressed = compressed
    }

    static func header(_ b: [UInt8]) throws(DecodeError) -> Header {
        let width = Int(uint32(b, 0)), height = Int(uint32(b, 4))
        let side = ThumbnailImage.maximumSide
        guard (1...side).contains(width), (1...side).contains(height) else {
            throw DecodeError("the image is \(width)×\(height); at most \(side)×\(side) is decoded")
        }
        let depth = Int(b[8]), color = Int(b[9])
        let depths: [Int: [Int]] = [0: [1, 2, 4, 8, 16], 2: [8, 16], 3: [1, 2, 4, 8], 4: [8, 16], 6: [8, 16]]
        guard depths[color]?.contains(depth) == true else { throw DecodeError("colour type \(color) with bit depth \(depth) is not PNG") }
        guard b[10] == 0, b[11] == 0 else { throw DecodeError("an unknown compression or filter method") }
        guard b[12] == 0 else { throw DecodeError("an interlaced PNG (not supported)") }
        return Header(width: width, height: height, bitDepth: depth, colorType: color)
    }

    static func uint32(_ b: [UInt8], _ i: Int) -> UInt32 {
        UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3])
    }

    /// The unfiltered rows as RGBA: 16-bit samples keep their high byte, grey levels below 8 bits
    /// are stretched to 0-255, palette indexes are looked up (one past the palette is an error).
    func rgba(_ rows: [UInt8]) throws(DecodeError) -> [UInt8] {
        let h = header, stride = h.rowBytes, channels = h.channels, maximum = (1 << min(h.bitDepth, 8)) - 1
        var out = [UInt8](repeating: 255, count: h.width * h.height * 4)
        func sample(_ row: Int, _ index: Int) -> Int {
            switch h.bitDepth {
            case 16: return Int(rows[row + index * 2])
            case 8: return Int(rows[row + index])
            default:
                let bit = index * h.bitDepth
                return Int(rows[row + bit / 8]) >> (8 - h.bitDepth - bit % 8) & maximum
            }
        }
        for y in 0..<h.height {
            let row = y * stride
            for x in 0..<h.width {
                let o = (y * h.width + x) * 4, s = x * channels
                switch h.colorType {
                case 0, 4:
                    let grey = UInt8(sample(row, s) * 255 / maximum)
                    (out[o], out[o + 1], out[o + 2]) = (grey, grey, grey)
                    if h.colorType == 4 { out[o + 3] = UInt8(sample(row, s + 1)) }
                case 3:
                    let index = sample(row, x)
                    guard index * 4 < palette.count else { throw DecodeError("palette index \(index) is past the palette") }
                    for c in 0..<4 { out[o + c] = palette[index * 4 + c] }
                default:  // 2, 6
                    for c in 0..<channels { out[o + c] = UInt8(sample(row, s + c)) }
                }
            }
        }
        return out
    }
}
