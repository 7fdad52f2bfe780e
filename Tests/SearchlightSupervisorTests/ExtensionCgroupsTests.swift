#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
@testable import SearchlightSupervisor

/// Whether this process may make cgroups below its own (cgroup v2, writable): as root here.
private let cgroupsUsable: Bool = {
    guard getuid() == 0, let cgroups = ExtensionCgroups.make(mode: .auto, log: Logger(label: "probe", level: .error)) else { return false }
    cgroups.removeAll()
    return true
}()

/// Running (not a zombie, not gone).
private func alive(_ pid: pid_t) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return false }
    let state = statFields(stat).first ?? ""
    return state != "Z" && state != "X"
}

@Suite("Extension cgroups", .serialized, .enabled(if: cgroupsUsable), .onOwnThreads)
struct ExtensionCgroupsTests {
    /// Starts `sh` in a new cgroup; it starts a grandchild in a session of its own, then both
    /// sleep. Returns the cgroup and both pids once the grandchild has reported itself.
    func startEscaping(in cgroups: ExtensionCgroups) async throws -> (ExtensionCgroup, Started, [pid_t]) {
        let cgroup = try #require(cgroups.create(label: "org.example.test"))
        var config = sh("setsid sh -c 'echo $$; exec sleep 300' & exec sleep 300")
        config.cgroupProcsDescriptor = cgroup.procsDescriptor
        let started = try Started(config)
        cgroup.closeDescriptor()
        let deadline = Date().addingTimeInterval(10)
        while started.stdout.all.isEmpty, Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
        let grandchild = try #require(started.stdout.all.first.flatMap { pid_t($0) })
        return (cgroup, started, [started.child.pid, grandchild])
    }

    @Test("the child moves itself into its cgroup before exec, and what it starts stays there, even in a session of its own")
    func childInCgroup() async throws {
        let cgroups = try #require(ExtensionCgroups.make(mode: .auto, log: Logger(label: "test", level: .error)))
        defer { cgroups.removeAll() }
        let (cgroup, started, pids) = try await startEscaping(in: cgroups)
        #expect(Set(cgroup.pids) == Set(pids))
        let own = try String(contentsOfFile: "/proc/\(pids[1])/stat", encoding: .utf8)
        #expect(statFields(own)[3] == "\(pids[1])", "the grandchild leads its own session")
        #expect(cgroup.killAndRemove(atOnce: true) == 2)
        #expect(try await started.finish() == .signaled(SIGKILL, coreDumped: false))
        #expect(!pids.contains(where: alive))
        #expect(!FileManager.default.fileExists(atPath: cgroup.path))
    }

    @Test("without cgroup.kill (before Linux 5.14), the cgroup is frozen and every process in it killed")
    func killOneByOne() async throws {
        let cgroups = try #require(ExtensionCgroups.make(mode: .auto, log: Logger(label: "test", level: .error)))
        defer { cgroups.removeAll() }
        let (cgroup, started, pids) = try await startEscaping(in: cgroups)
        #expect(cgroup.killAndRemove(atOnce: false) == 2)
        _ = try await started.finish()
        #expect(!pids.contains(where: alive))
        #expect(!FileManager.default.fileExists(atPath: cgroup.path))
    }

    /// A cgroup of this test's own below the test process's, and a /proc root whose `self/cgroup`
    /// names it: the daemons made with it keep their trees there. Every daemon the other suites
    /// start (and other test processes on the machine) shares the test process's cgroup and, at
    /// its start, rightly removes there any tree whose daemon is gone, so a "stale" tree this test
    /// makes in the shared cgroup could vanish before its process moved in (ENODEV, seen under load).
    struct PrivateParent {
        let path: String
        let procRoot: String

        init() throws {
            let probe = try #require(ExtensionCgroups.make(mode: .auto, log: Logger(label: "test", level: .error)))
            let shared = (probe.root as NSString).deletingLastPathComponent
            probe.removeAll()
            let name = "searchlight-tests.\(getpid()).\(UUID().uuidString.prefix(8))"
            path = shared + "/" + name
            try #require(mkdir(path, 0o755) == 0, "mkdir \(path): \(String(cString: strerror(errno)))")
            let own = try #require(try String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8)
                .split(separator: "\n").first(where: { $0.hasPrefix("0::") }))
            procRoot = NSTemporaryDirectory() + name
            try FileManager.default.createDirectory(atPath: procRoot + "/self", withIntermediateDirectories: true)
            try ((own.hasSuffix("/") ? String(own) : own + "/") + name + "\n").write(toFile: procRoot + "/self/cgroup", atomically: true, encoding: .utf8)
            try String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8).write(toFile: procRoot + "/self/mountinfo", atomically: true, encoding: .utf8)
        }

        func make() -> ExtensionCgroups? {
            ExtensionCgroups.make(mode: .auto, log: Logger(label: "test", level: .error), procRoot: procRoot)
        }

        func remove() {
            rmdir(path)
            try? FileManager.default.removeItem(atPath: procRoot)
        }
    }

    @Test("off means no cgroups; at stop the daemon's tree is removed, and a tree left by a daemon that is gone is removed at the next start")
    func lifecycle() async throws {
        #expect(ExtensionCgroups.make(mode: .off, log: Logger(label: "test", level: .error)) == nil)
        let parent = try PrivateParent()
        defer { parent.remove() }
        let cgroups = try #require(parent.make())
        #expect((cgroups.root as NSString).deletingLastPathComponent == parent.path)
        // A tree as a killed daemon leaves it: its pid is gone, a process still runs in it.
        let stale = parent.path + "/searchlight-extensions.\(Int32.max - 7)"
        #expect(mkdir(stale, 0o755) == 0 && mkdir(stale + "/1.org.example.gone", 0o755) == 0)
        // Another daemon starting now, in the test process's cgroup, leaves this tree alone.
        ExtensionCgroups.make(mode: .auto, log: Logger(label: "test", level: .error))?.removeAll()
        let procs = open(stale + "/1.org.example.gone/cgroup.procs", O_WRONLY | O_CLOEXEC)
        var config = sh("exec sleep 300")
        config.cgroupProcsDescriptor = procs
        let leftover = try Started(config)
        close(procs)
        let again = try #require(parent.make())
        #expect(!FileManager.default.fileExists(atPath: stale))
        #expect(try await leftover.finish() == .signaled(SIGKILL, coreDumped: false))
        // Ours (the same pid) is kept; at stop it goes.
        #expect(again.root == cgroups.root && FileManager.default.fileExists(atPath: cgroups.root))
        _ = again.create(label: "org.example.x")
        cgroups.removeAll()
        #expect(!FileManager.default.fileExists(atPath: cgroups.root))
    }
}
