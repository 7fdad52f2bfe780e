#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire

/// Reads and validates one unit file (DESIGN §5, Docs/Units.md). Every input is treated as
/// hostile: the first problem found refuses the unit with a `UnitProblem` naming the file, the
/// key and the fix. Unknown keys are ignored so that newer units load on older daemons, except a
/// key that differs from a known one only in letter case, which is refused as a likely typo.
public enum UnitParser {
    /// Unit files larger than this (1 MiB) are refused unread.
    public static let maximumFileSize = 1 << 20

    /// Reads the unit file at `path` and validates it. In system mode the unit file and its
    /// program must not be writable by other users, and `UserName`/`GroupName` must exist.
    public static func parse(contentsOf path: String, system: Bool) -> Result<ExtensionUnit, UnitProblem> {
        let path = UnitPaths.absolute(path)
        return Result { () throws(UnitProblem) in
            let data = try UnitFiles.read(path)
            if system { try UnitFiles.checkNotWritableByOthers(path, key: nil, what: "the unit file", file: path) }
            return try unit(from: data, path: path, system: system)
        }
    }

    /// Validates unit file contents as if read from `path` (which names the file in problems,
    /// must be `<Label>.plist`, and anchors relative paths). The program is still checked on disk.
    public static func parse(data: Data, path: String, system: Bool) -> Result<ExtensionUnit, UnitProblem> {
        let path = UnitPaths.absolute(path)
        return Result { () throws(UnitProblem) in try unit(from: data, path: path, system: system) }
    }

    static let topLevelKeys = ["Label", "BundleIdentifier", "Program", "ProgramArguments", "WorkingDirectory",
                               "EnvironmentVariables", "Umask", "UserName", "GroupName", "StandardOutPath",
                               "StandardErrorPath", "ProcessType", "Nice", "LowPriorityIO", "SoftResourceLimits",
                               "HardResourceLimits", "ThrottleInterval", "ExitTimeOut", "TimeOut", "Disabled",
                               "IndexExtension", "OpenWith", "ContinuesSearch"]
    static let indexExtensionKeys = ["IndexVersion", "AcknowledgementTimeout", "MaximumRequestDuration",
                                     "MaximumIdentifiersPerRequest", "IndexNames", "RefreshExpiringItems"]
    /// Set by the supervisor for every launch; a unit may not override them.
    static let reservedEnvironment = [ExtensionEnvironment.fd, ExtensionEnvironment.label,
                                      ExtensionEnvironment.bundleIdentifier]

    static func unit(from data: Data, path: String, system: Bool) throws(UnitProblem) -> ExtensionUnit {
        let top = try UnitFields(root: try plistRoot(data, path: path), file: path)
        try top.refuseCaseVariants(of: topLevelKeys)
        let label = try name(top, "Label", example: "org.example.notes-indexer")
        let fileName = (path as NSString).lastPathComponent
        guard fileName == label + ".plist" else {
            throw top.problem("Label", "is \(String(reflecting: label)) but the file is named \(fileName); a unit file must be named <Label>.plist",
                              "rename the file to \(label).plist, or change Label to match the file name")
        }
        let bundle = try name(top, "BundleIdentifier", example: "org.example.notes")
        let folder = (path as NSString).deletingLastPathComponent
        let disabled = try top.bool("Disabled") ?? false
        let (executable, arguments) = try program(top, folder: folder)
        var unit = ExtensionUnit(label: label, bundleIdentifier: bundle, path: path,
                                 executable: executable, arguments: arguments)
        unit.disabled = disabled
        unit.programKey = top.values["Program"] == nil ? "ProgramArguments" : "Program"
        unit.workingDirectory = try top.string("WorkingDirectory", example: "/var/lib/example").map {
            UnitPaths.resolve($0, against: folder)
        }
        unit.environment = try environment(top)
        unit.umask = try umask(top)
        unit.userName = try top.string("UserName", example: "searchlight")
        unit.groupName = try top.string("GroupName", example: "searchlight")
        unit.standardOutPath = try top.string("StandardOutPath", example: "/var/log/example.log").map {
            UnitPaths.resolve($0, against: folder)
        }
        unit.standardErrorPath = try top.string("StandardErrorPath", example: "/var/log/example.log").map {
            UnitPaths.resolve($0, against: folder)
        }
        try priority(top, into: &unit)
        unit.softLimits = try limits(top, "SoftResourceLimits")
        unit.hardLimits = try limits(top, "HardResourceLimits")
        for (name, soft) in unit.softLimits.sorted(by: { $0.key < $1.key }) {
            if let hard = unit.hardLimits[name], soft > hard {
                throw top.problem("SoftResourceLimits.\(name)", "is \(soft), above HardResourceLimits.\(name) (\(hard))",
                                  "lower the soft limit or raise the hard limit")
            }
        }
        unit.throttleInterval = try top.seconds("ThrottleInterval", in: 0...86400, example: 10) ?? 10
        unit.exitTimeOut = try top.seconds("ExitTimeOut", in: 0...86400, example: 20) ?? 20
        unit.timeOut = try top.seconds("TimeOut", in: 0...86400, example: 60) ?? 60
        unit.openWith = try openWith(top)
        unit.continuesSearch = try top.bool("ContinuesSearch") ?? false
        if unit.continuesSearch, unit.openWith == nil {
            throw top.problem("ContinuesSearch", "is true, but the unit declares no OpenWith: the search continues in the OpenWith app",
                              "add <key>OpenWith</key><string>org.example.Notes.desktop</string>, or remove ContinuesSearch")
        }
        if let nested = try top.dictionary("IndexExtension") {
            unit.indexExtension = try indexExtension(UnitFields(nested, file: path, prefix: "IndexExtension."))
        }
        if system {
            if let user = unit.userName, UnitFiles.userID(named: user) == nil {
                throw top.problem("UserName", "names the user \(PlistValue.string(user).shown), which does not exist",
                                  "create the user, or fix the name")
            }
            if let group = unit.groupName, !UnitFiles.groupExists(named: group) {
                throw top.problem("GroupName", "names the group \(PlistValue.string(group).shown), which does not exist",
                                  "create the group, or fix the name")
            }
        }
        // A disabled unit never runs, so its program may be missing (a package removed, say).
        if !disabled {
            try UnitFiles.checkExecutable(executable, named: unit.programKey, system: system, userName: unit.userName,
                                          searchPath: unit.environment["PATH"], file: path)
        }
        return unit
    }

    /// Decodes an XML or binary property list (UnitFields checks that the root is a dictionary);
    /// refuses the old OpenStep text format, which would read almost any text as a string.
    static func plistRoot(_ data: Data, path: String) throws(UnitProblem) -> Any {
        let fix = "write an XML property list: <plist version=\"1.0\"><dict>…</dict></plist> (see Docs/Units.md)"
        if BinaryPlistCheck.isBinary(data), let problem = BinaryPlistCheck.problem(in: data) {
            throw UnitProblem(file: path, message: "is a malformed binary property list: \(problem)", fix: fix)
        }
        var format = PropertyListSerialization.PropertyListFormat.xml
        let root: Any
        do {
            root = try PropertyListSerialization.propertyList(from: data, options: [], format: &format)
        } catch {
            let reason = ((error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String).map { ": " + printable($0) } ?? ""
            throw UnitProblem(file: path, message: "is not a property list\(reason)", fix: fix)
        }
        guard format == .xml || format == .binary else {
            throw UnitProblem(file: path, message: "is not an XML property list", fix: fix)
        }
        return root
    }

    /// Text from a hostile file reaches terminals and logs: keep `limit` characters, control
    /// characters (C0, DEL, C1: terminal escapes) replaced by `?`.
    static func printable(_ text: String, limit: Int = 200) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.prefix(limit).map {
            $0.value < 0x20 || (0x7F...0x9F).contains($0.value) ? "?" : $0
        }))
    }

    /// `Label` and `BundleIdentifier`: required, reverse-DNS shaped (they become file names).
    static func name(_ f: UnitFields, _ key: String, example: String) throws(UnitProblem) -> String {
        guard let s = try f.string(key, example: example) else {
            throw f.problem(key, "is required", "add <key>\(key)</key><string>\(example)</string>")
        }
        guard Names.validBundle(s) else {
            throw f.problem(key, "must be a reverse-DNS name of letters, digits, '.', '-' and '_' (at most 255 bytes, no leading dot, no \"..\"), not \(PlistValue.string(s).shown)",
                            "write e.g. <string>\(example)</string>")
        }
        return s
    }

    /// `Program` and/or `ProgramArguments` -> (absolute executable, argv).
    static func program(_ f: UnitFields, folder: String) throws(UnitProblem) -> (String, [String]) {
        let program = try f.string("Program", example: "/usr/libexec/example-indexer")
        let arguments = try f.stringArray("ProgramArguments", example: "/usr/libexec/example-indexer")
        if let arguments, arguments.isEmpty {
            throw f.problem("ProgramArguments", "is empty; it must start with the program",
                            "write e.g. <array><string>/usr/libexec/example-indexer</string></array>")
        }
        guard let raw = program ?? arguments?.first else {
            throw f.problem("Program", "is required (or ProgramArguments)",
                            "add <key>Program</key><string>/path/to/extension</string>; a relative path is relative to the unit file's folder")
        }
        return (UnitPaths.resolve(raw, against: folder), arguments ?? [raw])
    }

    /// `OpenWith`: a desktop-file id such as `org.example.Notes.desktop` (not a path).
    static func openWith(_ f: UnitFields) throws(UnitProblem) -> String? {
        guard let id = try f.string("OpenWith", example: "org.example.Notes.desktop") else { return nil }
        guard Names.validDesktopFileID(id) else {
            throw f.problem("OpenWith", "must be a desktop-file id (letters, digits, '.', '-', '_', ending in .desktop; no '/'), not \(PlistValue.string(id).shown)",
                            "write the file name of the app's .desktop file, e.g. <string>org.example.Notes.desktop</string>")
        }
        return id
    }

    static func environment(_ f: UnitFields) throws(UnitProblem) -> [String: String] {
        guard let values = try f.dictionary("EnvironmentVariables") else { return [:] }
        var result: [String: String] = [:]
        for (name, value) in values.sorted(by: { $0.key < $1.key }) {
            let key = "EnvironmentVariables.\(name)"
            guard !name.isEmpty, !name.contains("="), !name.contains("\0") else {
                throw f.problem(key, "is not a valid variable name", "use a name without '=' such as LOG_LEVEL")
            }
            guard !reservedEnvironment.contains(name) else {
                throw f.problem(key, "is set by the supervisor for every launch", "remove it")
            }
            guard case .string(let s) = PlistValue(value), !s.contains("\0") else {
                throw f.problem(key, "must be a string, not \(PlistValue(value).shown)", "write e.g. <string>1</string>")
            }
            result[name] = s
        }
        return result
    }

    /// launchd's `Umask`: an integer is taken as written (decimal: 18 is 022), a string as octal.
    static func umask(_ f: UnitFields) throws(UnitProblem) -> mode_t? {
        guard let v = f.value("Umask") else { return nil }
        let fix = "write e.g. <string>022</string> (octal) or <integer>18</integer> (the same mask in decimal)"
        var mask: Int64?
        switch v {
        case .integer(let i): mask = i
        case .string(let s) where !s.isEmpty && s.count <= 4: mask = Int64(s, radix: 8)
        default: break
        }
        guard let mask, (0...0o777).contains(mask) else {
            throw f.problem("Umask", "must be a mask from 0 to 0777, not \(v.shown)", fix)
        }
        return mode_t(mask)
    }

    static func priority(_ f: UnitFields, into unit: inout ExtensionUnit) throws(UnitProblem) {
        if let raw = try f.string("ProcessType", example: "Background") {
            guard let type = ProcessType(rawValue: raw) else {
                throw f.problem("ProcessType", "must be Background, Standard, Adaptive or Interactive, not \(PlistValue.string(raw).shown)",
                                "write e.g. <string>Background</string> (names are case-sensitive)")
            }
            unit.processType = type
        }
        unit.nice = try f.integer("Nice", in: -20...19, example: 10).map(Int32.init) ?? unit.processType.defaultNice
        unit.lowPriorityIO = try f.bool("LowPriorityIO") ?? unit.processType.defaultLowPriorityIO
    }

    static func limits(_ f: UnitFields, _ key: String) throws(UnitProblem) -> [String: UInt64] {
        guard let values = try f.dictionary(key) else { return [:] }
        var result: [String: UInt64] = [:]
        for (name, value) in values.sorted(by: { $0.key < $1.key }) {
            guard ExtensionUnit.resourceLimitNames.contains(name) else {
                throw f.problem("\(key).\(name)", "is not a resource limit",
                                "use one of " + ExtensionUnit.resourceLimitNames.joined(separator: ", ") + " (case-sensitive)")
            }
            switch PlistValue(value) {
            case .integer(let i) where i >= 0: result[name] = UInt64(i)
            case .unsigned(let u): result[name] = u
            case let v:
                throw f.problem("\(key).\(name)", "must be a non-negative integer, not \(v.shown)",
                                "write e.g. <integer>1024</integer>")
            }
        }
        return result
    }

    static func indexExtension(_ f: UnitFields) throws(UnitProblem) -> IndexExtensionSettings {
        try f.refuseCaseVariants(of: indexExtensionKeys)
        var s = IndexExtensionSettings()
        s.indexVersion = try f.integer("IndexVersion", in: 0...Int64(Int32.max), example: 1).map(Int.init) ?? s.indexVersion
        s.acknowledgementTimeout = try f.seconds("AcknowledgementTimeout", in: 1...86400, example: 60) ?? s.acknowledgementTimeout
        s.maximumRequestDuration = try f.seconds("MaximumRequestDuration", in: 1...604800, example: 3600) ?? s.maximumRequestDuration
        s.maximumIdentifiersPerRequest = try f.integer("MaximumIdentifiersPerRequest", in: 1...10000, example: 1000)
            .map(Int.init) ?? s.maximumIdentifiersPerRequest
        s.refreshExpiringItems = try f.bool("RefreshExpiringItems") ?? s.refreshExpiringItems
        if let names = try f.stringArray("IndexNames", example: "", allowEmptyStrings: true) {
            let fix = "write e.g. <array><string></string><string>archive</string></array>"
            guard !names.isEmpty else { throw f.problem("IndexNames", "is empty", fix) }
            for (i, name) in names.enumerated() where !Names.validIndex(name) {
                throw f.problem("IndexNames[\(i)]", "\(PlistValue.string(name).shown) is not an index name: use \"\" (the default index) or up to 64 letters, digits, '.', '-', '_' not starting with '.' or '_'", fix)
            }
            s.indexNames = names
        }
        return s
    }
}

/// One plist value, classified without Foundation's bridging ambiguities (an `NSNumber` holding
/// 1 also casts to `Bool`), so that `<integer>1</integer>` is never taken for `<true/>`.
public enum PlistValue {
    case string(String), integer(Int64), unsigned(UInt64), real(Double), bool(Bool)
    case array([Any]), dictionary([String: Any]), other(String)

    init(_ value: Any) {
        if let s = value as? String {
            self = .string(s)
        } else if type(of: value) == Bool.self, let b = value as? Bool {
            self = .bool(b)
        } else if let n = value as? NSNumber {
            switch String(cString: n.objCType) {
            case "c", "B": self = .bool(n.boolValue)
            case "d", "f": self = .real(n.doubleValue)
            case "Q": self = n.uint64Value > UInt64(Int64.max) ? .unsigned(n.uint64Value) : .integer(n.int64Value)
            default: self = .integer(n.int64Value)
            }
        } else if let a = value as? [Any] {
            self = .array(a)
        } else if let d = value as? [String: Any] {
            self = .dictionary(d)
        } else {
            self = .other(value is Data ? "data" : value is Date ? "a date" : "a dictionary with non-string keys")
        }
    }

    /// The value as a problem message shows it: strings quoted and cut at 40 characters.
    var shown: String {
        switch self {
        case .string(let s): UnitParser.printable(String(reflecting: s.count > 40 ? s.prefix(40) + "…" : s))
        case .integer(let i): "\(i)"
        case .unsigned(let u): "\(u)"
        case .real(let d): "\(d)"
        case .bool(let b): b ? "<true/>" : "<false/>"
        case .array: "an array"
        case .dictionary: "a dictionary"
        case .other(let kind): kind
        }
    }
}

/// Typed access to one plist dictionary; each accessor returns nil for an absent key and throws
/// a `UnitProblem` naming the key (dotted under `prefix`) for a wrong type or an out-of-range value.
public struct UnitFields {
    let values: [String: Any]
    let file: String
    let prefix: String

    init(_ values: [String: Any], file: String, prefix: String = "") {
        self.values = values
        self.file = file
        self.prefix = prefix
    }

    init(root: Any, file: String) throws(UnitProblem) {
        guard case .dictionary(let d) = PlistValue(root) else {
            throw UnitProblem(file: file, message: "holds \(PlistValue(root).shown), not a dictionary",
                              fix: "write <plist version=\"1.0\"><dict>…</dict></plist>")
        }
        self.init(d, file: file)
    }

    func problem(_ key: String, _ message: String, _ fix: String) -> UnitProblem {
        UnitProblem(file: file, key: UnitParser.printable(prefix + key), message: message, fix: fix)
    }

    func value(_ key: String) -> PlistValue? { values[key].map(PlistValue.init) }

    /// A key spelt like a known one but for letter case (`disabled`) would be silently ignored,
    /// which is worse than refusing it.
    func refuseCaseVariants(of known: [String]) throws(UnitProblem) {
        for key in values.keys.sorted() where !known.contains(key) {
            if let meant = known.first(where: { $0.lowercased() == key.lowercased() }) {
                throw problem(key, "is not a known key (key names are case-sensitive)", "write \(meant)")
            }
        }
    }

    func string(_ key: String, example: String, allowEmpty: Bool = false) throws(UnitProblem) -> String? {
        guard let v = value(key) else { return nil }
        guard case .string(let s) = v, allowEmpty || !s.isEmpty, !s.contains("\0") else {
            throw problem(key, "must be a non-empty string, not \(v.shown)", "write e.g. <string>\(example)</string>")
        }
        return s
    }

    func bool(_ key: String) throws(UnitProblem) -> Bool? {
        guard let v = value(key) else { return nil }
        guard case .bool(let b) = v else {
            throw problem(key, "must be a boolean, not \(v.shown)", "write <true/> or <false/>")
        }
        return b
    }

    func seconds(_ key: String, in range: ClosedRange<Double>, example: Int) throws(UnitProblem) -> Double? {
        guard let v = value(key) else { return nil }
        let fix = "write e.g. <integer>\(example)</integer>"
        let number: Double
        switch v {
        case .integer(let i): number = Double(i)
        case .unsigned(let u): number = Double(u)
        case .real(let d) where d.isFinite: number = d
        default:
            let kind = range.lowerBound == 0 ? "a non-negative number of seconds" : "a number of seconds"
            throw problem(key, "must be \(kind), not \(v.shown)", fix)
        }
        guard range.contains(number) else {
            throw problem(key, "must be from \(Int(range.lowerBound)) to \(Int(range.upperBound)) seconds, not \(v.shown)", fix)
        }
        return number
    }

    func integer(_ key: String, in range: ClosedRange<Int64>, example: Int) throws(UnitProblem) -> Int64? {
        guard let v = value(key) else { return nil }
        guard case .integer(let i) = v, range.contains(i) else {
            throw problem(key, "must be an integer from \(range.lowerBound) to \(range.upperBound), not \(v.shown)",
                          "write e.g. <integer>\(example)</integer>")
        }
        return i
    }

    func stringArray(_ key: String, example: String, allowEmptyStrings: Bool = false) throws(UnitProblem) -> [String]? {
        guard let v = value(key) else { return nil }
        let fix = "write e.g. <array><string>\(example)</string></array>"
        guard case .array(let items) = v else { throw problem(key, "must be an array of strings, not \(v.shown)", fix) }
        var result: [String] = []
        for (i, item) in items.enumerated() {
            guard case .string(let s) = PlistValue(item), allowEmptyStrings || !s.isEmpty, !s.contains("\0") else {
                throw problem("\(key)[\(i)]", "must be a \(allowEmptyStrings ? "" : "non-empty ")string, not \(PlistValue(item).shown)", fix)
            }
            result.append(s)
        }
        return result
    }

    func dictionary(_ key: String) throws(UnitProblem) -> [String: Any]? {
        guard let v = value(key) else { return nil }
        guard case .dictionary(let d) = v else {
            throw problem(key, "must be a dictionary, not \(v.shown)", "write <dict>…</dict> (see Docs/Units.md)")
        }
        return d
    }
}
