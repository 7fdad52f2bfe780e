#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightUnits
import SearchlightWire

/// Starts an extension unit's program with one end of a socketpair on fd 3 and gives the host the
/// other end (DESIGN §5). The daemon's is `ProcessLauncher` (the program checked again, fork and
/// exec, a cgroup, output to the log); tests inject one whose "processes" are fake peers in the
/// test process, which crash, hang, nack or answer garbage on command.
protocol ExtensionLauncher: Sendable {
    /// Starts `unit`; the stderr lines that reach the log are also kept in `stderrTail`.
    func launch(_ unit: ExtensionUnit, stderrTail: StderrTail) throws -> (process: any ExtensionProcess, socket: UnixSocket)
}

/// A launched copy of an extension, as its host sees it: it can be signalled, and it ends.
protocol ExtensionProcess: AnyObject, Sendable {
    var pid: Int32 { get }
    var hasExited: Bool { get }
    /// Sends `signal` (to its process group); false once it has ended.
    @discardableResult func signal(_ signal: Int32) -> Bool
    /// Returns once it has ended and what it wrote just before is read (its last words belong
    /// in the exit report).
    func waitForExit() async -> Termination
    /// After its end: whatever it started and left running is killed.
    func killLeftovers()
}

/// What the host needs of the session that serves an extension's connection: `ClientSession`
/// in the daemon (a fake in the state machine's tests).
protocol ExtensionSessionHandle: AnyObject, Sendable {
    var connection: RPCConnection { get }
    var peer: PeerCredentials { get }
    /// Drops the batches the extension left open; how many there were.
    @discardableResult func discardBatches() -> Int
    /// A message from the extension, on its connection's reader thread.
    func handle(_ message: RPCMessage)
}

extension ClientSession: ExtensionSessionHandle {}

/// One launch of an extension: its process, the daemon's end of its socket and the session
/// reading it, when it started, and how it ended once it has (`exit`, fulfilled by the host
/// after it has handled the exit: backoff decided, last stderr lines read).
final class LaunchedExtension: Sendable {
    let process: any ExtensionProcess
    let session: any ExtensionSessionHandle
    let at: Date
    let stderrTail: StderrTail
    /// The program file as launched: a rebuild is noticed at the next launch.
    let program: ProgramIdentity?
    let exit = Promise<ExtensionExit>()

    init(process: any ExtensionProcess, session: any ExtensionSessionHandle, at: Date, stderrTail: StderrTail, program: ProgramIdentity?) {
        self.process = process
        self.session = session
        self.at = at
        self.stderrTail = stderrTail
        self.program = program
    }

    var pid: Int32 { process.pid }
    var connection: RPCConnection { session.connection }
}

/// A `ChildProcess` started by `ProcessLauncher`, with its output readers: its exit is reported
/// once what it wrote is read (at most half a second: a process it started may hold the pipes).
final class SpawnedExtension: ExtensionProcess {
    let child: ChildProcess
    let outputs: ExtensionOutput

    init(child: ChildProcess, outputs: ExtensionOutput) {
        self.child = child
        self.outputs = outputs
    }

    var pid: Int32 { child.pid }
    var hasExited: Bool { child.hasExited }
    func signal(_ signal: Int32) -> Bool { child.signal(signal) }

    func waitForExit() async -> Termination {
        let termination = await child.waitForExit()
        await outputs.waitUntilRead(timeout: 0.5)
        return termination
    }

    /// Its process group (a pgid in use is never reused); its cgroup or session went at its exit.
    func killLeftovers() { kill(-child.pid, SIGKILL) }
}
