#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightUnits
@testable import SearchlightSupervisor

/// What an extension finds in its environment (`ProcessLauncher.spawnConfiguration`): the daemon's
/// socket as `SEARCHLIGHT_SOCKET`, except when a system daemon runs it as root (as an app, root may
/// write to any bundle). Needs a root test process, as the daemon in system mode.
@Suite("An extension's environment", .enabled(if: getuid() == 0), .onOwnThreads)
struct ExtensionEnvironmentTests {
    static let socket = "/run/searchlightd-test.sock"

    static func environment(userName: String?, unitEnvironment: [String: String] = [:], system: Bool = true) throws -> [String: String] {
        let launcher = ProcessLauncher(system: system, cgroups: nil, log: Logger(label: "test", level: .error), daemonSocket: socket)
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

    @Test("an extension a system daemon runs as root, without UserName or with UserName root, does not")
    func root() throws {
        #expect(try Self.environment(userName: nil)["SEARCHLIGHT_SOCKET"] == nil)
        #expect(try Self.environment(userName: "root")["SEARCHLIGHT_SOCKET"] == nil)
    }

    @Test("a user daemon's extension (its own user, root in these tests) gets it")
    func userDaemon() throws {
        #expect(try Self.environment(userName: nil, system: false)["SEARCHLIGHT_SOCKET"] == Self.socket)
    }

    @Test("a unit's own EnvironmentVariables entry is kept, as the administrator wrote it")
    func unitsOwn() throws {
        #expect(try Self.environment(userName: nil, unitEnvironment: ["SEARCHLIGHT_SOCKET": "/x.sock"])["SEARCHLIGHT_SOCKET"] == "/x.sock")
        #expect(try Self.environment(userName: "nobody", unitEnvironment: ["SEARCHLIGHT_SOCKET": "/x.sock"])["SEARCHLIGHT_SOCKET"] == "/x.sock")
    }
}
