/// This extension's own command line. The SDK reads `--label X` and `--socket X` from the same
/// arguments; we skip those pairs and every option we do not know, so that a unit's
/// `ProgramArguments` and a debugging session can each add theirs.
struct ExtensionArguments: Sendable {
    /// The first argument that is not an option (the data path), or nil.
    var path: String?
    /// `--dump`: print the items as JSON lines instead of serving the supervisor.
    var dump = false
    /// Options of this extension that take a value (`valueOptions`), by name.
    var values: [String: String] = [:]

    init(_ arguments: [String], valueOptions: Set<String> = []) {
        let sdkOptions: Set<String> = ["--label", "--socket"]
        var rest = arguments.dropFirst()
        while let argument = rest.popFirst() {
            if argument == "--dump" {
                dump = true
            } else if sdkOptions.contains(argument) {
                _ = rest.popFirst()
            } else if valueOptions.contains(argument) {
                values[argument] = rest.popFirst()
            } else if argument == "--" {
                if path == nil { path = rest.first }
                break
            } else if argument.hasPrefix("-"), argument != "-" {
                continue  // someone else's option
            } else if path == nil {
                path = argument
            }
        }
    }
}
