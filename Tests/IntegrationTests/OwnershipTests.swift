#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import SearchlightStore
import Testing
import TestThreads

/// System mode, issue 13 items 4 and 14: every write records its bundle's owner, a bundle nobody
/// owns is for administrators only, and a refused caller learns nothing but "not yours". Runs as
/// root with real other uids through `setpriv` (Docs/Reliability.md, "Isolation and permissions").
@Suite("Bundle owners and what a non-owner learns", .onOwnThreads, .serialized,
    .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
struct OwnershipTests {
    static let alice: UInt32 = 64_101
    static let bob: UInt32 = 64_102

    static func cli(as uid: UInt32, _ arguments: [String], socket: String) async throws -> CLIResult {
        try await runCLI(["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--", Products.path("searchlight"), "--socket", socket] + arguments,
            socket: nil, executable: "/usr/bin/setpriv")
    }

    /// A JSON-lines file of items every uid may read.
    static func itemsFile(_ dir: TempDir, _ name: String, ids: [String]) throws -> String {
        let path = dir.path + "/" + name + ".jsonl"
        try ids.map { #"{"uniqueIdentifier":"\#($0)","attributeSet":{"title":"private \#($0)"}}"# }.joined(separator: "\n")
            .write(toFile: path, atomically: false, encoding: .utf8)
        chmod(path, 0o644)
        return path
    }

    /// The refusal every non-owner gets: permissionDenied, no uid, nothing of the bundle's state.
    static func expectDenied(_ r: CLIResult, _ bundle: String, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(r.status == 1, "\(what): \(r.stdout) \(r.stderr)", sourceLocation: sourceLocation)
        #expect(r.stderr.contains("permission denied for bundle \(bundle)") && r.stderr.contains("(permissionDenied)"),
            "\(what): \(r.stderr)", sourceLocation: sourceLocation)
        #expect(!r.stdout.contains("private"), "\(what) leaked items: \(r.stdout)", sourceLocation: sourceLocation)
    }

    @Test("an extension's bundle stays its unit user's when the unit is removed: another uid can neither read nor claim it, before or after the unit returns")
    func extensionWrittenBundleAfterUnitRemoved() async throws {
        let userA = "searchlight-test-a"
        let a = try #require(testUser(userA), "could not create \(userA) with useradd")
        var unit = TestUnit("org.example.test.owned", bundle: "org.example.owned")
        unit.userName = userA
        let bench = try await ExtensionBench.start([unit], arguments: ["--system"], shared: true)
        try await bench.waitForAcknowledgement(unit.label)
        let everything = #"uniqueIdentifier == "*""#
        let served = try await Self.cli(as: a, ["query", unit.bundle, everything, "--limit", "1"], socket: bench.socket)
        #expect(served.status == 0 && served.stdout.contains("item-"), "\(served.stderr)")

        // The unit goes (SIGHUP or `searchlight units` re-reads the folder).
        try FileManager.default.removeItem(atPath: bench.unitsDir + "/" + unit.label + ".plist")
        _ = try await bench.admin(Method.adminUnits)
        let items = try Self.itemsFile(bench.dir, "bob", ids: ["claimed"])
        func checkBobIsRefused(_ when: String) async throws {
            let read = try await Self.cli(as: Self.bob, ["query", unit.bundle, everything], socket: bench.socket)
            Self.expectDenied(read, unit.bundle, "bob reading \(when)")
            #expect(!read.stdout.contains("item-"))
            await Self.expectDenied(try Self.cli(as: Self.bob, ["import", unit.bundle, items], socket: bench.socket), unit.bundle, "bob claiming \(when)")
        }
        try await checkBobIsRefused("after the unit was removed")
        // Still the unit user's: its recorded owner reads it.
        let owner = try await Self.cli(as: a, ["query", unit.bundle, everything, "--limit", "1"], socket: bench.socket)
        #expect(owner.status == 0 && owner.stdout.contains("item-"), "the unit's user, recorded as owner: \(owner.stderr)")
        let status = try await bench.admin(Method.adminStatus, ["bundle": .string(unit.bundle)])
        #expect(status["bundles"]?.arrayValue?.first?["ownerUID"]?.intValue == Int(a), "\(status)")

        // The unit returns: its user is the owner, bob claimed nothing meanwhile.
        try bench.write(unit)
        _ = try await bench.admin(Method.adminUnits)
        try await checkBobIsRefused("after the unit returned")
        let none = try await Self.cli(as: a, ["query", unit.bundle, #"uniqueIdentifier == "claimed""#], socket: bench.socket)
        #expect(none.status == 0 && !none.stdout.contains("claimed"), "\(none.stdout) \(none.stderr)")
    }

    @Test("an administrator's writes leave the bundle to administrators: another uid can neither read nor claim it until an owner is given")
    func adminWrittenBundle() async throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try await DaemonProcess(arguments: ["--system"], dir: dir)
        let bundle = "org.example.adminwritten"
        let admin = try RawClient(path: daemon.socket)
        #expect(try admin.call(1, "initialize", ["protocolVersion": 1, "role": "admin"])?["result"] != nil)
        let wrote = try admin.call(2, "index.items", ["bundle": .string(bundle), "items": [["uniqueIdentifier": "by-admin",
            "attributeSet": ["title": "private admin note"]]]])
        #expect(wrote?["result"] != nil, "\(String(describing: wrote))")

        let everything = #"uniqueIdentifier == "*""#
        let items = try Self.itemsFile(dir, "bob", ids: ["claimed"])
        await Self.expectDenied(try Self.cli(as: Self.bob, ["query", bundle, everything], socket: daemon.socket), bundle, "bob reading")
        await Self.expectDenied(try Self.cli(as: Self.bob, ["import", bundle, items], socket: daemon.socket), bundle, "bob claiming")
        let root = try await runCLI(["query", bundle, everything], socket: daemon.socket)
        #expect(root.status == 0 && root.stdout.contains("by-admin") && !root.stdout.contains("claimed"), "\(root.stderr)")

        // An administrator gives it to bob: from then on it is his, and only his.
        let given = try await runCLI(["owner", bundle, String(Self.bob)], socket: daemon.socket)
        #expect(given.status == 0 && given.stdout.contains("now belongs to uid \(Self.bob)"), "\(given.stdout) \(given.stderr)")
        let bobs = try await Self.cli(as: Self.bob, ["query", bundle, everything], socket: daemon.socket)
        #expect(bobs.status == 0 && bobs.stdout.contains("by-admin"), "\(bobs.stderr)")
        await Self.expectDenied(try Self.cli(as: Self.alice, ["query", bundle, everything], socket: daemon.socket), bundle, "alice reading bob's")
    }

    @Test("a bundle written before owners were recorded is for administrators only until `searchlight owner` gives it one")
    func legacyBundleWithoutOwner() async throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try await DaemonProcess(arguments: ["--system"], dir: dir)
        let bundle = "org.example.legacy"
        let items = try Self.itemsFile(dir, "legacy", ids: ["old-1", "old-2"])
        #expect(try await runCLI(["import", bundle, items], socket: daemon.socket).status == 0)
        // As an older daemon left it: the files, and no owner in supervisor.sqlite.
        await daemon.stop()
        let state = try Database(path: daemon.stateDir + "/supervisor.sqlite")
        try state.execute("UPDATE bundles SET owner_uid = NULL")
        state.close()
        try await daemon.start()

        let everything = #"uniqueIdentifier == "*""#
        let claim = try Self.itemsFile(dir, "claim", ids: ["claimed"])
        await Self.expectDenied(try Self.cli(as: Self.bob, ["query", bundle, everything], socket: daemon.socket), bundle, "bob reading")
        await Self.expectDenied(try Self.cli(as: Self.bob, ["import", bundle, claim], socket: daemon.socket), bundle, "bob claiming")
        let root = try await runCLI(["query", bundle, everything], socket: daemon.socket)
        #expect(root.status == 0 && root.stdout.contains("old-1"), "root still reads it: \(root.stderr)")

        #expect(try await runCLI(["owner", bundle, String(Self.alice)], socket: daemon.socket).status == 0)
        let alices = try await Self.cli(as: Self.alice, ["query", bundle, everything], socket: daemon.socket)
        #expect(alices.status == 0 && alices.stdout.contains("old-2"), "\(alices.stderr)")
        await Self.expectDenied(try Self.cli(as: Self.bob, ["query", bundle, everything], socket: daemon.socket), bundle, "bob after the owner was given")
    }

    @Test("a refused bundle answers one permissionDenied, the same whether it holds items, has indexing off or only a unit serves it, before any other check")
    func refusalsAreIndistinguishable() async throws {
        let userA = "searchlight-test-a"
        _ = try #require(testUser(userA), "could not create \(userA) with useradd")
        // A unit whose extension never starts: its bundle is taken, and has no file.
        var unit = TestUnit("org.example.test.served", bundle: "org.example.served", mode: "exit-at-launch")
        unit.userName = userA
        let bench = try await ExtensionBench.start([unit], arguments: ["--system"], shared: true)
        let items = try Self.itemsFile(bench.dir, "alice", ids: ["a-1"])
        for bundle in ["com.alice.full", "com.alice.off"] {
            let r = try await Self.cli(as: Self.alice, ["import", bundle, items], socket: bench.socket)
            #expect(r.status == 0, "\(r.stderr)")
        }
        #expect(try await bench.cli(["indexing", "off", "com.alice.off"]).status == 0)

        // Bob tries every method on each; the answers must not differ but for the bundle's name.
        let bobItems = try Self.itemsFile(bench.dir, "bob", ids: ["b-1"])
        var answers: [String: [String]] = [:]
        for bundle in ["com.alice.full", "com.alice.off", unit.bundle] {
            let attempts: [(String, [String])] = [
                ("query", ["query", bundle, #"uniqueIdentifier == "*""#]),
                ("search", ["search", bundle, "private"]),
                ("import", ["import", bundle, bobItems]),
                ("delete", ["delete", bundle, "--identifiers", "a-1"]),
            ]
            for (what, arguments) in attempts {
                let r = try await Self.cli(as: Self.bob, arguments, socket: bench.socket)
                Self.expectDenied(r, bundle, "bob: \(what) \(bundle)")
                #expect(!r.stderr.contains(String(Self.alice)) && !r.stderr.contains("uid"), "names a uid: \(r.stderr)")
                #expect(!r.stderr.contains("indexing"), "says indexing is off: \(r.stderr)")
                answers[what, default: []].append(r.stderr.replacingOccurrences(of: bundle, with: "BUNDLE"))
            }
        }
        for (what, texts) in answers { #expect(Set(texts).count == 1, "\(what) answers differ: \(texts)") }
        // What a non-owner can still learn is only that the name is taken: a name nobody uses
        // reads as empty and is claimed by the first writer (DESIGN §6).
        let free = try await Self.cli(as: Self.bob, ["query", "com.nobody.yet", #"uniqueIdentifier == "*""#], socket: bench.socket)
        #expect(free.status == 0, "\(free.stderr)")
        await #expect(try Self.cli(as: Self.bob, ["import", "com.nobody.yet", bobItems], socket: bench.socket).status == 0)
        // Alice, the owner, is told that indexing is off.
        let off = try await Self.cli(as: Self.alice, ["import", "com.alice.off", items], socket: bench.socket)
        #expect(off.status == 1 && off.stderr.contains("indexingUnsupported"), "\(off.stderr)")
    }
}
