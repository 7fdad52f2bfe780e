/// A deliberately tiny argument parser, shaped like swift-argument-parser (commands with an
/// abstract, positional arguments, options, flags, `--help` per command) so that switching to the
/// real package later is mechanical. The project takes no package dependencies (DESIGN §1).

/// One named option of a command.
struct OptionSpec: Sendable {
    enum Kind: Sendable {
        /// `--json`: present or not.
        case flag
        /// `--index NAME`: one value; given twice, the last wins.
        case value(String)
        /// `--filter Q`: one value each time; may repeat.
        case repeating(String)
        /// `--identifiers ID...`: every following argument up to the next option
        /// (swift-argument-parser's `.upToNextOption`); may repeat.
        case upToNextOption(String)
    }

    let name: String
    let kind: Kind
    let help: String

    static func flag(_ name: String, _ help: String) -> OptionSpec { OptionSpec(name: name, kind: .flag, help: help) }
    static func value(_ name: String, _ valueName: String, _ help: String) -> OptionSpec {
        OptionSpec(name: name, kind: .value(valueName), help: help)
    }
    static func repeating(_ name: String, _ valueName: String, _ help: String) -> OptionSpec {
        OptionSpec(name: name, kind: .repeating(valueName), help: help)
    }
    static func upToNextOption(_ name: String, _ valueName: String, _ help: String) -> OptionSpec {
        OptionSpec(name: name, kind: .upToNextOption(valueName), help: help)
    }

    var valueName: String? {
        switch kind {
        case .flag: nil
        case .value(let v), .repeating(let v): v
        case .upToNextOption(let v): v + "..."
        }
    }

    var synopsis: String { "--" + name + (valueName.map { " " + $0 } ?? "") }
}

/// One positional argument of a command, in order.
struct PositionalSpec: Sendable {
    let name: String
    let optional: Bool
    let help: String

    static func required(_ name: String, _ help: String) -> PositionalSpec { PositionalSpec(name: name, optional: false, help: help) }
    static func optional(_ name: String, _ help: String) -> PositionalSpec { PositionalSpec(name: name, optional: true, help: help) }
}

/// What a command accepts, and the text of its `--help`.
struct CommandSpec: Sendable {
    let name: String
    let abstract: String
    /// The synopsis after the command name, e.g. `BUNDLE 'QUERY' [--index NAME]`.
    let usage: String
    var positionals: [PositionalSpec] = []
    var options: [OptionSpec] = []
    /// Further paragraphs of `--help`.
    var discussion: String = ""
    /// Added to the error about an unexpected argument (e.g. "quote the text").
    var extraArgumentHint: String = ""

    func option(named name: String) -> OptionSpec? { options.first { $0.name == name } }
}

/// A command line that does not fit the command; exit status 2 with the command's usage.
struct UsageError: Error, Sendable {
    let message: String
    init(_ message: String) { self.message = message }
}

/// The arguments of one command after parsing.
struct ParsedArguments: Sendable {
    let command: String
    var positionals: [String] = []
    /// Values by option name, in the order given; a flag is stored with no values.
    var options: [String: [String]] = [:]

    func flag(_ name: String) -> Bool { options[name] != nil }
    func value(_ name: String) -> String? { options[name]?.last }
    func values(_ name: String) -> [String] { options[name] ?? [] }

    /// An integer option within `range`, or nil when absent.
    func integer(_ name: String, in range: ClosedRange<Int>) throws(UsageError) -> Int? {
        guard let text = value(name) else { return nil }
        guard let n = Int(text), range.contains(n) else {
            let expected = range.upperBound == .max ? "at least \(range.lowerBound)" : "from \(range.lowerBound) to \(range.upperBound)"
            throw UsageError("--\(name) must be an integer \(expected), not '\(text)'")
        }
        return n
    }

    /// A duration option in seconds (DESIGN §7: durations given as flags are in seconds).
    /// A duration flag: positive seconds up to `max` (a week by default: `Duration` traps on
    /// values like 1e308, and nothing waits that long).
    func seconds(_ name: String, max: Double = 7 * 86400) throws(UsageError) -> Double? {
        guard let text = value(name) else { return nil }
        guard let s = Double(text), s.isFinite, s >= 0.001, s <= max else {
            throw UsageError("--\(name) must be a number of seconds from 0.001 to \(Int(max)), not '\(text)'")
        }
        return s
    }
}

enum ArgumentParser {
    /// Parses `arguments` (those after the command name) against `spec`. `--name=value` and
    /// `--name value` both work; `--` ends the options.
    static func parse(_ arguments: [String], for spec: CommandSpec) throws(UsageError) -> ParsedArguments {
        var parsed = ParsedArguments(command: spec.name)
        var i = 0
        var optionsEnded = false
        while i < arguments.count {
            let arg = arguments[i]
            i += 1
            if optionsEnded || !arg.hasPrefix("-") || arg == "-" {
                parsed.positionals.append(arg)
                continue
            }
            if arg == "--" {
                optionsEnded = true
                continue
            }
            guard arg.hasPrefix("--") else {
                throw UsageError("unknown option '\(arg)' for '\(spec.name)'; options are spelled --name")
            }
            var name = String(arg.dropFirst(2))
            var inline: String?
            if let eq = name.firstIndex(of: "=") {
                inline = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            guard let option = spec.option(named: name) else {
                throw UsageError("unknown option '--\(name)' for '\(spec.name)'")
            }
            switch option.kind {
            case .flag:
                if inline != nil { throw UsageError("--\(name) is a flag and takes no value") }
                parsed.options[name, default: []] += []
            case .value(let valueName), .repeating(let valueName):
                let value: String
                if let inline {
                    value = inline
                } else {
                    guard i < arguments.count, !isOption(arguments[i]) else {
                        throw UsageError("--\(name) needs a value (\(valueName))")
                    }
                    value = arguments[i]
                    i += 1
                }
                if case .value = option.kind { parsed.options[name] = [value] } else { parsed.options[name, default: []].append(value) }
            case .upToNextOption(let valueName):
                var values = inline.map { [$0] } ?? []
                while i < arguments.count, !isOption(arguments[i]) {
                    values.append(arguments[i])
                    i += 1
                }
                guard !values.isEmpty else { throw UsageError("--\(name) needs at least one value (\(valueName)...)") }
                parsed.options[name, default: []] += values
            }
        }
        let required = spec.positionals.filter { !$0.optional }.count
        if parsed.positionals.count > spec.positionals.count {
            let extra = parsed.positionals[spec.positionals.count]
            throw UsageError("unexpected argument '\(extra)' for '\(spec.name)'" + spec.extraArgumentHint)
        }
        if parsed.positionals.count < required {
            // Name the first required argument that is missing, counting from the end of those given.
            let missing = spec.positionals.filter { !$0.optional }[parsed.positionals.count...].first!
            throw UsageError("missing \(missing.name) for '\(spec.name)'")
        }
        return parsed
    }

    static func isOption(_ arg: String) -> Bool { arg.hasPrefix("-") && arg != "-" }
}

// MARK: - Help text

extension CommandSpec {
    func usageLine(program: String) -> String { "Usage: \(program) \(name) \(usage)" }

    func helpText(program: String) -> String {
        var lines = ["\(program) \(name): \(abstract)", "", usageLine(program: program)]
        if !positionals.isEmpty {
            lines += ["", "Arguments:"]
            lines += Self.rows(positionals.map { ($0.name, $0.help) })
        }
        if !options.isEmpty {
            lines += ["", "Options:"]
            lines += Self.rows(options.map { ($0.synopsis, $0.help) })
        }
        lines += ["", "Global options:"]
        lines += Self.rows(GlobalOptions.help)
        if !discussion.isEmpty { lines += ["", discussion] }
        return lines.joined(separator: "\n")
    }

    static func rows(_ pairs: [(String, String)]) -> [String] {
        let width = min(pairs.map(\.0.count).max() ?? 0, 28)
        return pairs.map { "  " + $0.0.padding(toLength: max(width, $0.0.count), withPad: " ", startingAt: 0) + "  " + $0.1 }
    }
}
