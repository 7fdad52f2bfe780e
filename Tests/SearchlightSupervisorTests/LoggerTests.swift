import Foundation
import Synchronization
import Testing
import TestThreads
@testable import SearchlightSupervisor

@Suite("log lines", .onOwnThreads)
struct LoggerTests {
    /// The line a value is written into, read back as logfmt fields would be.
    static func line(_ value: String) -> String {
        let lines = Mutex<[String]>([])
        let log = Logger(label: "test", level: .debug, sink: { line in lines.withLock { $0.append(line) } })
        log.info("activity saved", ["bundle": "com.attacker", "identifier": value])
        return lines.withLock { $0.first ?? "" }
    }

    @Test("a value a client chose cannot add a field: backslashes and quotes are escaped inside its quotes")
    func forgedField() {
        // Unescaped, `\"` would close the quotes and ` bundle=com.victim` read as a field of its own.
        let line = Self.line(#"x\" bundle=com.victim y"#)
        #expect(line.hasSuffix(#" bundle=com.attacker identifier="x\\\" bundle=com.victim y""# + "\n"), "\(line)")
        #expect(Self.line(#"a\b"#).hasSuffix(#"identifier="a\\b""# + "\n"))
        #expect(Self.line("plain").hasSuffix(" identifier=plain\n"))
        #expect(Self.line("two\nlines").hasSuffix(#"identifier=two\nlines"# + "\n"))
    }
}
