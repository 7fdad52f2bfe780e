#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// Whether extensions get cgroups of their own (`--extension-cgroups`).
public enum ExtensionCgroupMode: String, Sendable, CaseIterable {
    /// Where the daemon may create cgroups below its own (cgroup v2, writable: systemd's
    /// `Delegate=yes`, or root): one per launch. Elsewhere, the fallback.
    case auto
    /// Never: a process an extension starts in a session of its own outlives it (its output pipes
    /// are still closed when the extension exits).
    case off
}

/// One cgroup (v2) per extension launch, below the daemon's own cgroup, so that everything an
/// extension starts, including a process that calls setsid() to leave its session and process
/// group, is found and killed when the extension exits (DESIGN §6; issue 13 item 10).
///
/// Layout: `<daemon's cgroup>/searchlight-extensions.<daemon pid>/<n>.<label>`. The per-daemon
/// folder keeps concurrent daemons (tests, several users' daemons in one cgroup) apart, and lets a
/// daemon that starts after a crash find and remove what a dead one left. The child moves itself
/// in before exec (writing "0" to the inherited `cgroup.procs`, see CSpawn), so nothing it runs is
/// ever outside. On exit the whole cgroup is killed (`cgroup.kill`, Linux 5.14; before that, frozen
/// and every pid in `cgroup.procs` sent SIGKILL) and removed once empty.
final class ExtensionCgroups: Sendable {
    /// The per-daemon folder.
    let root: String
    /// `cgroup.kill` exists (Linux 5.14).
    let canKillAtOnce: Bool
    private let serial = Atomic<Int>(0)
    /// Set when a child could not move into its cgroup: later launches go without.
    private let disabledReason = Mutex<String?>(nil)
    private let log: Logger
    /// Kills and removals run here, off the reaper threads.
    private let cleanup = DispatchQueue(label: "cgroup-cleanup")

    private init(root: String, canKillAtOnce: Bool, log: Logger) {
        self.root = root
        self.canKillAtOnce = canKillAtOnce
        self.log = log
    }

    /// The cgroups for this daemon, or nil (with the reason logged) when `mode` is off, there is no
    /// cgroup v2 hierarchy, or the daemon's cgroup is not writable.
    static func make(mode: ExtensionCgroupMode, log: Logger, procRoot: String = "/proc") -> ExtensionCgroups? {
        guard mode == .auto else {
            log.notice("extension cgroups off", ["reason": "--extension-cgroups off"])
            return nil
        }
        switch ownCgroup(procRoot: procRoot) {
        case .failure(let reason):
            log.notice("extension cgroups off", ["reason": reason.text])
            return nil
        case .success(let own):
            guard access(own, W_OK) == 0 else {
                log.notice("extension cgroups off", ["reason": "the daemon's cgroup \(own) is not writable (\(String(cString: strerror(errno)))); "
                    + "under systemd, Delegate=yes gives it one"])
                return nil
            }
            removeStale(in: own, log: log)
            let root = own + "/searchlight-extensions.\(getpid())"
            guard mkdir(root, 0o755) == 0 || errno == EEXIST else {
                log.notice("extension cgroups off", ["reason": "cannot create \(root): \(String(cString: strerror(errno)))"])
                return nil
            }
            let killFile = access(root + "/cgroup.kill", F_OK) == 0
            log.notice("extension cgroups on", ["root": root, "kill": killFile ? "cgroup.kill" : "freeze and SIGKILL"])
            return ExtensionCgroups(root: root, canKillAtOnce: killFile, log: log)
        }
    }

    private struct Reason: Error { var text: String }

    /// The daemon's own cgroup v2 folder: the `0::` line of /proc/self/cgroup under the cgroup2
    /// mount of /proc/self/mountinfo.
    private static func ownCgroup(procRoot: String) -> Result<String, Reason> {
        guard let cgroups = try? String(contentsOfFile: procRoot + "/self/cgroup", encoding: .utf8),
              let line = cgroups.split(separator: "\n").first(where: { $0.hasPrefix("0::") }) else {
            return .failure(Reason(text: "the daemon is in no cgroup v2 hierarchy (no 0:: line in /proc/self/cgroup)"))
        }
        let own = String(line.dropFirst(3))
        guard let mounts = try? String(contentsOfFile: procRoot + "/self/mountinfo", encoding: .utf8) else {
            return .failure(Reason(text: "/proc/self/mountinfo cannot be read"))
        }
        for entry in mounts.split(separator: "\n") {
            // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPER"
            let halves = entry.components(separatedBy: " - ")
            guard halves.count == 2, halves[1].hasPrefix("cgroup2 ") else { continue }
            let fields = halves[0].split(separator: " ").map { unescape(String($0)) }
            guard fields.count >= 5 else { continue }
            let (mountRoot, mountPoint) = (fields[3], fields[4])
            var relative = own
            if mountRoot != "/" {
                guard own == mountRoot || own.hasPrefix(mountRoot + "/") else { continue }
                relative = String(own.dropFirst(mountRoot.count))
            }
            let path = (mountPoint == "/" ? "" : mountPoint) + (relative == "/" ? "" : relative)
            return .success(path.isEmpty ? "/" : path)
        }
        return .failure(Reason(text: "no cgroup2 file system is mounted"))
    }

    /// mountinfo writes space, tab, newline and backslash as \ooo.
    private static func unescape(_ field: String) -> String {
        guard field.contains("\\") else { return field }
        var bytes: [UInt8] = []
        var utf8 = Array(field.utf8)[...]
        while let byte = utf8.first {
            if byte == UInt8(ascii: "\\"), utf8.count >= 4,
               let value = UInt8(String(decoding: utf8.dropFirst().prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                utf8 = utf8.dropFirst(4)
            } else {
                bytes.append(byte)
                utf8 = utf8.dropFirst()
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The folders of daemons that are gone (killed, crashed): their extensions are killed and
    /// the folders removed. A folder whose pid runs is another daemon's and is left alone.
    private static func removeStale(in own: String, log: Logger) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: own) else { return }
        for name in names where name.hasPrefix("searchlight-extensions.") {
            guard let pid = Int32(name.dropFirst("searchlight-extensions.".count)), pid != getpid() else { continue }
            if kill(pid, 0) == 0 || errno == EPERM { continue }
            let folder = own + "/" + name
            for child in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] {
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: folder + "/" + child, isDirectory: &isDirectory), isDirectory.boolValue {
                    ExtensionCgroup(path: folder + "/" + child, procs: -1).killAndRemove(atOnce: access(folder + "/" + child + "/cgroup.kill", F_OK) == 0)
                }
            }
            rmdir(folder)
            log.notice("removed the extension cgroups of a daemon that is gone", ["cgroup": folder])
        }
    }

    /// Why cgroups were turned off while running, if they were.
    var disabled: String? { disabledReason.withLock { $0 } }

    /// Later launches go without a cgroup (a child could not move into one).
    func disable(_ reason: String) {
        disabledReason.withLock { $0 = reason }
        log.warning("extension cgroups turned off", ["reason": reason])
    }

    /// A new, empty cgroup for one launch of `label`, with its `cgroup.procs` open for the child;
    /// nil (logged) if it cannot be made.
    func create(label: String) -> ExtensionCgroup? {
        guard disabled == nil else { return nil }
        let n = serial.add(1, ordering: .relaxed).newValue
        let path = root + "/" + String(decoding: "\(n).\(label)".utf8.prefix(200), as: UTF8.self)
        guard mkdir(path, 0o755) == 0 else {
            log.warning("cannot create the extension's cgroup; it runs without", ["label": label, "cgroup": path, "error": String(cString: strerror(errno))])
            return nil
        }
        let procs = open(path + "/cgroup.procs", O_WRONLY | O_CLOEXEC)
        guard procs >= 0 else {
            log.warning("cannot open the extension's cgroup.procs; it runs without", ["label": label, "cgroup": path, "error": String(cString: strerror(errno))])
            rmdir(path)
            return nil
        }
        return ExtensionCgroup(path: path, procs: procs)
    }

    /// The extension of `cgroup` has exited (or never started): everything still in the cgroup is
    /// killed, and the cgroup removed once empty; in the background.
    func retire(_ cgroup: ExtensionCgroup, label: String) {
        let atOnce = canKillAtOnce
        cleanup.async { [log] in
            let killed = cgroup.killAndRemove(atOnce: atOnce)
            if killed > 0 {
                log.notice("killed what the extension left running", ["label": label, "processes": killed, "cgroup": cgroup.path])
            }
        }
    }

    /// The daemon is stopping: kill whatever is left in every launch's cgroup and remove them all.
    func removeAll() {
        cleanup.sync {}
        for name in (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [] {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: root + "/" + name, isDirectory: &isDirectory), isDirectory.boolValue else { continue }
            ExtensionCgroup(path: root + "/" + name, procs: -1).killAndRemove(atOnce: canKillAtOnce)
        }
        rmdir(root)
    }
}

/// One launch's cgroup.
final class ExtensionCgroup: Sendable {
    let path: String
    /// `cgroup.procs`, open for writing: what the child writes "0" to. -1 once closed.
    private let procs: Mutex<Int32>
    /// How long a kill may take to empty the cgroup before the daemon gives up removing it.
    static let emptyTimeout: Double = 5

    init(path: String, procs: Int32) {
        self.path = path
        self.procs = Mutex(procs)
    }

    deinit { closeDescriptor() }

    /// The descriptor to hand to the spawner (nil once closed).
    var procsDescriptor: Int32? { procs.withLock { $0 >= 0 ? $0 : nil } }

    /// After the spawn: the child has moved itself in (or failed to).
    func closeDescriptor() {
        procs.withLock { fd in
            if fd >= 0 { close(fd) }
            fd = -1
        }
    }

    /// The pids in the cgroup now.
    var pids: [pid_t] {
        ((try? String(contentsOfFile: path + "/cgroup.procs", encoding: .utf8)) ?? "").split(separator: "\n").compactMap { pid_t($0) }
    }

    /// Kills everything in the cgroup, waits (bounded) until it is empty and removes it. Returns
    /// how many processes were in it.
    @discardableResult
    func killAndRemove(atOnce: Bool) -> Int {
        closeDescriptor()
        let found = pids.count
        if found > 0 {
            if atOnce && write("1", to: "cgroup.kill") {
                // The kernel kills every process, and any it forks meanwhile.
            } else {
                killOneByOne()
            }
        }
        _ = waitUntilEmpty(timeout: Self.emptyTimeout)
        // Empty as the kernel sees it; rmdir may still race the last exit by a moment.
        for attempt in 0..<50 {
            if rmdir(path) == 0 || errno == ENOENT { break }
            if errno != EBUSY || attempt == 49 { break }
            usleep(20_000)
        }
        return found
    }

    /// Without `cgroup.kill`: frozen (so nothing forks while we look), every pid SIGKILLed, thawed.
    private func killOneByOne() {
        let frozen = write("1", to: "cgroup.freeze")
        for _ in 0..<10 {
            let now = pids
            if now.isEmpty { break }
            for pid in now { kill(pid, SIGKILL) }
            if !frozen { usleep(10_000) }
        }
        if frozen { _ = write("0", to: "cgroup.freeze") }
    }

    /// Waits for `populated 0` in cgroup.events, woken by the kernel's notification (POLLPRI).
    func waitUntilEmpty(timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        let fd = open(path + "/cgroup.events", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return true }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 256)
        while true {
            let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return true }
            if String(decoding: buffer[..<count], as: UTF8.self).contains("populated 0") { return true }
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { return false }
            var pfd = pollfd(fd: fd, events: Int16(POLLPRI), revents: 0)
            // At most 100 ms at a time: the notification is the fast path, not the only one.
            _ = poll(&pfd, 1, Int32(min(remaining, 0.1) * 1000))
        }
    }

    private func write(_ text: String, to file: String) -> Bool {
        let fd = open(path + "/" + file, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return text.withCString { Glibc.write(fd, $0, strlen($0)) } == text.utf8.count
    }
}
