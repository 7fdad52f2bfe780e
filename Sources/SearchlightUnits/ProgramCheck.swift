#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// Who may change the files a unit's program is made of, in system mode (DESIGN §6 Security):
/// root, the daemon's own user, and the unit's `UserName` when the unit runs as that user (that
/// user changing its own extension gains nothing). Anyone else who could replace the program, or
/// any folder it is reached through, could run code as the unit's user, root by default.
public struct ProgramTrust: Sendable {
    /// The owners whose files and folders are trusted.
    public let owners: Set<uid_t>
    /// Who the program runs as, for messages ("root", or the unit's user name).
    public let runsAs: String

    /// The trust of a unit with this `UserName` (which applies only when the daemon is root).
    public static func forUnit(userName: String?) -> ProgramTrust {
        var owners: Set<uid_t> = [0, geteuid()]
        var runsAs = geteuid() == 0 ? "root" : "uid \(geteuid())"
        if geteuid() == 0, let userName, let uid = UnitFiles.userID(named: userName) {
            owners.insert(uid)
            runsAs = userName
        }
        return ProgramTrust(owners: owners, runsAs: runsAs)
    }
}

/// A program that passed the checks: the file it really is, and how it must be started.
public struct CheckedProgram: Sendable, Equatable {
    /// The physical path: no symbolic link, `.` or `..` left in it.
    public var path: String
    public var device: UInt64
    public var inode: UInt64
    /// A `#!` script: its interpreters were checked too, and it is executed by `path`.
    public var isScript: Bool
}

/// The check of a unit's program (UnitParser at load, `LaunchProgram` again at every launch).
///
/// Every component of the path is examined as the kernel would resolve it, following each symbolic
/// link by hand, so that both the path as given and the path it resolves to are covered. In system
/// mode, every folder on the way (from `/`) must belong to a trusted owner (`ProgramTrust`) and not
/// be writable by group or others, unless it is sticky and root's (like `/tmp`: others may add
/// entries there but not replace root's); the program must belong to a trusted owner and not be
/// writable by group or others. A `#!` script's interpreter is checked the same way (and, for
/// `#!/usr/bin/env NAME`, the folders of the PATH that env searches up to NAME), since that is
/// what really runs.
public enum ProgramCheck {
    /// Kernel limits: 40 symbolic links per lookup, 4 nested interpreters.
    static let maximumLinks = 40
    static let maximumInterpreters = 4
    /// env's search path when the environment has none (glibc's confstr(_CS_PATH)).
    static let defaultSearchPath = "/bin:/usr/bin"

    /// Checks the program at `path` (absolute), named by `key` in `file`. `trust` nil: user mode,
    /// only existence, type and the execute bit are checked. `searchPath`: the PATH the extension
    /// will have, for `#!/usr/bin/env NAME`.
    public static func check(_ path: String, key: String, file: String, trust: ProgramTrust?,
                      searchPath: String?) throws(UnitProblem) -> CheckedProgram {
        let what = key == "Program" ? "Program" : "ProgramArguments[0]"
        var walk = PathWalk(subject: "\(what) \(path)", key: key, file: file, trust: trust)
        let (physical, info) = try walk.resolveFile(path, role: "\(what) \(path)")
        guard access(physical, X_OK) == 0 else {
            throw walk.problem("\(what) \(path) is not executable", "run chmod +x \(physical)")
        }
        var checked = CheckedProgram(path: physical, device: UInt64(info.st_dev), inode: UInt64(info.st_ino), isScript: false)
        guard let trust else {
            checked.isScript = interpreterLine(of: physical) != nil
            return checked
        }
        checked.isScript = try checkInterpreters(of: physical, subject: "\(what) \(path)", key: key, file: file,
                                                 trust: trust, searchPath: searchPath, depth: 1)
        return checked
    }

    /// Checks the interpreter of a `#!` file (and its own, nested); false when `path` is no script.
    private static func checkInterpreters(of path: String, subject: String, key: String, file: String,
                                          trust: ProgramTrust, searchPath: String?, depth: Int) throws(UnitProblem) -> Bool {
        guard let line = interpreterLine(of: path) else { return false }
        let fail = { (message: String, fix: String) in UnitProblem(file: file, key: key, message: message, fix: fix) }
        guard depth <= maximumInterpreters else {
            throw fail("\(subject) has more than \(maximumInterpreters) nested #! interpreters", "name a binary interpreter in its #! line")
        }
        guard line.interpreter.hasPrefix("/") else {
            throw fail("\(subject) names the relative interpreter \(line.interpreter) in its #! line, which would be looked up in the working directory",
                       "write the interpreter's absolute path in the #! line")
        }
        let role = "the interpreter \(line.interpreter) (the #! line of \(subject))"
        var walk = PathWalk(subject: role, key: key, file: file, trust: trust)
        let (interpreter, _) = try walk.resolveFile(line.interpreter, role: role)
        guard access(interpreter, X_OK) == 0 else { throw walk.problem("\(role) is not executable", "fix the #! line of \(path)") }
        _ = try checkInterpreters(of: interpreter, subject: role, key: key, file: file, trust: trust,
                                  searchPath: searchPath, depth: depth + 1)
        if (interpreter as NSString).lastPathComponent == "env" || (line.interpreter as NSString).lastPathComponent == "env",
           let command = envCommand(line.argument) {
            let found = try checkSearch(for: command, env: line.interpreter, of: subject, key: key, file: file, trust: trust,
                                        searchPath: searchPath ?? defaultSearchPath)
            _ = try checkInterpreters(of: found, subject: "\(command) (run by \(role))", key: key, file: file, trust: trust,
                                      searchPath: searchPath, depth: depth + 1)
        }
        return true
    }

    /// What `#!/usr/bin/env …` runs: the first word that is not an option or a VAR=value.
    static func envCommand(_ argument: String?) -> String? {
        guard let argument else { return nil }
        var words = argument.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)[...]
        while let word = words.first {
            words = words.dropFirst()
            if ["-u", "--unset", "-C", "--chdir"].contains(word) { words = words.dropFirst(); continue }
            if word.hasPrefix("-") || word.contains("=") { continue }
            return word
        }
        return nil
    }

    /// Finds `command` the way env does, in `searchPath`; every folder searched before it is found
    /// must be safe too (or missing, in a safe folder), or another user could put a same-named
    /// program first. Returns the physical path of what env will run.
    private static func checkSearch(for command: String, env: String, of subject: String, key: String, file: String,
                                    trust: ProgramTrust, searchPath: String) throws(UnitProblem) -> String {
        let role = "\(command), which \(env) runs for \(subject)"
        if command.contains("/") {
            guard command.hasPrefix("/") else {
                throw UnitProblem(file: file, key: key, message: "\(role) is a relative path, looked up in the working directory",
                                  fix: "name the interpreter by its absolute path in the #! line")
            }
            var walk = PathWalk(subject: role, key: key, file: file, trust: trust)
            return try walk.resolveFile(command, role: role).path
        }
        for folder in searchPath.split(separator: ":", omittingEmptySubsequences: false).map(String.init) {
            guard folder.hasPrefix("/") else {
                throw UnitProblem(file: file, key: key,
                                  message: "the PATH \(searchPath) that \(env) searches for \(command) (the #! line of \(subject)) has the relative entry \"\(folder)\"",
                                  fix: "set an absolute PATH in EnvironmentVariables, or write the interpreter's absolute path in the #! line")
            }
            var walk = PathWalk(subject: "the folder \(folder) on the PATH that \(env) searches for \(command) (the #! line of \(subject))",
                                key: key, file: file, trust: trust)
            guard let found = try walk.resolve(folder + "/" + command, allowMissing: true) else { continue }
            guard found.info.st_mode & S_IFMT == S_IFREG, access(found.path, X_OK) == 0 else { continue }
            try walk.trustFile(found.path, found.info, role: role)
            return found.path
        }
        throw UnitProblem(file: file, key: key, message: "\(env) finds no \(command) on the PATH \(searchPath) (the #! line of \(subject))",
                          fix: "install \(command), set PATH in EnvironmentVariables, or write the interpreter's absolute path in the #! line")
    }

    /// The `#!` line of a file: the interpreter and its optional argument (Linux passes the rest
    /// of the line as one argument); nil when the file is no script or cannot be read.
    static func interpreterLine(of path: String) -> (interpreter: String, argument: String?)? {
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 256)  // the kernel reads no more (BINPRM_BUF_SIZE)
        let count = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count >= 2, bytes[0] == UInt8(ascii: "#"), bytes[1] == UInt8(ascii: "!") else { return nil }
        let line = bytes[2..<count].prefix { $0 != UInt8(ascii: "\n") }
        let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: CharacterSet(charactersIn: " \t\r"))
        guard !text.isEmpty else { return nil }
        let interpreter = String(text.prefix { $0 != " " && $0 != "\t" })
        let rest = text.dropFirst(interpreter.count).trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
        return (interpreter, rest.isEmpty ? nil : rest)
    }
}

/// One resolution of a path, component by component, with every folder (and the final file)
/// checked against the trust as it is reached. Symbolic links are followed by hand, so the folders
/// of their targets are checked too, and a message can say which links led there.
public struct PathWalk {
    /// "Program /opt/x/bin/ext", "the interpreter /usr/bin/python3 (…)": what is being resolved.
    let subject: String
    let key: String?
    let file: String
    let trust: ProgramTrust?
    /// The links followed so far, "link → target".
    private(set) var links: [String] = []

    init(subject: String, key: String?, file: String, trust: ProgramTrust?) {
        self.subject = subject
        self.key = key
        self.file = file
        self.trust = trust
    }

    func problem(_ message: String, _ fix: String) -> UnitProblem {
        let via = links.isEmpty ? "" : " (reached through the symbolic link\(links.count == 1 ? "" : "s") \(links.joined(separator: ", ")))"
        return UnitProblem(file: file, key: key, message: message + via, fix: fix)
    }

    /// Resolves `path` to a regular file and checks it (`role` names it in messages).
    mutating func resolveFile(_ path: String, role: String) throws(UnitProblem) -> (path: String, info: stat) {
        guard let found = try resolve(path, allowMissing: false) else {
            throw problem("\(role) does not exist", "build the extension or fix the path (a relative path is relative to the unit file's folder)")
        }
        guard found.info.st_mode & S_IFMT == S_IFREG else {
            throw problem("\(role) is not a regular file", "point \(key ?? "Program") at the extension's executable")
        }
        try trustFile(found.path, found.info, role: role)
        return found
    }

    /// The physical path and `lstat` of what `path` names, every folder on the way checked; nil
    /// when a component is missing and `allowMissing` (the folders before it were checked, so
    /// nobody else can create it either).
    mutating func resolve(_ path: String, allowMissing: Bool) throws(UnitProblem) -> (path: String, info: stat)? {
        var pending = Array(Self.components(path).reversed())
        var current = "/"
        var info = try examine("/")
        try trustFolder("/", info)
        var followed = 0
        while let name = pending.popLast() {
            if name == "." { continue }
            if name == ".." {
                // `current` is physical and every folder above it was checked on the way down.
                current = (current as NSString).deletingLastPathComponent
                info = try examine(current)
                continue
            }
            let next = current == "/" ? "/" + name : current + "/" + name
            var st = stat()
            guard lstat(next, &st) == 0 else {
                let code = errno
                if code == ENOENT, allowMissing { return nil }
                if code == ENOENT {
                    let missing = pending.allSatisfy({ $0 == "." }) ? "" : " (\(next) is missing)"
                    throw problem("\(subject) does not exist\(missing)",
                                  "build the extension or fix the path (a relative path is relative to the unit file's folder)")
                }
                throw problem("\(subject) cannot be examined (\(next): \(String(cString: strerror(code))))",
                              "make every folder of the path searchable by the daemon's user")
            }
            if st.st_mode & S_IFMT == S_IFLNK {
                followed += 1
                guard followed <= ProgramCheck.maximumLinks else {
                    throw problem("\(subject) goes through more than \(ProgramCheck.maximumLinks) symbolic links", "point \(key ?? "it") at the file itself")
                }
                let target = try readLink(next)
                links.append("\(next) → \(target)")
                if target.hasPrefix("/") { current = "/" }
                pending.append(contentsOf: Self.components(target).reversed())
                continue
            }
            if !pending.allSatisfy({ $0 == "." }) {
                guard st.st_mode & S_IFMT == S_IFDIR else {
                    throw problem("\(subject) cannot be reached: \(next) is not a folder", "fix the path")
                }
                try trustFolder(next, st)
            }
            current = next
            info = st
        }
        return (current, info)
    }

    /// Resolves `path` to a folder and checks it and every folder above it.
    @discardableResult
    mutating func resolveFolder(_ path: String) throws(UnitProblem) -> String {
        guard let found = try resolve(path, allowMissing: false) else {
            throw problem("\(subject) does not exist", "create it, or fix the path")
        }
        guard found.info.st_mode & S_IFMT == S_IFDIR else { throw problem("\(subject) is not a folder", "fix the path") }
        try trustFolder(found.path, found.info, itself: true)
        return found.path
    }

    /// A folder on the way: a trusted owner, and no write access for group or others unless
    /// sticky and root's (whose entries only their owners may rename or remove). `itself`: the
    /// folder is the subject, not one on its way.
    func trustFolder(_ folder: String, _ st: stat, itself: Bool = false) throws(UnitProblem) {
        guard let trust else { return }
        let writable = st.st_mode & mode_t(S_IWGRP | S_IWOTH) != 0
        let stickyRoot = st.st_mode & mode_t(S_ISVTX) != 0 && st.st_uid == 0
        let named = itself ? subject : "the folder \(folder) of \(subject)"
        if writable && !stickyRoot {
            throw problem("\(named) is writable by group or others (mode 0\(String(st.st_mode & 0o7777, radix: 8))\(groupName(st))): "
                          + "another user could replace what system mode runs as \(trust.runsAs)",
                          "run chmod go-w \(folder), or install the extension in a folder only root may change (such as /usr/local/lib)")
        }
        if !trust.owners.contains(st.st_uid) {
            throw problem("\(named) is owned by \(userName(st.st_uid)), who could replace what system mode runs as \(trust.runsAs)",
                          "run chown root \(folder), or install the extension in a folder only root may change (such as /usr/local/lib); "
                          + "if the extension should run as that user, set UserName")
        }
    }

    /// The file itself: a trusted owner, and no write access for group or others.
    func trustFile(_ path: String, _ st: stat, role: String) throws(UnitProblem) {
        guard let trust else { return }
        if st.st_mode & mode_t(S_IWGRP | S_IWOTH) != 0 {
            throw problem("\(role) is writable by group or others (mode 0\(String(st.st_mode & 0o7777, radix: 8))): "
                          + "another user could change what system mode runs as \(trust.runsAs)",
                          "run chmod go-w \(path)")
        }
        if !trust.owners.contains(st.st_uid) {
            throw problem("\(role) is owned by \(userName(st.st_uid)), who could change what system mode runs as \(trust.runsAs)",
                          "run chown root \(path); if the extension should run as that user, set UserName")
        }
    }

    private func examine(_ path: String) throws(UnitProblem) -> stat {
        var st = stat()
        guard lstat(path, &st) == 0 else {
            throw problem("\(subject) cannot be examined (\(path): \(String(cString: strerror(errno))))", "check the path")
        }
        return st
    }

    private func readLink(_ path: String) throws(UnitProblem) -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count > 0 else {
            throw problem("\(subject) cannot be resolved (\(path): \(String(cString: strerror(errno))))", "check the path")
        }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private func userName(_ uid: uid_t) -> String {
        guard let pw = getpwuid(uid), let name = pw.pointee.pw_name else { return "uid \(uid)" }
        return "uid \(uid) (\(String(cString: name)))"
    }

    private func groupName(_ st: stat) -> String {
        guard st.st_mode & mode_t(S_IWGRP) != 0 else { return "" }
        guard let gr = getgrgid(st.st_gid), let name = gr.pointee.gr_name else { return ", group \(st.st_gid)" }
        return ", group \(String(cString: name))"
    }

    static func components(_ path: String) -> [String] {
        path.split(separator: "/").map(String.init)
    }
}
