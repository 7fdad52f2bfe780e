import Foundation
import Testing
import TestThreads
import SearchlightKit
import SearchlightWire

/// The loaded vector index saved at the daemon's stop (`<index>.sqlite-vectors`) and read back by
/// the first semantic query after the restart (issue 32); a kill -9 saves nothing. Through the
/// real daemon, with the model.
@Suite("Vector index across a restart", .onOwnThreads)
struct VectorIndexRestartTests {
    @Test("a clean stop saves the loaded vectors; the first semantic query after the restart reads them back with the same results; after a kill -9 the table is read")
    func savedAtStopReadAtRestart() async throws {
        guard let model = SemanticSearchTests.transformerModel else { return }
        let dir = TempDir()
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model], dir: dir)
        let bundle = "com.example.vectorsave"
        let items = (0..<40).map { i in
            #"{"uniqueIdentifier":"v\#(i)","attributeSet":{"title":"river trail \#(i)","textContent":"a walk along the river, stop \#(i)"}}"#
        }
        try await SemanticSearchTests.importItems(items, bundle: bundle, daemon: daemon, dir: dir) {
            try await runCLI($0, socket: daemon.socket)
        }
        let file = daemon.stateDir + "/indexes/\(bundle)/_default.sqlite-vectors"
        func search() async throws -> [String] {
            let r = try await runCLI(["search", bundle, "walking beside a stream", "--semantic", "--limit", "10", "--json"], socket: daemon.socket)
            #expect(r.status == 0, "\(r.stderr)")
            let json = (try? JSONValue.parse(Array(r.stdout.utf8))) ?? .null
            return (json["items"]?.arrayValue ?? []).compactMap { $0["uniqueIdentifier"]?.stringValue }
        }
        func loadedFrom() async throws -> String? {
            let admin = daemon.admin()
            defer { Task { await admin.close() } }
            let status = try await admin.call(Method.adminStatus)
            let entry = status["bundles"]?.arrayValue?.first { $0["bundle"]?.stringValue == bundle }?["indexes"]?.arrayValue?.first
            return entry?["memory"]?["vectorsLoadedFrom"]?.stringValue
        }
        let before = try await search()
        #expect(before.count == 10, "\(before)")
        #expect(try await loadedFrom() == "table")

        var mark = daemon.log.count
        try await daemon.restart()
        #expect(daemon.log[mark...].contains { $0.contains("vector index saved") }, "\(daemon.log[mark...])")
        let size = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
        #expect(size == 8_192 + 40 * 388, "40 records after the header, rowids, flags and sign codes: \(size)")
        #expect(try await search() == before)
        #expect(try await loadedFrom() == "savedFile")
        #expect(!FileManager.default.fileExists(atPath: file), "removed once read")

        // Stopped cleanly again (saved), then a donation and a kill -9: the file's epoch is old.
        try await daemon.restart()
        #expect(FileManager.default.fileExists(atPath: file))
        let more = [#"{"uniqueIdentifier":"w1","attributeSet":{"title":"river walk","textContent":"a river walk"}}"#]
        try await SemanticSearchTests.importItems(more, bundle: bundle, daemon: daemon, dir: dir) {
            try await runCLI($0, socket: daemon.socket)
        }
        await daemon.stop(signal: SIGKILL)
        mark = daemon.log.count
        try await daemon.start()
        let after = try await search()
        #expect(after.contains("w1"), "\(after)")
        #expect(try await loadedFrom() == "table")
        _ = try await daemon.waitForLog("saved vector index not used", after: mark)
        #expect(daemon.log[mark...].contains { $0.contains("the vectors changed since the index was saved") })
        await daemon.stop()
    }
}
