#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
@testable import SearchlightSupervisor

@Suite("How an extension's exit is explained", .onOwnThreads)
struct ExtensionExitTests {
    /// What the Swift runtime prints on stderr when a program calls fatalError (abridged).
    static let swiftTrap = """
        starting
        fe/fe.swift:1: Fatal error: told to trap by the test

        *** Signal 4: Backtracing from 0x7f6f93af9361... done ***

        *** Program crashed: Illegal instruction at 0x00007f6f93af9361 ***

        Platform: x86_64 Linux (Debian GNU/Linux 12 (bookworm))

        Thread 0 "fe" crashed:

          0      0x00007f6f93af9361 _assertionFailure(_:_:file:line:flags:) + 225 in libswiftCore.so
          1 [ra] 0x0000556e26b68f76 f(_:) + 133 in fe at /tmp/dt/fe.swift:1:38
          2 [ra] 0x0000556e26b6904e main + 61 in fe at /tmp/dt/fe.swift:2:7
          3 [ra] 0x0000556e26b6904e __libc_start_call_main + 122 in libc.so.6
          4 [ra] 0x0000556e26b6904e __libc_start_main + 133 in libc.so.6
        ...

        Registers:

        rax 0x0000000000000000  0
        cs 0x0033  fs 0x0000  gs 0x0000
        Images (16 omitted):
        0x000055c00be9a000–0x000055c00bf3b3a0 c27c33f1 fe /tmp/dt/fe
        Backtrace took 0.74s
        """

    @Test("a Swift trap keeps the lines before it, the crash headline and the crashed thread's first frames, not the registers")
    func swiftTrapIsKeptReadable() {
        let tail = StderrTail()
        for line in Self.swiftTrap.split(separator: "\n", omittingEmptySubsequences: false) { tail.append(String(line)) }
        #expect(tail.snapshot == [
            "starting", "fe/fe.swift:1: Fatal error: told to trap by the test",
            "*** Program crashed: Illegal instruction at 0x00007f6f93af9361 ***",
            "0      0x00007f6f93af9361 _assertionFailure(_:_:file:line:flags:) + 225 in libswiftCore.so",
            "1 [ra] 0x0000556e26b68f76 f(_:) + 133 in fe at /tmp/dt/fe.swift:1:38",
            "2 [ra] 0x0000556e26b6904e main + 61 in fe at /tmp/dt/fe.swift:2:7",
            "3 [ra] 0x0000556e26b6904e __libc_start_call_main + 122 in libc.so.6",
        ])
    }

    @Test("plain output keeps its last lines, each cut short")
    func lastLines() {
        let tail = StderrTail()
        for i in 0..<20 { tail.append("line \(i)") }
        tail.append(String(repeating: "x", count: 1000))
        #expect(tail.snapshot.count == StderrTail.lines)
        #expect(tail.snapshot.first == "line 13")
        #expect(tail.snapshot.last?.count == StderrTail.lineLength)
    }

    @Test("signals are named with what they usually mean; one the daemon sent for a hang says so")
    func meanings() {
        func exit(_ t: Termination, expected: Bool = false, hung: Bool = false) -> ExtensionExit {
            ExtensionExit(pid: 7, termination: t, expected: expected, stoppedAsHung: hung, lastStderr: ["boom"], stderrPath: nil,
                nextLaunch: nil, crashStreak: 1, at: Date())
        }
        #expect(exit(.signaled(SIGSEGV, coreDumped: false)).summary == "killed by signal 11 (SIGSEGV): a memory access fault")
        #expect(exit(.signaled(SIGILL, coreDumped: false)).summary.contains("a Swift runtime trap: fatalError"))
        #expect(exit(.signaled(SIGKILL, coreDumped: false)).summary.contains("the kernel's OOM killer"))
        #expect(exit(.signaled(SIGKILL, coreDumped: false), expected: true).summary == "killed by signal 9 (SIGKILL)")
        #expect(exit(.signaled(SIGTERM, coreDumped: false), hung: true).summary.contains("stopped by searchlightd because it hung"))
        #expect(exit(.exited(3)).summary == "exit status 3")
        let text = exit(.signaled(SIGSEGV, coreDumped: true)).explanation(label: "org.x")
        #expect(text == "org.x (pid 7) exited before acknowledging: killed by signal 11 (SIGSEGV), core dumped: a memory access fault; "
            + "its last lines on stderr: «boom»; see `searchlight units` and the daemon's log")
    }
}
