#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// The extension units the daemon knows, read from the unit directories (DESIGN §2, §5).
///
/// Directories are searched in order and the first file of a name wins, so `/etc` overrides
/// `/usr/lib` as in systemd. A bad unit is refused with a `UnitProblem` while the others load.
/// At most one enabled unit serves a bundle. Disabled units stay listed but serve nothing.
/// The catalog is empty until the first `reload()`.
public final class UnitCatalog: Sendable {
    /// What one `reload()` found.
    public struct Report: Sendable, Equatable {
        /// Every unit now in the catalog, disabled ones included, sorted by label.
        public var loaded: [ExtensionUnit]
        /// Refused files and unreadable directories, sorted by file.
        public var problems: [UnitProblem]
        /// Whether `loaded` differs from the units before this reload.
        public var changed: Bool
    }

    /// The directories searched, first match wins (duplicates removed).
    public let directories: [String]
    /// System mode: the stricter file checks of `UnitParser.parse(contentsOf:system:)`.
    public let system: Bool
    /// At most this many unit files are read from one directory.
    public let maximumFilesPerDirectory: Int

    private struct State {
        var units: [ExtensionUnit] = []
        var problems: [UnitProblem] = []
    }
    private let state = Mutex(State())

    /// A catalog over `directories` (e.g. `DefaultPaths.unitDirectories(system:)`, or the
    /// `--units-dir` flags). Nothing is read until `reload()`.
    public init(directories: [String], system: Bool, maximumFilesPerDirectory: Int = 10_000) {
        var seen = Set<String>()
        self.directories = directories.map(UnitPaths.absolute).filter { seen.insert($0).inserted }
        self.system = system
        self.maximumFilesPerDirectory = maximumFilesPerDirectory
    }

    /// Every unit, disabled ones included, sorted by label.
    public var units: [ExtensionUnit] { state.withLock { $0.units } }

    /// The problems of the last reload.
    public var problems: [UnitProblem] { state.withLock { $0.problems } }

    /// The unit with this label, enabled or not.
    public func unit(label: String) -> ExtensionUnit? {
        state.withLock { $0.units.first { $0.label == label } }
    }

    /// The enabled unit that serves this bundle, if any.
    public func unit(forBundle bundle: String) -> ExtensionUnit? {
        state.withLock { $0.units.first { $0.bundleIdentifier == bundle && !$0.disabled } }
    }

    /// Reads the directories again and replaces the catalog with what they hold now. Safe to
    /// call from any thread; the files are read without holding the lock.
    @discardableResult
    public func reload() -> Report {
        var problems: [UnitProblem] = []
        var firstFile: [String: String] = [:]   // file name -> the file that won
        var candidates: [ExtensionUnit] = []
        for directory in directories {
            for name in listUnitFiles(in: directory, problems: &problems) {
                let path = directory + "/" + name
                // An override (/etc over /usr/lib) is the normal way to change a packaged unit,
                // not a problem: the later file is skipped silently, as systemd does.
                if firstFile[name] != nil { continue }
                firstFile[name] = path
                switch UnitParser.parse(contentsOf: path, system: system) {
                case .success(let unit): candidates.append(unit)
                case .failure(let problem): problems.append(problem)
                }
            }
        }
        var servedBy: [String: String] = [:]    // bundle -> the enabled unit file that serves it
        var units: [ExtensionUnit] = []
        for unit in candidates {
            if !unit.disabled {
                if let other = servedBy[unit.bundleIdentifier] {
                    problems.append(UnitProblem(file: unit.path, key: "BundleIdentifier",
                        message: "\(unit.bundleIdentifier) is already served by \(other); only one enabled unit may serve a bundle",
                        fix: "remove one of the two units, or add <key>Disabled</key><true/> to one of them"))
                    continue
                }
                servedBy[unit.bundleIdentifier] = unit.path
            }
            units.append(unit)
        }
        units.sort { $0.label < $1.label }
        problems.sort { ($0.file, $0.key ?? "", $0.message) < ($1.file, $1.key ?? "", $1.message) }
        let changed = state.withLock { state in
            defer { state = State(units: units, problems: problems) }
            return state.units != units
        }
        return Report(loaded: units, problems: problems, changed: changed)
    }

    /// The `*.plist` names in one directory, sorted, skipping dot files and capped. A missing
    /// directory is fine (nothing installed); an unreadable one is a problem. In system mode a
    /// directory other users may write is not read at all: anyone could add a unit to it.
    private func listUnitFiles(in directory: String, problems: inout [UnitProblem]) -> [String] {
        guard let dir = opendir(directory) else {
            let code = errno
            if code != ENOENT {
                problems.append(UnitProblem(file: directory, message: "cannot be read as a unit directory: \(String(cString: strerror(code)))",
                                            fix: "make it a directory the daemon's user may read, or remove it"))
            }
            return []
        }
        defer { closedir(dir) }
        if system {
            // Who may change the folder (or any folder above it) may add a unit, and a unit says
            // what runs as root: the same rule as for a unit's program.
            do throws(UnitProblem) {
                var walk = PathWalk(subject: "the unit directory \(directory)", key: nil, file: directory,
                                    trust: ProgramTrust(owners: [0, geteuid()], runsAs: geteuid() == 0 ? "root" : "uid \(geteuid())"))
                try walk.resolveFolder(directory)
            } catch {
                problems.append(error)
                return []
            }
        }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard name.hasSuffix(".plist"), !name.hasPrefix(".") else { continue }
            guard names.count < maximumFilesPerDirectory else {
                problems.append(UnitProblem(file: directory, message: "holds more than \(maximumFilesPerDirectory) unit files; the rest are not read",
                                            fix: "remove unit files that are not needed"))
                break
            }
            names.append(name)
        }
        return names.sorted()
    }
}

/// Path spelling for units: everything is made absolute, relative paths against the unit file's
/// folder. Only `.` components and repeated slashes are removed; `..` is kept, because collapsing
/// it lexically is wrong across symbolic links.
public enum UnitPaths {
    static func absolute(_ path: String) -> String {
        resolve(path, against: FileManager.default.currentDirectoryPath)
    }

    static func resolve(_ path: String, against folder: String) -> String {
        let joined = path.hasPrefix("/") ? path : folder + "/" + path
        let parts = joined.split(separator: "/").filter { $0 != "." }
        return "/" + parts.joined(separator: "/")
    }
}

/// Disk checks for unit files and their programs: bounded reads that never block on a FIFO, and
/// the ownership rules of system mode (DESIGN §6 Security).
public enum UnitFiles {
    static func read(_ path: String) throws(UnitProblem) -> Data {
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            throw UnitProblem(file: path, message: "cannot be opened: \(errorText())", fix: "check the path, and that the daemon's user may read it")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            throw UnitProblem(file: path, message: "is not a regular file", fix: "remove it from the unit directory")
        }
        let limit = UnitParser.maximumFileSize
        let tooLarge = UnitProblem(file: path, message: "is larger than 1 MiB",
                                   fix: "a unit file is a few hundred bytes: check that this is the right file")
        guard st.st_size <= limit else { throw tooLarge }
        var bytes = [UInt8](repeating: 0, count: limit + 1)
        var count = 0
        while count <= limit {
            let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else { throw UnitProblem(file: path, message: "cannot be read: \(errorText())", fix: "check the file") }
            if n == 0 { break }
            count += n
        }
        guard count <= limit else { throw tooLarge }   // it grew while we read
        return Data(bytes[..<count])
    }

    /// The program must exist, be a regular file and be executable; in system mode it, every
    /// folder it is reached through (symbolic links included), and a script's interpreter must
    /// also be safe from other users (`ProgramCheck`).
    @discardableResult
    static func checkExecutable(_ path: String, named key: String, system: Bool, userName: String?,
                                searchPath: String? = nil, file: String) throws(UnitProblem) -> CheckedProgram {
        try ProgramCheck.check(path, key: key, file: file, trust: system ? ProgramTrust.forUnit(userName: userName) : nil,
                               searchPath: searchPath ?? ProcessInfo.processInfo.environment["PATH"])
    }

    /// Refuses `target` when `mask` bits are set in its mode or its owner is not one of `owners`
    /// (by default root or the daemon's user): such a file could be changed by another user.
    static func checkNotWritableByOthers(_ target: String, key: String?, what: String, file: String,
                                         mask: mode_t = mode_t(S_IWGRP | S_IWOTH),
                                         owners: Set<uid_t> = [0, geteuid()]) throws(UnitProblem) {
        var st = stat()
        guard stat(target, &st) == 0 else {
            throw UnitProblem(file: file, key: key, message: "\(what) \(target) cannot be examined: \(errorText())", fix: "check the path")
        }
        if st.st_mode & mask != 0 {
            let who = mask & mode_t(S_IWGRP) != 0 ? "group or others" : "others"
            let chmod = mask & mode_t(S_IWGRP) != 0 ? "go-w" : "o-w"
            throw UnitProblem(file: file, key: key,
                              message: "\(what) \(target) is writable by \(who) (mode 0\(String(st.st_mode & 0o7777, radix: 8))), which system mode refuses",
                              fix: "run chmod \(chmod) \(target)")
        }
        if !owners.contains(st.st_uid) {
            throw UnitProblem(file: file, key: key,
                              message: "\(what) \(target) is owned by uid \(st.st_uid), who could change it; system mode refuses that",
                              fix: "run chown root \(target)")
        }
    }

    static func userID(named name: String) -> uid_t? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 1024)
        while true {
            let rc = getpwnam_r(name, &entry, &buffer, buffer.count, &result)
            if rc == ERANGE, buffer.count < 1 << 20 { buffer = [CChar](repeating: 0, count: buffer.count * 4); continue }
            return rc == 0 && result != nil ? entry.pw_uid : nil
        }
    }

    static func groupExists(named name: String) -> Bool {
        var entry = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 1024)
        while true {
            let rc = getgrnam_r(name, &entry, &buffer, buffer.count, &result)
            if rc == ERANGE, buffer.count < 1 << 20 { buffer = [CChar](repeating: 0, count: buffer.count * 4); continue }
            return rc == 0 && result != nil
        }
    }

    static func realPath(_ path: String) -> String? {
        guard let p = realpath(path, nil) else { return nil }
        defer { free(p) }
        return String(cString: p)
    }

    static func errorText() -> String { String(cString: strerror(errno)) }
}
