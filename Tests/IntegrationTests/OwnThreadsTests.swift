import Foundation
import Synchronization
import Testing
import TestThreads

/// What `.onOwnThreads` promises the integration suites: their tests, synchronous or not, run on
/// the test process's own threads, so tests blocked there leave Swift's cooperative pool to the
/// in-process suites of the same `swift test`.
@Suite("Integration tests run on their own threads", .onOwnThreads)
struct OwnThreadsTests {
    @Test("a synchronous test body runs on one of the own threads, not on the pool")
    func synchronousBody() {
        #expect(TestThreads.isCurrent, "on \(Thread.current.name ?? "an unnamed thread")")
    }

    @Test("an async test stays on them across awaits, in child tasks and in default actors")
    func asyncBody() async throws {
        #expect(TestThreads.isCurrent)
        try await Task.sleep(for: .milliseconds(5))
        #expect(TestThreads.isCurrent)
        let children = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<4 { group.addTask { TestThreads.isCurrent } }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(children == [true, true, true, true])
        async let child = TestThreads.isCurrent
        #expect(await child)
        #expect(await Probe().isOnOwnThread())
        // Not inherited: an unstructured `Task {}` or `Task.detached {}` runs on the pool (this
        // toolchain, Swift 6.3); one that blocks must say `executorPreference: TestThreads.shared`.
        #expect(await Task { TestThreads.isCurrent }.value == false)
        #expect(await Task(executorPreference: TestThreads.shared) { TestThreads.isCurrent }.value)
    }

    /// 20 tasks of the test block their threads at once (as harness waits do), each on a thread
    /// of its own, none on the pool's. (Whether a pool task runs meanwhile is not asked: in the
    /// one `swift test` run the in-process suites keep the pool busy, legitimately.) Without the
    /// trait the 20 queue for the pool's threads: the test fails, slowly (each blocks 20 s at most).
    @Test("20 of a test's tasks blocked at once each hold a thread of their own, none of the pool's")
    func blockedTasksOwnThreads() async throws {
        let release = DispatchSemaphore(value: 0)
        let counts = Counts()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<20 {
                group.addTask {
                    let own = TestThreads.isCurrent
                    counts.blocked.withLock { $0 += 1 }
                    if !own { counts.onPool.withLock { $0 += 1 } }
                    _ = release.wait(timeout: .now() + 20)
                }
            }
            let deadline = ContinuousClock.now + .seconds(30)
            while counts.blocked.withLock({ $0 }) < 20, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            #expect(counts.blocked.withLock { $0 } == 20, "not all 20 were blocked at once")
            for _ in 0..<20 { release.signal() }
            try await group.waitForAll()
        }
        #expect(counts.onPool.withLock { $0 } == 0)
        #expect(TestThreads.shared.peakThreads >= 20)
    }

    /// Suites are added by many hands: one without the trait would block the pool again, quietly.
    @Test("every integration suite carries .onOwnThreads")
    func everySuiteHasTheTrait() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().path
        var missing: [String] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: folder).sorted() where file.hasSuffix(".swift") {
            let source = try String(contentsOfFile: folder + "/" + file, encoding: .utf8)
            guard source.contains("@Test") else { continue }
            // The attribute starts a line; the word elsewhere (comments, strings) is not one.
            let suites = source.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
                .filter { $0.element.drop { $0 == " " }.hasPrefix("@Suite") }
            if suites.isEmpty { missing.append("\(file): tests outside a suite") }
            for (line, text) in suites {
                let attribute = source.split(separator: "\n", omittingEmptySubsequences: false)[line...].joined(separator: "\n")
                if !Self.arguments(String(attribute.drop { $0 == " " }.dropFirst("@Suite".count))).contains(".onOwnThreads") {
                    missing.append("\(file):\(line + 1): \(text)")
                }
            }
        }
        #expect(missing == [], "add .onOwnThreads to these suites' traits")
    }

    /// The text of `@Suite`'s argument list (empty without one), strings skipped over.
    static func arguments(_ afterSuite: String) -> String {
        guard afterSuite.first == "(" else { return "" }
        var depth = 0, inString = false, escaped = false, end = afterSuite.startIndex
        for i in afterSuite.indices {
            let c = afterSuite[i]
            if inString {
                if escaped { escaped = false } else if c == "\\" { escaped = true } else if c == "\"" { inString = false }
                continue
            }
            if c == "\"" { inString = true } else if c == "(" { depth += 1 } else if c == ")" { depth -= 1 }
            if depth == 0 { end = i; break }
        }
        return String(afterSuite[...end])
    }
}

private final class Counts: Sendable {
    let blocked = Mutex(0)
    let onPool = Mutex(0)
}

private actor Probe {
    func isOnOwnThread() -> Bool { TestThreads.isCurrent }
}
