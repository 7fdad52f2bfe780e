import Foundation

/// What the SDK hands an extension when it starts (SwiftPM's `PluginContext`): who it is, how it
/// was started, and its own arguments with the SDK's options already taken out.
///
/// ```swift
/// init(context: ExtensionContext) throws {
///     var arguments = ArgumentExtractor(context.arguments)
///     library = URL(fileURLWithPath: arguments.extractOption(named: "library").last ?? "library")
/// }
/// ```
public struct ExtensionContext: Sendable {
    /// How the extension was started.
    public enum LaunchMode: Sendable, Equatable {
        /// By `searchlightd`, with its socket on fd 3 (`SEARCHLIGHT_EXTENSION_FD`).
        case launched
        /// By hand (under a debugger, say): it attaches to the daemon socket under its label.
        case attached
        /// With `--dump`: it prints what a reindex-all would donate and exits; no daemon.
        case dump
    }

    /// The unit's `Label` (`SEARCHLIGHT_EXTENSION_LABEL`, `--label`, or the type's `label`); empty
    /// under `--dump` when none is known.
    public var label: String
    /// The bundle whose index it serves, when known at start (launched by the daemon); an
    /// attached extension learns it from the handshake, and a request's index carries it.
    public var bundleIdentifier: String?
    /// The extension's own arguments: the unit's `ProgramArguments` after the program, without
    /// the SDK's options (`--label`, `--socket`, `--dump`, `--dump-index`).
    public var arguments: [String]
    /// The process environment (with the unit's `EnvironmentVariables`).
    public var environment: [String: String]
    public var mode: LaunchMode
    /// `argv[0]`, as the extension was started.
    public var executable: String

    public init(label: String, bundleIdentifier: String? = nil, arguments: [String] = [],
                environment: [String: String] = [:], mode: LaunchMode = .launched, executable: String = "") {
        self.label = label
        self.bundleIdentifier = bundleIdentifier
        self.arguments = arguments
        self.environment = environment
        self.mode = mode
        self.executable = executable
    }
}

/// Takes options out of an argument list, SwiftPM's `ArgumentExtractor` in small: for an
/// extension's own arguments (`ExtensionContext.arguments`).
public struct ArgumentExtractor: Sendable {
    private var arguments: [String]
    private var literals: [String]

    /// Arguments after a `--` are literals: never taken as options.
    public init(_ arguments: [String]) {
        if let dashes = arguments.firstIndex(of: "--") {
            self.arguments = Array(arguments[..<dashes])
            literals = Array(arguments[(dashes + 1)...])
        } else {
            self.arguments = arguments
            literals = []
        }
    }

    /// The values of `--name VALUE` and `--name=VALUE`, in order, taken out of the arguments.
    public mutating func extractOption(named name: String) -> [String] {
        var values: [String] = []
        var kept: [String] = []
        var i = 0
        while i < arguments.count {
            let argument = arguments[i]
            if argument == "--\(name)", i + 1 < arguments.count {
                values.append(arguments[i + 1])
                i += 2
                continue
            }
            if argument.hasPrefix("--\(name)=") {
                values.append(String(argument.dropFirst(name.count + 3)))
            } else {
                kept.append(argument)
            }
            i += 1
        }
        arguments = kept
        return values
    }

    /// How many times `--name` appears, taken out of the arguments.
    public mutating func extractFlag(named name: String) -> Int {
        let before = arguments.count
        arguments.removeAll { $0 == "--\(name)" }
        return before - arguments.count
    }

    /// What is left: the positional arguments (and any option nobody extracted), then the literals.
    public var remainingArguments: [String] { arguments + literals }

    /// The arguments left that do not look like options, then the literals: the paths most
    /// extensions take.
    public var positionalArguments: [String] { arguments.filter { !$0.hasPrefix("-") || $0 == "-" } + literals }
}
