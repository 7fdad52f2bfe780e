import SearchlightKit

/// An installed Debian package, as the index shows it.
struct InstalledPackage: Sendable {
    var name: String
    var architecture: String?
    var version: String?
    var section: String?
    var priority: String?
    var installedSize: Double?
    var multiArchSame: Bool
    /// The first line of `Description`.
    var synopsis: String?
    /// The rest of `Description`: the leading space of each line removed, ` .` lines made empty.
    var longDescription: String?
    var tags: [String]

    /// The paragraph's package, or nil if it is no installed package (dpkg keeps records of
    /// removed ones whose configuration files remain: `Status: deinstall ok config-files`).
    init?(_ paragraph: ControlParagraph) {
        guard paragraph.value(.status, endsWith: " installed"), let name = paragraph.string(.package), !name.isEmpty
        else { return nil }
        self.name = name
        architecture = paragraph.string(.architecture)
        version = paragraph.string(.version)
        section = paragraph.string(.section)
        priority = paragraph.string(.priority)
        installedSize = paragraph.value(.installedSize).flatMap(Self.decimal)
        multiArchSame = paragraph.string(.multiArch) == "same"
        synopsis = paragraph.string(.description)
        longDescription = paragraph.continuation(.description).map(Self.descriptionText)
        tags = Self.tags(first: paragraph.value(.tag), continuation: paragraph.continuation(.tag))
    }

    /// The identifier: the package name, or `name:arch` for a `Multi-Arch: same` package of a
    /// foreign architecture, as `dpkg-query` names it. Then the native and foreign copies of one
    /// library (libc6 and libc6:i386) are two items, whatever order the file lists them in.
    func identifier(nativeArchitecture: String) -> String {
        guard multiArchSame, let architecture, architecture != nativeArchitecture, architecture != "all" else { return name }
        return "\(name):\(architecture)"
    }

    func searchableItem(nativeArchitecture: String) -> SearchableItem {
        var attributes = AttributeSet()
        attributes.title = name
        attributes.contentDescription = synopsis
        attributes.textContent = longDescription
        var keywords = tags
        if let section { keywords.append(section) }
        if let priority { keywords.append(priority) }
        if !keywords.isEmpty { attributes.keywords = keywords }
        // The custom attributes in one go: `attributes[custom:]` rewrites the whole map on each
        // set, which shows at a million items.
        var custom: [String: JSONValue] = [:]
        if let version { custom["version"] = .string(version) }
        if let architecture { custom["architecture"] = .string(architecture) }
        if let installedSize { custom["installedSize"] = .number(installedSize) }
        if !custom.isEmpty { attributes[attribute: "custom"] = .object(custom) }
        return SearchableItem(uniqueIdentifier: identifier(nativeArchitecture: nativeArchitecture),
            domainIdentifier: domainIdentifier, attributeSet: attributes)
    }

    /// The section as a domain (`contrib/net` -> `contrib.net`), so `searchlight delete --domains
    /// contrib` forgets a whole archive area.
    var domainIdentifier: String? {
        guard let section else { return nil }
        let components = section.split(whereSeparator: { $0 == "/" || $0 == "." })
        return components.isEmpty ? nil : components.joined(separator: ".")
    }

    // MARK: - Field values

    /// `Installed-Size` (KiB); nil unless it is all digits.
    static func decimal(_ bytes: UnsafeBufferPointer<UInt8>) -> Double? {
        guard !bytes.isEmpty, bytes.count <= 15 else { return nil }
        var value = 0
        for byte in bytes {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return Double(value)
    }

    /// Real descriptions are a few KiB; past this the rest of a description is left out, so the
    /// item stays within the index's 1 MiB item limit.
    static let maxDescriptionBytes = 256 << 10

    /// The long description's text: each continuation line loses its leading space, and a line
    /// that is only `.` stands for an empty line (deb822 cannot hold empty lines inside a field).
    static func descriptionText(_ continuation: UnsafeBufferPointer<UInt8>) -> String {
        var text: [UInt8] = []
        text.reserveCapacity(min(continuation.count, maxDescriptionBytes))
        var lineStart = 0
        while lineStart < continuation.count, text.count < maxDescriptionBytes {
            let lineEnd = ControlParagraph.lineEnd(in: continuation, from: lineStart)
            let content = UnsafeBufferPointer(rebasing: continuation[(lineStart + 1)..<lineEnd])
            if lineStart > 0 { text.append(UInt8(ascii: "\n")) }
            if !(content.count == 1 && content[0] == UInt8(ascii: ".")) { text.append(contentsOf: content) }
            lineStart = lineEnd + 1
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// Debtags (`Tag: admin::package-management, role::program`), possibly over several lines.
    static func tags(first: UnsafeBufferPointer<UInt8>?, continuation: UnsafeBufferPointer<UInt8>?) -> [String] {
        var tags: [String] = []
        for part in [first, continuation] {
            guard let part else { continue }
            var start = 0
            while start < part.count {
                // A tag ends at a comma or at the end of a line.
                var end = start
                while end < part.count, part[end] != UInt8(ascii: ","), part[end] != UInt8(ascii: "\n") { end += 1 }
                let range = ControlParagraph.trimmed(part, start..<end)
                if !range.isEmpty { tags.append(String(decoding: UnsafeBufferPointer(rebasing: part[range]), as: UTF8.self)) }
                start = end + 1
            }
        }
        return tags
    }
}
