#if canImport(Glibc)
import Glibc
#endif
import CSpawn
import Foundation
import SearchlightUnits

/// The program of one launch, checked again just before it starts: a binary is opened once and
/// verified with fstat to be the file the check passed (then executed through that descriptor, so
/// nothing swapped in later can run); a `#!` script is executed by its physical path, which the
/// check has just shown nobody untrusted can change (see Docs/Architecture.md, Security).
struct LaunchProgram {
    /// The physical path of the checked file.
    let path: String
    /// The descriptor to execute (O_PATH), for a binary; nil for a script.
    let descriptor: Int32?

    init(unit: ExtensionUnit, system: Bool) throws(UnitProblem) {
        let key = unit.programKey
        let trust = system ? ProgramTrust.forUnit(userName: unit.userName) : nil
        let searchPath = unit.environment["PATH"] ?? ProcessInfo.processInfo.environment["PATH"]
        let checked = try ProgramCheck.check(unit.executable, key: key, file: unit.path, trust: trust, searchPath: searchPath)
        path = checked.path
        guard !checked.isScript else {
            descriptor = nil
            return
        }
        let fd = sl_open_path(checked.path)
        guard fd >= 0 else {
            throw UnitProblem(file: unit.path, key: key, message: "Program \(unit.executable) cannot be opened: \(String(cString: strerror(errno)))",
                              fix: "check the path and the daemon's rights on it")
        }
        var st = stat()
        let same = fstat(fd, &st) == 0 && st.st_mode & S_IFMT == S_IFREG
            && UInt64(st.st_dev) == checked.device && UInt64(st.st_ino) == checked.inode
        let safe = trust.map { st.st_mode & mode_t(S_IWGRP | S_IWOTH) == 0 && $0.owners.contains(st.st_uid) } ?? true
        guard same && safe else {
            Glibc.close(fd)
            throw UnitProblem(file: unit.path, key: key, message: "Program \(unit.executable) (\(checked.path)) changed while it was being checked",
                              fix: "find out what replaces it; the next launch checks it again")
        }
        descriptor = fd
    }

    /// Closes the descriptor; call it once the child has exec'd (or failed to). Not in a deinit:
    /// the descriptor must stay open until the spawn, whatever the optimizer makes of lifetimes.
    func close() {
        if let descriptor { Glibc.close(descriptor) }
    }
}
