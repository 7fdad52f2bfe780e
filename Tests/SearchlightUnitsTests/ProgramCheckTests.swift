#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
@testable import SearchlightUnits

/// A root-owned temporary folder (0755) for program-path checks, removed afterwards.
private final class Tree: @unchecked Sendable {
    let path: String

    init() {
        var template = Array("/tmp/sl-prog-XXXXXX".utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        chmod(path, 0o755)
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }

    /// Makes the folders of `relative` (0755, root) and a file there with `text`, `mode`.
    @discardableResult
    func file(_ relative: String, _ text: String = "#!/bin/sh\nexit 0\n", mode: mode_t = 0o755) throws -> String {
        let file = path + "/" + relative
        try folder((relative as NSString).deletingLastPathComponent)
        try text.write(toFile: file, atomically: false, encoding: .utf8)
        chmod(file, mode)
        return file
    }

    @discardableResult
    func folder(_ relative: String) throws -> String {
        let folder = relative.isEmpty ? path : path + "/" + relative
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        chmod(folder, 0o755)
        return folder
    }

    /// A copy of a real binary (an ELF file, not a script).
    @discardableResult
    func binary(_ relative: String, from source: String = "/usr/bin/true") throws -> String {
        let file = path + "/" + relative
        try folder((relative as NSString).deletingLastPathComponent)
        try FileManager.default.copyItem(atPath: source, toPath: file)
        chmod(file, 0o755)
        return file
    }
}

/// An unprivileged uid with no passwd entry, as in the integration tests' isolation suite.
private let mallory: uid_t = 64_103

private func check(_ program: String, system: Bool = true, userName: String? = nil, searchPath: String? = nil) -> Result<CheckedProgram, UnitProblem> {
    Result { () throws(UnitProblem) in
        try UnitFiles.checkExecutable(program, named: "Program", system: system, userName: userName, searchPath: searchPath,
                                      file: "/etc/searchlight/extensions.d/org.example.x.plist")
    }
}

private func problem(_ program: String, system: Bool = true, userName: String? = nil, searchPath: String? = nil) -> UnitProblem? {
    if case .failure(let p) = check(program, system: system, userName: userName, searchPath: searchPath) { return p }
    return nil
}

@Suite("Unit program path checks (system mode)", .enabled(if: getuid() == 0), .onOwnThreads)
struct ProgramCheckTests {
    @Test("root-owned 0755 folders and a sticky root-owned folder like /tmp are accepted")
    func safePathsAccepted() throws {
        let tree = Tree()
        let program = try tree.file("opt/ext/bin/indexer")
        #expect(try check(program).get().path == program)
        #expect(try check(program).get().isScript)
        try tree.folder("sticky")
        chmod(tree.path + "/sticky", 0o1777)
        let inSticky = try tree.file("sticky/indexer")
        #expect(throws: Never.self) { try check(inSticky).get() }
    }

    @Test("a program in a root-owned folder its group may write (root:group 0775) is refused, naming the folder and the fix")
    func groupWritableFolder() throws {
        let tree = Tree()
        let program = try tree.file("shared/indexer")
        chown(tree.path + "/shared", 0, mallory)
        chmod(tree.path + "/shared", 0o775)
        let p = try #require(problem(program))
        #expect(p.key == "Program" && p.file == "/etc/searchlight/extensions.d/org.example.x.plist")
        #expect(p.message.hasPrefix("the folder \(tree.path)/shared of Program \(program) is writable by group or others (mode 0775, group "), "\(p.message)")
        #expect(p.fix.hasPrefix("run chmod go-w \(tree.path)/shared"))
        #expect(problem(program, system: false) == nil)
    }

    @Test("a program below a folder an unprivileged uid owns is refused, however deep")
    func folderOwnedByUser() throws {
        let tree = Tree()
        let program = try tree.file("home/mallory/ext/bin/indexer")
        chown(tree.path + "/home/mallory", mallory, mallory)
        let p = try #require(problem(program))
        #expect(p.message.hasPrefix("the folder \(tree.path)/home/mallory of Program \(program) is owned by uid \(mallory)"), "\(p.message)")
        #expect(p.message.contains("system mode runs as root"))
        #expect(p.fix.hasPrefix("run chown root \(tree.path)/home/mallory"))
    }

    @Test("the unit's own user may own the folders when the unit runs as that user, and only then",
          .enabled(if: getpwnam("nobody") != nil))
    func unitUserOwnsFolder() throws {
        let tree = Tree()
        let program = try tree.file("nobody/indexer")
        let nobody = getpwnam("nobody")!.pointee.pw_uid
        chown(tree.path + "/nobody", nobody, nobody)
        #expect(throws: Never.self) { try check(program, userName: "nobody").get() }
        #expect(problem(program)?.message.contains("is owned by uid \(nobody) (nobody)") == true)
    }

    @Test("a symbolic link through a folder an unprivileged uid owns is refused, and the message shows the link")
    func symlinkThroughUnsafeFolder() throws {
        let tree = Tree()
        try tree.file("mallory/sub/indexer")
        chown(tree.path + "/mallory", mallory, mallory)
        try tree.folder("bin")
        // A root-owned link in a safe folder, whose target passes through Mallory's folder.
        try FileManager.default.createSymbolicLink(atPath: tree.path + "/bin/link", withDestinationPath: "../mallory/sub")
        let program = tree.path + "/bin/link/indexer"
        let p = try #require(problem(program))
        #expect(p.message.contains("the folder \(tree.path)/mallory of Program \(program) is owned by uid \(mallory)"), "\(p.message)")
        #expect(p.message.contains("reached through the symbolic link \(tree.path)/bin/link → ../mallory/sub"), "\(p.message)")
        // And the other way round: a link that Mallory could replace, to a safe program.
        let safe = try tree.file("safe/indexer")
        try FileManager.default.createSymbolicLink(atPath: tree.path + "/mallory/link", withDestinationPath: safe)
        #expect(problem(tree.path + "/mallory/link")?.message.contains("the folder \(tree.path)/mallory of Program") == true)
    }

    @Test("a program owned by, or writable by, another user is refused")
    func programItself() throws {
        let tree = Tree()
        let owned = try tree.file("a/indexer")
        chown(owned, mallory, mallory)
        #expect(problem(owned)?.message.hasPrefix("Program \(owned) is owned by uid \(mallory)") == true)
        let writable = try tree.file("b/indexer", mode: 0o775)
        let p = try #require(problem(writable))
        #expect(p.message.contains("is writable by group or others") && p.fix == "run chmod go-w \(writable)")
    }

    @Test("a script's interpreter is checked like the program")
    func interpreterChecked() throws {
        let tree = Tree()
        let interpreter = try tree.binary("mallory/bin/python")
        chown(tree.path + "/mallory", mallory, mallory)
        let script = try tree.file("ext/indexer.py", "#!\(interpreter) -u\nprint(1)\n")
        let p = try #require(problem(script))
        #expect(p.message.contains("the folder \(tree.path)/mallory of the interpreter \(interpreter) (the #! line of Program \(script))"), "\(p.message)")
        let relative = try tree.file("ext/relative.py", "#!python3\n")
        #expect(problem(relative)?.message.contains("relative interpreter python3") == true)
    }

    @Test("#!/usr/bin/env NAME: every folder of the PATH searched up to NAME must be safe",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/env")))
    func envSearchChecked() throws {
        let tree = Tree()
        let script = try tree.file("ext/indexer", "#!/usr/bin/env -S mytool --flag\n")
        try tree.binary("tools/mytool")
        try tree.folder("writable")
        chmod(tree.path + "/writable", 0o777)
        #expect(throws: Never.self) { try check(script, searchPath: "\(tree.path)/tools:/usr/bin").get() }
        // A folder anyone may write, searched first: anyone could put a mytool there.
        let p = try #require(problem(script, searchPath: "\(tree.path)/writable:\(tree.path)/tools"))
        #expect(p.message.contains("\(tree.path)/writable on the PATH that /usr/bin/env searches for mytool"), "\(p.message)")
        // A missing folder in a safe place is fine (nobody else can create it).
        #expect(throws: Never.self) { try check(script, searchPath: "\(tree.path)/missing:\(tree.path)/tools").get() }
        #expect(problem(script, searchPath: "/nonexistent-sl")?.message.contains("finds no mytool") == true)
        #expect(problem(script, searchPath: "relative:\(tree.path)/tools")?.message.contains("relative entry") == true)
        #expect(ProgramCheck.envCommand("-i FOO=1 -u BAR python3 -u") == "python3")
    }
}
