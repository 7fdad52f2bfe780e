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
        #expect(Self.line("two\nlines").hasSuffix(#"identifier="two\nlines""# + "\n"))
    }

    @Test("a combining mark or a format character after a quote, a space or a newline does not hide it")
    func combiningMarks() {
        // Foundation's string search on Linux skips a match that a grapheme extender follows, and
        // a Character of a space and a combining mark is not " ": the escape goes scalar by scalar.
        let quote = Self.line("x\"\u{FE0F} bundle=com.victim y")
        #expect(quote.hasSuffix(#" identifier="x\"\#u{FE0F} bundle=com.victim y""# + "\n"), "\(quote)")
        let newline = Self.line("a\n\u{301}2026-11-29T12:00:00Z notice searchlightd stopped forced=false")
        #expect(newline.filter { $0 == "\n" }.count == 1 && newline.unicodeScalars.filter { $0 == "\n" }.count == 1, "one line: \(newline)")
        #expect(newline.contains(#"identifier="a\n\#u{301}2026"#), "\(newline)")
        #expect(Self.line("=\u{301}").hasSuffix(#" identifier="=\#u{301}""# + "\n"))
        #expect(Self.line("rtl\u{202E}txt").hasSuffix(#" identifier="rtl\u{202e}txt""# + "\n"))
        #expect(Self.line("c1\u{85}next").hasSuffix(#" identifier="c1\u{85}next""# + "\n"))
    }
}
