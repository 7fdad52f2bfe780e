#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightUnits
@testable import SearchlightSupervisor

/// A root-owned temporary folder (0755) holding a copy of a real binary and a script.
private final class Tree: @unchecked Sendable {
    let path: String

    init() {
        var template = Array("/tmp/sl-prog-XXXXXX".utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        chmod(path, 0o755)
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }

    func file(_ relative: String, _ text: String = "#!/bin/sh\nexit 0\n") throws -> String {
        let file = path + "/" + relative
        try FileManager.default.createDirectory(atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        chmod((file as NSString).deletingLastPathComponent, 0o755)
        try text.write(toFile: file, atomically: false, encoding: .utf8)
        chmod(file, 0o755)
        return file
    }

    func binary(_ relative: String, from source: String = "/usr/bin/true") throws -> String {
        let file = path + "/" + relative
        try FileManager.default.createDirectory(atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        chmod((file as NSString).deletingLastPathComponent, 0o755)
        try FileManager.default.copyItem(atPath: source, toPath: file)
        chmod(file, 0o755)
        return file
    }
}

/// An unprivileged uid with no passwd entry, as in the integration tests' isolation suite.
private let mallory: uid_t = 64_103

@Suite("The program of one launch (system mode)", .enabled(if: getuid() == 0), .onOwnThreads)
struct LaunchProgramTests {
    @Test("at launch, a binary is opened once and checked with fstat; a script is run by its checked physical path")
    func launchProgram() throws {
        let tree = Tree()
        let binary = try tree.binary("bin/indexer")
        try FileManager.default.createSymbolicLink(atPath: tree.path + "/bin/alias", withDestinationPath: "indexer")
        let unit = ExtensionUnit(label: "org.example.x", bundleIdentifier: "org.example.x", path: "/etc/x.plist", executable: tree.path + "/bin/alias")
        let launch = try LaunchProgram(unit: unit, system: true)
        defer { launch.close() }
        #expect(launch.path == binary)
        let fd = try #require(launch.descriptor)
        var st = stat(), expected = stat()
        #expect(fstat(fd, &st) == 0 && stat(binary, &expected) == 0 && st.st_ino == expected.st_ino)
        let script = try tree.file("bin/indexer.sh")
        let scripted = try LaunchProgram(unit: ExtensionUnit(label: "org.example.x", bundleIdentifier: "org.example.x", executable: script), system: true)
        #expect(scripted.descriptor == nil && scripted.path == script)
        // Checked again: made unsafe after the unit loaded, it is refused at launch.
        chown(tree.path + "/bin", mallory, mallory)
        #expect(throws: UnitProblem.self) { try LaunchProgram(unit: unit, system: true) }
    }
}
