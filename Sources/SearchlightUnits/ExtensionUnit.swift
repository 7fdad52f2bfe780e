#if canImport(Glibc)
import Glibc
#endif

/// How much the system should favour an extension's process, with launchd's names (DESIGN §5).
/// Index extensions do background work, so `Background` is the default.
public enum ProcessType: String, Sendable, CaseIterable {
    case background = "Background"
    case standard = "Standard"
    case adaptive = "Adaptive"
    case interactive = "Interactive"

    /// The nice value used when the unit has no `Nice` key: 10 for `Background`, else 0.
    public var defaultNice: Int32 { self == .background ? 10 : 0 }

    /// Whether the idle I/O class is used when the unit has no `LowPriorityIO` key: only for `Background`.
    public var defaultLowPriorityIO: Bool { self == .background }
}

/// The `IndexExtension` dictionary of a unit: what the supervisor may ask of the extension.
public struct IndexExtensionSettings: Sendable, Equatable {
    /// The version of the index layout the extension produces; a change starts a migration.
    public var indexVersion: Int = 1
    /// Seconds without an acknowledgement, progress or donation before a request is given up.
    public var acknowledgementTimeout: Double = 60
    /// Seconds a single request may take in total, however active the extension is.
    public var maximumRequestDuration: Double = 3600
    /// At most this many identifiers go into one `extension.reindexIdentifiers` request.
    public var maximumIdentifiersPerRequest: Int = 1000
    /// The named indexes the extension serves; `""` is the default index.
    public var indexNames: [String] = [""]
    /// Whether idle maintenance asks the extension to refresh items that expire within a day.
    public var refreshExpiringItems: Bool = true

    /// The launchd-style defaults of DESIGN §5.
    public init() {}
}

/// A validated unit file: everything the supervisor needs to start and talk to one index
/// extension. Made by `UnitParser`; every path in it is absolute.
public struct ExtensionUnit: Sendable, Equatable {
    /// The resource limit names accepted in `SoftResourceLimits` / `HardResourceLimits`
    /// (launchd's names; the raw values of `ResourceLimit`).
    public static let resourceLimitNames: [String] = ["CPU", "Data", "FileSize", "NumberOfFiles",
                                                      "NumberOfProcesses", "Stack", "Core"]

    /// The unit's unique reverse-DNS name; equal to the file name without `.plist`.
    public var label: String
    /// The bundle whose index this extension rebuilds.
    public var bundleIdentifier: String
    /// The unit file this was read from (absolute).
    public var path: String
    /// The program to execute (absolute): `Program`, else `ProgramArguments[0]`, a relative one
    /// resolved against the unit file's folder.
    public var executable: String
    /// The full argv, argv[0] included: `ProgramArguments` when given, else `[Program]`.
    public var arguments: [String]
    /// The key that named the program (`Program` or `ProgramArguments`), for messages.
    public var programKey = "Program"
    /// The directory to start in (absolute), or nil for the daemon's choice.
    public var workingDirectory: String?
    /// Variables added to the extension's environment.
    public var environment: [String: String] = [:]
    /// The file mode creation mask to set before exec, or nil to inherit the daemon's.
    public var umask: mode_t?
    /// The user and group to run as; only applied when the daemon runs as root.
    public var userName: String?
    public var groupName: String?
    /// Files that receive the extension's stdout / stderr (absolute); nil sends lines to the
    /// daemon's log tagged with the label.
    public var standardOutPath: String?
    public var standardErrorPath: String?
    /// The `ProcessType`; it supplies the defaults of `nice` and `lowPriorityIO`.
    public var processType: ProcessType = .background
    /// The nice value, -20...19.
    public var nice: Int32 = ProcessType.background.defaultNice
    /// Whether the extension runs in the idle I/O scheduling class.
    public var lowPriorityIO: Bool = ProcessType.background.defaultLowPriorityIO
    /// `setrlimit` values keyed by a name of `resourceLimitNames`.
    public var softLimits: [String: UInt64] = [:]
    public var hardLimits: [String: UInt64] = [:]
    /// Minimum seconds between two launches.
    public var throttleInterval: Double = 10
    /// Seconds from SIGTERM to SIGKILL.
    public var exitTimeOut: Double = 20
    /// Idle seconds before the extension is asked to exit.
    public var timeOut: Double = 60
    /// A disabled unit is listed but never started, and serves no bundle.
    public var disabled: Bool = false
    /// The `IndexExtension` dictionary.
    public var indexExtension = IndexExtensionSettings()
    /// `OpenWith`: the desktop-file id of the app the bundle's items open in from the desktop's
    /// search (DESIGN §12); it is launched with a `searchlight-item:BUNDLE/IDENTIFIER` URI.
    public var openWith: String?
    /// `ContinuesSearch`: the `OpenWith` app also continues a search the user started in the
    /// desktop's search (GNOME Shell's LaunchSearch): it is launched with a
    /// `searchlight-query:TEXT` URI (`SearchQueryContinuation`). Needs `OpenWith`.
    public var continuesSearch = false

    /// A unit with the launchd defaults of DESIGN §5; `arguments` defaults to `[executable]`.
    /// Meant for tests and tools: units read from disk come from `UnitParser`.
    public init(label: String, bundleIdentifier: String, path: String = "",
                executable: String, arguments: [String]? = nil) {
        self.label = label
        self.bundleIdentifier = bundleIdentifier
        self.path = path
        self.executable = executable
        self.arguments = arguments ?? [executable]
    }
}

/// Why a unit file was refused (or skipped), with the fix: printed to operators as
/// `FILE: key KEY: MESSAGE; FIX`.
public struct UnitProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// The unit file, or the unit directory for a directory-level problem.
    public var file: String
    /// The offending key, dotted for nested keys (`IndexExtension.IndexNames`); nil when the file
    /// as a whole is at fault.
    public var key: String?
    /// What is wrong.
    public var message: String
    /// What to do about it.
    public var fix: String

    public init(file: String, key: String? = nil, message: String, fix: String) {
        self.file = file
        self.key = key
        self.message = message
        self.fix = fix
    }

    /// One line; control characters (which a hostile file name or value could carry) become `?`.
    public var description: String {
        UnitParser.printable((key.map { "\(file): key \($0): " } ?? "\(file): ") + message + "; " + fix, limit: 4096)
    }
}
