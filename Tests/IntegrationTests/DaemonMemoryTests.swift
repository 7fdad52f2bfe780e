import Foundation
import Testing
import TestThreads
import SearchlightKit
import SearchlightWire

/// Where the daemon's memory is (`admin.status`'s `memory`), and what a restart leaves open
/// (issue 32). Through the real daemon, with the model `make model` installs, or else with the
/// committed static table and stand-ins for the transformer's files, which are never loaded
/// (`staticTierModelDirectory`).
@Suite("Daemon memory", .onOwnThreads)
struct DaemonMemoryTests {
    /// A model folder with the committed static table and stand-ins for the transformer's files:
    /// the refinement share starts only where they are, and judges a closed index by its summary
    /// before it loads the transformer. A query that tries to load it finds files that do not
    /// load and embeds with the static table (`SemanticEngine.prepare`).
    static func staticTierModelDirectory(_ dir: TempDir) throws -> String {
        let path = try SemanticSearchTests.staticModelDirectory(dir)
        try "not a model".write(toFile: path + "/model.safetensors", atomically: false, encoding: .utf8)
        try "[PAD]\n".write(toFile: path + "/vocab.txt", atomically: false, encoding: .utf8)
        return path
    }

    @Test("after a restart the refinement share leaves a closed index over its size closed, and admin.status says where the memory is")
    func shareLeavesClosedIndexClosed() async throws {
        let dir = TempDir()
        let installed = ProcessInfo.processInfo.environment["SEARCHLIGHT_MODEL_DIR"]
            ?? (NSHomeDirectory() + "/.local/share/searchlight/models/all-MiniLM-L6-v2")
        let hasModel = ["model.safetensors", "vocab.txt", "static-table.bin"].allSatisfy {
            FileManager.default.fileExists(atPath: installed + "/" + $0)
        }
        let model = hasModel ? installed : try Self.staticTierModelDirectory(dir)
        // 30 items, over the share's 10: the share has nothing to do there (idle maintenance
        // refines it). Before, it opened the index 30 s after every start only to count its vectors.
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model, "--refine-share-items", "10", "--refine-share-after", "0.2"],
            dir: dir)
        let items = (0..<30).map { i in
            #"{"uniqueIdentifier":"m\#(i)","attributes":{"title":"river trail \#(i)","textContent":"a walk along the river, stop \#(i)"}}"#
        }
        try await SemanticSearchTests.importItems(items, bundle: "com.example.memory", daemon: daemon, dir: dir) {
            try await runCLI($0, socket: daemon.socket)
        }
        let after = daemon.log.count
        try await daemon.restart()
        try await daemon.waitForLog("refinement share: closed index left closed", after: after)
        let admin = daemon.admin()
        defer { Task { await admin.close() } }
        let closed = try await admin.call(Method.adminStatus)
        #expect(closed["openIndexes"]?.intValue == 0, "\(closed["openIndexes"] ?? .null)")
        let process = closed["memory"]
        #expect((process?["residentBytes"]?.intValue ?? 0) > 0)
        #expect((process?["anonymousBytes"]?.intValue ?? 0) > 0)
        #expect((process?["malloc"]?["inUseBytes"]?.intValue ?? 0) > 0)
        #expect(process?["sqlite"]?["usedBytes"]?.intValue != nil)

        // A hybrid query opens the index and loads its vectors: its figures appear.
        let search = try await runCLI(["search", "com.example.memory", "river walk", "--semantic"], socket: daemon.socket)
        #expect(search.status == 0, "\(search.stderr)")
        let open = try await admin.call(Method.adminStatus)
        let entry = open["bundles"]?.arrayValue?.first { $0["bundle"]?.stringValue == "com.example.memory" }?["indexes"]?.arrayValue?.first
        #expect(entry?["open"]?.boolValue == true)
        let memory = entry?["memory"]
        #expect((memory?["readers"]?.intValue ?? 0) >= 1, "\(memory ?? .null)")
        #expect(memory?["vectorHeapBytes"]?.intValue != nil, "\(memory ?? .null)")
        #expect(memory?["partitionBuilding"]?.boolValue == false, "30 vectors are never partitioned")
        #expect(memory?["unionScratchBytes"]?.intValue != nil)
        #expect((open["memory"]?["sqlite"]?["usedBytes"]?.intValue ?? 0) > 0)

        // Reads went quiet: the heap is trimmed (HeapTrimmer, 2 s after the last read). A status
        // reads the index's summary too, so it is asked 3 s apart, leaving the 2 s of quiet.
        var trims = 0
        let deadline = Date().addingTimeInterval(60)
        while trims == 0, Date() < deadline {
            try await Task.sleep(nanoseconds: 3_000_000_000)
            trims = try await admin.call(Method.adminStatus)["memory"]?["malloc"]?["quietTrims"]?.intValue ?? 0
        }
        #expect(trims >= 1, "no trim within 60 s of the last read")
    }
}
