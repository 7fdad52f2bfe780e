#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightUnits
@testable import SearchlightSupervisor

/// What an extension finds in its environment (`ProcessLauncher.spawnConfiguration`): the daemon's
/// socket as `SEARCHLIGHT_SOCKET` only when it does not run as root (as an app, root may write to
/// any bundle). Needs a root test process, as the daemon in system mode.
@Suite("An extension's environment", .enabled(if: getuid() == 0), .onOwnThreads)
struct ExtensionEnvironmentTests {
    static let socket = "/run/searchlightd-test.sock"

    static func environment(userName: String?, unitEnvironment: [String: String] = [:]) throws -> [String: String] {
        let launcher = ProcessLauncher(system: true, cgroups: nil, log: Logger(label: "test", level: .error), daemonSocket: socket)
        var unit = ExtensionUnit(label: "org.example.env", bundleIdentifier: "org.example.env", executable: "/bin/true")
        unit.userName = userName
        unit.environment = unitEnvironment
        return try launcher.spawnConfiguration(unit).environment
    }

    @Test("an extension running as another user gets the daemon's socket")
    func otherUser() throws {
        let env = try Self.environment(userName: "nobody")
        #expect(env["SEARCHLIGHT_SOCKET"] == Self.socket)
        #expect(env["USER"] == "nobody")
    }

    @Test("an extension running as root, without UserName or with UserName root, does not")
    func root() throws {
        #expect(try Self.environment(userName: nil)["SEARCHLIGHT_SOCKET"] == nil)
        #expect(try Self.environment(userName: "root")["SEARCHLIGHT_SOCKET"] == nil)
    }

    @Test("a unit's own EnvironmentVariables entry is kept, as the administrator wrote it")
    func unitsOwn() throws {
        #expect(try Self.environment(userName: nil, unitEnvironment: ["SEARCHLIGHT_SOCKET": "/x.sock"])["SEARCHLIGHT_SOCKET"] == "/x.sock")
        #expect(try Self.environment(userName: "nobody", unitEnvironment: ["SEARCHLIGHT_SOCKET": "/x.sock"])["SEARCHLIGHT_SOCKET"] == "/x.sock")
    }
}
