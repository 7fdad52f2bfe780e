#if canImport(Glibc)
import Glibc
#endif
import CSpawn
import Foundation
import SearchlightWire
import Synchronization

/// A resource limit of `setrlimit(2)`, named as in launchd's `SoftResourceLimits` and
/// `HardResourceLimits`.
public enum ResourceLimit: String, CaseIterable, Sendable {
    case cpu = "CPU"
    case data = "Data"
    case fileSize = "FileSize"
    case numberOfFiles = "NumberOfFiles"
    case numberOfProcesses = "NumberOfProcesses"
    case stack = "Stack"
    case core = "Core"

    /// The RLIMIT_* number.
    var resource: Int32 {
        let resource = switch self {
        case .cpu: RLIMIT_CPU
        case .data: RLIMIT_DATA
        case .fileSize: RLIMIT_FSIZE
        case .numberOfFiles: RLIMIT_NOFILE
        case .numberOfProcesses: __RLIMIT_NPROC  // RLIMIT_NPROC is a macro Swift does not import
        case .stack: RLIMIT_STACK
        case .core: RLIMIT_CORE
        }
        return Int32(resource.rawValue)
    }
}

/// What to start and how: the program, its argv and environment, and the settings the child takes
/// on before exec (DESIGN §5). Shaped like swift-subprocess's `Configuration`.
public struct SpawnConfiguration: Sendable {
    /// The program to execute; an absolute path (no `PATH` search is done).
    public var executable: String
    /// The full argv, argv[0] included.
    public var arguments: [String]
    /// The complete environment of the child: nothing of the daemon's is inherited.
    public var environment: [String: String]
    /// The directory to start in; nil keeps the daemon's.
    public var workingDirectory: String?
    /// The file mode creation mask; nil keeps the daemon's.
    public var umask: mode_t?
    /// The nice value, -20...19; nil keeps the daemon's.
    public var nice: Int32?
    /// true: the idle I/O scheduling class; false: best-effort; nil keeps the daemon's.
    public var lowPriorityIO: Bool?
    /// Soft limits. A limit given only here keeps the daemon's hard limit; a soft limit above the
    /// hard one is lowered to it. `UInt64.max` is unlimited.
    public var softLimits: [ResourceLimit: UInt64]
    /// Hard limits. A limit given only here keeps the daemon's soft limit, lowered to it if needed.
    public var hardLimits: [ResourceLimit: UInt64]
    /// The identity to run as, with the supplementary groups (empty: none); nil keeps the daemon's.
    /// Changing it needs the daemon to run as root.
    public var user: (uid: uid_t, gid: gid_t, groups: [gid_t])?
    /// Files for stdout / stderr, opened in the child after the identity change (with the rights
    /// of `user`, not the daemon's), appended to, never through a symbolic link, and without
    /// blocking on a FIFO that has no reader. A path replaces the descriptor given to `spawn`.
    public var standardOutputPath: String?
    public var standardErrorPath: String?
    /// When set, the program is executed through this descriptor (`execveat` with
    /// `AT_EMPTY_PATH`), so that exactly the file it was opened on runs, whatever is at
    /// `executable` by then; `executable` is only named in errors. The caller keeps and closes it.
    /// Not for `#!` scripts: the kernel hands the interpreter `/dev/fd/N`, which the close-on-exec
    /// descriptor no longer is (the exec fails with ENOENT).
    public var executableDescriptor: Int32?
    /// An open `cgroup.procs` (the caller keeps and closes it): the child moves itself into that
    /// cgroup first thing, so that everything it ever starts stays in it.
    public var cgroupProcsDescriptor: Int32?

    /// A configuration that runs `executable` with `arguments` (by default just the executable as
    /// argv[0]) and `environment`, everything else kept as the daemon has it.
    public init(
        executable: String, arguments: [String]? = nil, environment: [String: String] = [:],
        workingDirectory: String? = nil, umask: mode_t? = nil, nice: Int32? = nil,
        lowPriorityIO: Bool? = nil, softLimits: [ResourceLimit: UInt64] = [:],
        hardLimits: [ResourceLimit: UInt64] = [:], user: (uid: uid_t, gid: gid_t, groups: [gid_t])? = nil
    ) {
        self.executable = executable
        self.arguments = arguments ?? [executable]
        self.environment = environment
        self.workingDirectory = workingDirectory
        self.umask = umask
        self.nice = nice
        self.lowPriorityIO = lowPriorityIO
        self.softLimits = softLimits
        self.hardLimits = hardLimits
        self.user = user
    }
}

/// A launch that failed: the step of the child's set-up that failed, its errno, and which
/// executable, described with the unit key to check.
public struct SpawnError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The step that failed, named after its system call (or the unit key it serves).
    public enum Step: String, Sendable {
        case arguments, devNull = "open /dev/null", pipe, fork, dup, setsid
        case setpriority, ioprio, setrlimit, setgroups, setgid, setuid, chdir, exec
        case cgroup = "move into its cgroup"
        case standardOutPath = "open StandardOutPath", standardErrorPath = "open StandardErrorPath"
    }

    /// Which step failed.
    public var step: Step
    /// The errno of that step.
    public var errno: Int32
    /// The program that was to be started.
    public var executable: String
    /// For `.setrlimit`, the limit that was refused.
    public var limit: ResourceLimit?
    /// For `.standardOutPath` / `.standardErrorPath`, the file.
    public var path: String?

    public var description: String {
        let verb = step == .exec ? "cannot execute" : "cannot start"
        let what = limit.map { "\(step.rawValue) \($0.rawValue)" } ?? step.rawValue + (path.map { " \($0)" } ?? "")
        return "\(verb) \(executable): \(String(cString: strerror(errno))) (\(what)); \(fix)"
    }

    private var fix: String {
        switch step {
        case .exec where errno == EACCES:
            "check that the extension's user may execute it, and Program in the unit"
        case .exec where errno == ENOEXEC:
            "it is not an executable for this system; check Program in the unit"
        case .exec: "check Program in the unit"
        case .arguments:
            "argv is empty, an argument or variable contains a NUL byte, or a variable name is empty or "
                + "contains '='; "
                + "check ProgramArguments and EnvironmentVariables in the unit"
        case .chdir: "check WorkingDirectory in the unit"
        case .setpriority, .ioprio:
            "check Nice, LowPriorityIO and ProcessType in the unit (raising a priority needs root)"
        case .setrlimit:
            "check SoftResourceLimits and HardResourceLimits in the unit (raising a hard limit needs root)"
        case .setgroups, .setgid, .setuid:
            "check UserName and GroupName in the unit (changing user needs the daemon to run as root)"
        case .standardOutPath, .standardErrorPath:
            outputFix
        case .cgroup:
            "the daemon's cgroup does not accept the extension; start searchlightd with --extension-cgroups off, "
                + "or give it a delegated cgroup (Delegate=yes in its systemd unit)"
        case .devNull, .pipe, .fork, .dup, .setsid:
            "the daemon is short of processes or file descriptors; check its limits"
        }
    }

    /// The output files are opened as the extension's user, never through a symbolic link, and
    /// never waiting for a FIFO's reader.
    private var outputFix: String {
        let key = step == .standardOutPath ? "StandardOutPath" : "StandardErrorPath"
        switch errno {
        case ELOOP:
            return "\(key) is a symbolic link, which is never followed; point \(key) at the file itself"
        case ENXIO:
            return "\(key) is a FIFO with no reader; start its reader first, or point \(key) at a regular file"
        case EACCES, EPERM, EROFS:
            return "the extension's user (UserName) may not create or write it; create the file owned by that user "
                + "(install -o USER -m 0640 /dev/null FILE), or choose a folder that user may write"
        case ENOENT:
            return "its folder does not exist; create it, or fix \(key) in the unit"
        default:
            return "check \(key) in the unit"
        }
    }

    static func from(_ failure: sl_spawn_failure, executable: String, outputs: (String?, String?) = (nil, nil)) -> SpawnError {
        let steps: [Int32: Step] = [
            SL_STEP_PIPE: .pipe, SL_STEP_FORK: .fork, SL_STEP_DUP: .dup, SL_STEP_SETSID: .setsid,
            SL_STEP_SETPRIORITY: .setpriority, SL_STEP_IOPRIO: .ioprio, SL_STEP_SETRLIMIT: .setrlimit,
            SL_STEP_SETGROUPS: .setgroups, SL_STEP_SETGID: .setgid, SL_STEP_SETUID: .setuid,
            SL_STEP_CHDIR: .chdir, SL_STEP_EXEC: .exec, SL_STEP_CGROUP: .cgroup,
            SL_STEP_STDOUT_PATH: .standardOutPath, SL_STEP_STDERR_PATH: .standardErrorPath,
        ]
        let step = steps[failure.step] ?? .exec
        let limit = step == .setrlimit
            ? ResourceLimit.allCases.first { $0.resource == failure.detail } : nil
        let path = step == .standardOutPath ? outputs.0 : step == .standardErrorPath ? outputs.1 : nil
        return SpawnError(step: step, errno: failure.error, executable: executable, limit: limit, path: path)
    }
}

/// Starts extension processes and carries their output to the log.
public enum ProcessSpawner {
    /// Starts `config.executable` with `extensionSocket` as fd 3, stdin from /dev/null, and
    /// `stdout`/`stderr` as fds 1 and 2 (or the configured output files); every other descriptor
    /// of the daemon is closed in the child, its signal mask is empty and every signal has its
    /// default disposition, and it leads a new session (and its own process group, the pid).
    /// Returns once the program is executing.
    ///
    /// The descriptors stay the caller's: close the child's ends after this returns (the write end
    /// of a `LineReader` in particular, or its end never comes), with close(2) and not shutdown(2),
    /// which would cut the child's copy of the socket too.
    public static func spawn(
        _ config: SpawnConfiguration, extensionSocket: Int32, stdout: Int32, stderr: Int32
    ) throws(SpawnError) -> ChildProcess {
        // fork copies the page tables, and the report pipe is read until the child's exec.
        BlockingCheck.blocking("ProcessSpawner.spawn")
        let exe = config.executable
        guard isValid(config) else { throw SpawnError(step: .arguments, errno: EINVAL, executable: exe) }
        let devNull = open("/dev/null", O_RDONLY | O_CLOEXEC)
        guard devNull >= 0 else { throw SpawnError(step: .devNull, errno: Glibc.errno, executable: exe) }
        defer { close(devNull) }

        let environment = config.environment.map { "\($0.key)=\($0.value)" }.sorted()
        let limits = resolvedLimits(soft: config.softLimits, hard: config.hardLimits)
        let groups = config.user?.groups ?? []
        let ioClass = config.lowPriorityIO.map { $0 ? SL_IOPRIO_CLASS_IDLE : SL_IOPRIO_CLASS_BE } ?? -1
        var pid: pid_t = 0
        var failure = sl_spawn_failure()
        let result = withCStrings(config.arguments) { argv in
            withCStrings(environment) { envp in
                withOptionalCString(config.workingDirectory) { cwd in
                    withOptionalCString(config.standardOutputPath) { outPath in
                        withOptionalCString(config.standardErrorPath) { errPath in
                            limits.withUnsafeBufferPointer { limits in
                                groups.withUnsafeBufferPointer { groups in
                                    exe.withCString { path in
                                        var request = sl_spawn_request()
                                        request.path = path
                                        request.exec_fd = config.executableDescriptor ?? -1
                                        request.argv = argv
                                        request.envp = envp
                                        request.cwd = cwd
                                        request.umask_value = config.umask.map { Int32($0) } ?? -1
                                        request.nice_value = config.nice ?? Int32.min
                                        request.io_class = ioClass
                                        request.limits = limits.baseAddress
                                        request.nlimits = Int32(limits.count)
                                        request.uid = config.user.map { Int64($0.uid) } ?? -1
                                        request.gid = config.user.map { Int64($0.gid) } ?? -1
                                        request.groups = groups.baseAddress
                                        request.ngroups = Int32(groups.count)
                                        request.stdin_fd = devNull
                                        request.stdout_fd = config.standardOutputPath == nil ? stdout : -1
                                        request.stderr_fd = config.standardErrorPath == nil ? stderr : -1
                                        request.ext_fd = extensionSocket
                                        request.stdout_path = outPath
                                        request.stderr_path = errPath
                                        request.cgroup_procs_fd = config.cgroupProcsDescriptor ?? -1
                                        return sl_spawn(&request, &pid, &failure)
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        guard result == 0 else {
            throw SpawnError.from(failure, executable: exe, outputs: (config.standardOutputPath, config.standardErrorPath))
        }
        return ChildProcess(startedWith: pid)
    }

    /// A pipe whose lines (as written to `writeFD`) go to `onLine`, one call each, on a thread
    /// named after `name`: how an extension's output reaches the log tagged with its label.
    public static func lineReader(
        name: String, onLine: @escaping @Sendable (String) -> Void
    ) throws(SystemError) -> LineReader {
        var fds: [Int32] = [-1, -1]
        guard sl_pipe_cloexec(&fds) == 0 else { throw SystemError("pipe2") }
        let wake = sl_eventfd()
        guard wake >= 0 else {
            let error = SystemError("eventfd")
            close(fds[0])
            close(fds[1])
            throw error
        }
        return LineReader(name: name, readFD: fds[0], writeFD: fds[1], wakeFD: wake, onLine: onLine)
    }

    /// The limits to set in the child, each with both values: a missing one is the daemon's own,
    /// and a soft limit never exceeds the hard one (setrlimit would refuse it).
    static func resolvedLimits(soft: [ResourceLimit: UInt64], hard: [ResourceLimit: UInt64]) -> [sl_rlimit] {
        ResourceLimit.allCases.compactMap { limit -> sl_rlimit? in
            guard soft[limit] != nil || hard[limit] != nil else { return nil }
            var current = rlimit()
            getrlimit(limit.resource, &current)
            let hardValue = hard[limit] ?? UInt64(current.rlim_max)
            let softValue = min(soft[limit] ?? UInt64(current.rlim_cur), hardValue)
            return sl_rlimit(resource: limit.resource, soft: softValue, hard: hardValue)
        }
    }

    /// C strings end at a NUL, and a name with '=' would change which variable is set.
    private static func isValid(_ config: SpawnConfiguration) -> Bool {
        let texts = [config.executable] + config.arguments + config.environment.values
            + [config.workingDirectory ?? "", config.standardOutputPath ?? "", config.standardErrorPath ?? ""]
        return !config.arguments.isEmpty && !texts.contains { $0.utf8.contains(0) }
            && config.environment.keys.allSatisfy { !$0.isEmpty && !$0.utf8.contains(0) && !$0.contains("=") }
    }

    private static func withCStrings<R>(
        _ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R
    ) -> R {
        let pointers = strings.map { strdup($0) } + [nil]
        defer { pointers.forEach { free($0) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }

    private static func withOptionalCString<R>(_ string: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
        guard let string else { return body(nil) }
        return string.withCString(body)
    }
}
