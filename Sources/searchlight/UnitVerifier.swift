#if canImport(Glibc)
import Glibc
#endif
import SearchlightKit
import SearchlightUnits

/// `searchlight units --verify FILE...`: checks unit files with the daemon's own parser, offline,
/// so an author can fix a unit before installing it. As root it applies the system-mode rules
/// (files and programs not writable by others, UserName and GroupName exist).
enum UnitVerifier {
    static func verify(_ files: [String], json: Bool) throws {
        let system = getuid() == 0
        var failed = 0
        for file in files {
            switch UnitParser.parse(contentsOf: file, system: system) {
            case .success(let unit):
                if json {
                    Console.out([
                        "file": .string(file), "ok": true, "label": .string(unit.label),
                        "bundleIdentifier": .string(unit.bundleIdentifier), "executable": .string(unit.executable),
                    ])
                } else {
                    Console.out("\(file): ok (\(unit.label) for \(unit.bundleIdentifier))")
                }
            case .failure(let problem):
                failed += 1
                if json {
                    Console.out([
                        "file": .string(file), "ok": false, "key": problem.key.map(JSONValue.string) ?? .null,
                        "message": .string(problem.message), "fix": .string(problem.fix),
                    ])
                } else {
                    Console.out(problem.description)
                }
            }
        }
        if failed > 0 {
            if !json { Console.error("\(failed) of \(files.count) unit file\(files.count == 1 ? " has a problem" : "s have problems")") }
            throw ExitStatus.failure
        }
    }
}
