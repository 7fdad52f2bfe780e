/// mdutil's spelling (DESIGN §7), taken when the CLI is invoked through a symlink named `mdutil`.
/// Each form is rewritten into the equivalent `searchlight` command line.
enum Mdutil {
    static let usage = """
        Usage: mdutil -s [BUNDLE]          show status
               mdutil -E BUNDLE            erase an app's indexes
               mdutil -i on|off BUNDLE     turn indexing on or off
               mdutil -cr LABEL|BUNDLE     ask the extension to reindex everything
        Global options: --socket PATH, --json. Every searchlight command works too (mdutil status).
        """

    static func translate(_ arguments: [String]) throws(UsageError) -> [String] {
        // Global options may come first; the mdutil flag is the first other argument.
        guard let at = arguments.firstIndex(where: { $0.hasPrefix("-") && !isGlobal($0) }) ,
              arguments[..<at].allSatisfy({ $0.hasPrefix("-") || isGlobalValue($0, in: arguments) })
        else { return arguments }
        let flag = arguments[at]
        let before = Array(arguments[..<at]), rest = Array(arguments[(at + 1)...])
        // Global options may also follow the operands (`mdutil -cr LABEL --json`).
        let operands = withoutGlobals(rest).count
        switch flag {
        case "-s":
            return before + ["status"] + rest
        case "-E":
            guard operands == 1 else { throw UsageError("-E takes one BUNDLE") }
            return before + ["erase"] + rest
        case "-i":
            guard operands == 2 else { throw UsageError("-i takes on|off and a BUNDLE") }
            return before + ["indexing"] + rest
        case "-cr", "-rc":
            // Waits for the acknowledgement, with progress, as `searchlight reindex LABEL --all` does.
            guard operands == 1 else { throw UsageError("-cr takes one LABEL or BUNDLE") }
            return before + ["reindex"] + rest + ["--all"]
        case "-h", "--help":
            return arguments
        default:
            throw UsageError("unknown option '\(flag)'")
        }
    }

    /// `arguments` without the global options and the PATH after `--socket`.
    private static func withoutGlobals(_ arguments: [String]) -> [String] {
        var out: [String] = []
        var skipValue = false
        for arg in arguments {
            if skipValue {
                skipValue = false
            } else if arg == "--socket" {
                skipValue = true
            } else if !isGlobal(arg) {
                out.append(arg)
            }
        }
        return out
    }

    private static func isGlobal(_ arg: String) -> Bool {
        arg == "--json" || arg == "--socket" || arg.hasPrefix("--socket=")
    }

    /// Whether `arg` is the PATH after a `--socket`.
    private static func isGlobalValue(_ arg: String, in arguments: [String]) -> Bool {
        guard let i = arguments.firstIndex(of: arg), i > 0 else { return false }
        return arguments[i - 1] == "--socket"
    }
}
