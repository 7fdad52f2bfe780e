#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightFuzz
import SearchlightKit
import SearchlightStore
import Testing
import TestThreads

/// The Tags sample (the store delegate in a real app) with the real daemon: its CLI, its
/// extension, crashes of both processes during a stream of changes, two processes on one store.
@Suite("Tags sample and the store delegate's guarantees", .onOwnThreads, .serialized)
struct TagsSampleTests {
    @Test("tags add, tag, rename-tag, delete and search: a renamed tag updates its photos' keywords")
    func cli() async throws {
        try TagsSample.requireBuilt()
        let daemon = try await blocking { try DaemonProcess() }
        let dir = TempDir("slt")
        let store = dir.path + "/tags.sqlite"
        let photo = dir.path + "/sipapu.png"
        _ = FileManager.default.createFile(atPath: photo, contents: Data([0x89, 0x50, 0x4E, 0x47]))
        func tags(_ arguments: String...) async throws -> String {
            let r = try await TagsSample.run(arguments, store: store, socket: daemon.socket)
            if r.status != 0 { throw HarnessError("tags \(arguments) failed (\(r.status)): \(r.stderr)") }
            return r.stdout
        }
        let a = try await tags("add", photo, "--name", "Sipapu Bridge at sunset").trimmingCharacters(in: .whitespacesAndNewlines)
        let b = try await tags("add", photo, "--name", "Kachina Bridge").trimmingCharacters(in: .whitespacesAndNewlines)
        _ = try await tags("tag", a, "Natural Bridges")
        _ = try await tags("tag", b, "Natural Bridges")
        _ = try await tags("tag", b, "Utah")
        #expect(try await tags("search", "natural").contains("photo-\(a)  Sipapu Bridge at sunset  [Natural Bridges]"))

        // Each command waited until its change was indexed: the next read sees it at once.
        _ = try await tags("rename-tag", "Natural Bridges", "Natural Bridges State Park")
        let items = try await TagsSample.items(socket: daemon.socket)
        #expect(items["photo-\(a)"]?.attributeSet.keywords == ["Natural Bridges State Park"])
        #expect(items["photo-\(b)"]?.attributeSet.keywords == ["Natural Bridges State Park", "Utah"])
        #expect(items["tag-1"]?.attributeSet.displayName == "Natural Bridges State Park")

        let r = try await runCLI(["search", "natural bridges", "--json"], socket: daemon.socket)
        let found = Set((try JSONValue.parse(r.stdout)["items"]?.arrayValue ?? []).compactMap { $0["uniqueIdentifier"]?.stringValue })
        #expect(found.isSuperset(of: ["tag-1", "photo-\(a)", "photo-\(b)"]), "\(r.stdout.prefix(1000)) \(r.stderr)")

        _ = try await tags("delete", a)
        #expect(try await TagsSample.items(socket: daemon.socket)["photo-\(a)"] == nil)
        let bad = try await TagsSample.run(["tag", "999", "x"], store: store, socket: daemon.socket)
        #expect(bad.status == 1 && bad.stderr.contains("there is no photo 999"), "\(bad.stderr)")
    }

    @Test("the Tags app's items (displayName and keywords only) have vectors: status counts one per item and a meaning-only query finds the tag")
    func tagsHaveVectors() async throws {
        try TagsSample.requireBuilt()
        let dir = TempDir("slt")
        let daemon = try await DaemonProcess(arguments: ["--model-dir", try SemanticSearchTests.staticModelDirectory(dir)], dir: dir)
        let store = dir.path + "/tags.sqlite"
        let photo = dir.path + "/sipapu.png"
        _ = FileManager.default.createFile(atPath: photo, contents: Data([0x89, 0x50, 0x4E, 0x47]))
        func tags(_ arguments: String...) async throws {
            let r = try await TagsSample.run(arguments, store: store, socket: daemon.socket)
            if r.status != 0 { throw HarnessError("tags \(arguments) failed (\(r.status)): \(r.stderr)") }
        }
        try await tags("add", photo, "--name", "Sipapu at dusk")
        try await tags("tag", "1", "Natural Bridges State Park")
        let status = try await runCLI(["status", "--json"], socket: daemon.socket)
        let bundle = (try JSONValue.parse(Array(status.stdout.utf8)))["bundles"]?.arrayValue?.first {
            $0["bundle"]?.stringValue == "org.searchlight.sample.tags"
        }
        let index = bundle?["indexes"]?.arrayValue?.first
        #expect((index?["items"]?.intValue ?? 0) == 2 && index?["vectors"]?.intValue == index?["items"]?.intValue,
            "a vector per item: \(status.stdout.prefix(800))")
        // No word shared with the tag's name or keywords: only its vector finds it.
        let r = try await runCLI(["search", "org.searchlight.sample.tags", "rock arches", "--json", "--explain"], socket: daemon.socket)
        let items = (try? JSONValue.parse(Array(r.stdout.utf8)))?["items"]?.arrayValue ?? []
        #expect(items.first?["uniqueIdentifier"]?.stringValue == "tag-1", "\(r.stdout) \(r.stderr)")
        #expect(items.first?["explain"]?["lexicalRank"] == nil && items.first?["explain"]?["vectorRank"]?.intValue == 1)
    }

    @Test("tags delete-index: the index is empty, the triggers and history are gone, the photos stay")
    func deleteIndex() async throws {
        try TagsSample.requireBuilt()
        let daemon = try await blocking { try DaemonProcess() }
        let dir = TempDir("slx")
        let (store, db) = try TagsSample.newStore(dir)
        try db.run("INSERT INTO photos(userSpecifiedName) VALUES ('one'), ('two')")
        let watcher = try TagsWatcher(store: store, socket: daemon.socket, name: "w")
        try await TagsSample.waitCaughtUp(db, socket: daemon.socket)
        watcher.kill(SIGTERM)
        #expect(try await TagsSample.items(socket: daemon.socket).count == 2)
        let r = try await TagsSample.run(["delete-index"], store: store, socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try await TagsSample.items(socket: daemon.socket).isEmpty)
        #expect(try db.intScalar("SELECT count(*) FROM sqlite_master WHERE name GLOB 'searchlight*'") == 0)
        #expect(try db.intScalar("SELECT count(*) FROM photos") == 2)
    }

    @Test("the daemon rebuilds the Tags index through tags-extension while the app is not running")
    func extensionReindex() async throws {
        try TagsSample.requireBuilt()
        let dir = TempDir("sle")
        let (store, db) = try TagsSample.newStore(dir)
        // Rows the app wrote before any delegate ever ran: no triggers, no history.
        try db.run("INSERT INTO photos(userSpecifiedName) VALUES ('Sipapu'), ('Kachina'), ('Owachomo')")
        try db.run("INSERT INTO tags(name) VALUES ('Natural Bridges')")
        try db.run("INSERT INTO photo_tags VALUES (1, 1), (2, 1)")
        try FileManager.default.createDirectory(atPath: dir.path + "/units", withIntermediateDirectories: true)
        let unit = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
                <key>Label</key><string>\(TagsSample.bundle)</string>
                <key>BundleIdentifier</key><string>\(TagsSample.bundle)</string>
                <key>ProgramArguments</key><array><string>\(TagsSample.tagsExtension)</string><string>--store</string><string>\(store)</string></array>
                <key>ThrottleInterval</key><integer>0</integer>
                <key>ProcessType</key><string>Standard</string>
            </dict>
            </plist>

            """
        try unit.write(toFile: dir.path + "/units/\(TagsSample.bundle).plist", atomically: true, encoding: .utf8)
        let daemon = try await blocking { try DaemonProcess(arguments: ["--units-dir", dir.path + "/units", "--backoff", "0.2"], dir: dir) }
        // A new bundle with an extension gets an initial reindex-all.
        _ = try await blocking { try daemon.waitForLog("reindex request acknowledged", timeout: 60) }
        #expect(try await TagsSample.differences(socket: daemon.socket, store: db) == [])
        // The rebuild installed the triggers and stored the history it covers.
        #expect(try await TagsSample.indexedToken(socket: daemon.socket) == Int64(try db.intScalar("SELECT coalesce(max(token), 0) FROM searchlight_history")))

        // Changes while no app runs: the history records them; reindex-identifiers re-reads rows.
        try db.run("UPDATE photos SET userSpecifiedName = 'Sipapu at dusk' WHERE id = 1")
        try db.execute("DELETE FROM photo_tags WHERE photo_id = 3; DELETE FROM photos WHERE id = 3")
        let ids = try await runCLI(["reindex", TagsSample.bundle, "--identifiers", "photo-1", "photo-3", "photo-77"], socket: daemon.socket)
        #expect(ids.status == 0, "\(ids.stderr)")
        let items = try await TagsSample.items(socket: daemon.socket)
        #expect(items["photo-1"]?.attributeSet.displayName == "Sipapu at dusk")
        #expect(items["photo-3"] == nil)

        try db.run("UPDATE tags SET name = 'Natural Bridges State Park'")
        let all = try await runCLI(["reindex", TagsSample.bundle, "--all"], socket: daemon.socket)
        #expect(all.status == 0, "\(all.stderr)")
        #expect(try await TagsSample.differences(socket: daemon.socket, store: db) == [])
        try await TagsSample.waitCaughtUp(db, socket: daemon.socket, timeout: 1)
    }

    @Test("SIGKILL of the app's delegate at random points during 10 000 changes, and of the daemon: every change is in the index exactly once")
    func killDuringStream() async throws {
        try TagsSample.requireBuilt()
        let environment = ProcessInfo.processInfo.environment
        let seed = environment["SEARCHLIGHT_DELEGATE_SEED"].flatMap(UInt64.init) ?? UInt64(Date().timeIntervalSince1970 * 1000)
        let changes = environment["SEARCHLIGHT_DELEGATE_CHANGES"].flatMap(Int.init) ?? 10_000
        print("store delegate kill test: seed=\(seed) changes=\(changes) (replay with SEARCHLIGHT_DELEGATE_SEED=\(seed))")
        var rng = FuzzRandom(seed: seed)
        let started = Date()
        let dir = TempDir("slk")
        let daemon = try await blocking { try DaemonProcess(dir: dir) }
        let (store, db) = try TagsSample.newStore(dir)
        let writerSeed = rng.next()
        let writing = WriterProgress()
        let writer = Task.detached(executorPreference: TestThreads.shared) {  // blocking SQLite writes: off the pool
            var w = try StoreWriter(path: store, seed: writerSeed)
            return try w.write(changes, progress: writing)
        }

        var watchers = [try TagsWatcher(store: store, socket: daemon.socket, name: "0")]
        var appKills = 0, daemonKills = 0
        while !writing.isDone {
            try await Task.sleep(for: .milliseconds(150 + rng.below(600)))
            if writing.isDone { break }
            if rng.oneIn(4) {
                daemonKills += 1
                try await blocking {
                    daemon.stop(signal: SIGKILL)
                    try daemon.start()
                }
            } else {
                appKills += 1
                watchers.last!.kill(SIGKILL)
                watchers.append(try TagsWatcher(store: store, socket: daemon.socket, name: "\(watchers.count)"))
            }
        }
        let written = try await writer.value
        try await TagsSample.waitCaughtUp(db, socket: daemon.socket)
        let differences = try await TagsSample.differences(socket: daemon.socket, store: db)
        #expect(differences.isEmpty, "\(differences.count) differences, first: \(differences.prefix(10))")
        let ranges = watchers.flatMap(\.ranges)
        #expect(overlaps(ranges) == [], "a history range was applied twice")
        let left = try db.intScalar("SELECT count(*) FROM searchlight_history")
        #expect(left <= 256, "processed history is pruned (\(left) rows left)")
        for w in watchers { w.kill(SIGTERM) }
        print("store delegate kill test: \(written) changes, \(appKills) kills of tags watch, \(daemonKills) of searchlightd, "
            + "\(ranges.count) ranges committed, \(try db.intScalar("SELECT count(*) FROM photos")) photos, "
            + "\(String(format: "%.1f", Date().timeIntervalSince(started))) s")
    }

    @Test("two processes running the delegate on one store: no history range applied twice, none lost")
    func twoProcesses() async throws {
        try TagsSample.requireBuilt()
        let dir = TempDir("sl2")
        let daemon = try await blocking { try DaemonProcess(dir: dir) }
        let (store, db) = try TagsSample.newStore(dir)
        let one = try TagsWatcher(store: store, socket: daemon.socket, name: "one")
        let two = try TagsWatcher(store: store, socket: daemon.socket, name: "two")
        try await TagsSample.waitCaughtUp(db, socket: daemon.socket)
        let progress = WriterProgress()
        let written = try await Task.detached(executorPreference: TestThreads.shared) {  // off the pool
            var w = try StoreWriter(path: store, seed: 7)
            return try w.write(3_000, progress: progress)
        }.value
        try await TagsSample.waitCaughtUp(db, socket: daemon.socket)
        #expect(try await TagsSample.differences(socket: daemon.socket, store: db) == [])
        // Nobody was killed: every committed range is reported, so they must tile the history.
        // A process logs its range after the commit returns: the index may cover the whole
        // history while the other process, descheduled between its commit and its line, has not
        // written it yet (a gap seen once, the data correct). So wait for the lines to tile it.
        let last = Int64(try db.intScalar("SELECT max(token) FROM searchlight_history"))
        func reported() -> (ranges: [(from: Int64, through: Int64)], gaps: [String]) {
            let ranges = (one.ranges + two.ranges).sorted { $0.from < $1.from }
            var gaps: [String] = []
            for (a, b) in zip(ranges, ranges.dropFirst()) where b.from != a.through { gaps.append("(\(a.through), \(b.from)]") }
            return (ranges, gaps)
        }
        let linesDeadline = Date().addingTimeInterval(30)
        var (ranges, gaps) = reported()
        while !gaps.isEmpty || ranges.last?.through != last, Date() < linesDeadline {
            try await Task.sleep(for: .milliseconds(50))
            (ranges, gaps) = reported()
        }
        #expect(overlaps(ranges) == [])
        let start = ranges.first?.from ?? last
        #expect(gaps == [], "history not covered by any range")
        #expect(ranges.last?.through == last)
        let lost = (one.stderr + two.stderr).components(separatedBy: "taken by another writer").count - 1
        print("two delegates: \(written) changes from token \(start) to \(last); ranges one=\(one.ranges.count) two=\(two.ranges.count), races lost \(lost)")
        one.kill(SIGTERM)
        two.kill(SIGTERM)
    }
}

/// Apart from the suite above (it mostly sleeps, so it runs beside the others).
@Suite("an idle app running the store delegate", .onOwnThreads)
struct IdleDelegateTests {
    /// libdispatch's manager thread (the one in `epoll_wait`) is left out: in any process that
    /// used Swift concurrency it runs the workqueue monitor once a second (measured in a
    /// five-line program too). Every other thread, the delegate's included, must sleep.
    @Test("an idle tags watch sleeps: no CPU and no wakeups of its own")
    func idle() async throws {
        try TagsSample.requireBuilt()
        let dir = TempDir("sli")
        let daemon = try await blocking { try DaemonProcess(dir: dir) }
        let (store, db) = try TagsSample.newStore(dir)
        try db.run("INSERT INTO photos(userSpecifiedName) VALUES ('one')")
        let watcher = try TagsWatcher(store: store, socket: daemon.socket, name: "idle")
        try await TagsSample.waitCaughtUp(db, socket: daemon.socket)
        try await Task.sleep(for: .seconds(6))  // past the last settle check (5 s) after its own writes
        let before = ThreadCounters(pid: watcher.pid)
        try await Task.sleep(for: .seconds(3))
        let after = ThreadCounters(pid: watcher.pid)
        #expect(after.wakeups(since: before) <= 1, "\(after.wakeups(since: before)) context switches in 3 s")
        #expect(after.cpuTicks - before.cpuTicks <= 1)
        watcher.kill(SIGTERM)
    }
}

/// Context switches per thread and CPU time of a process, from /proc; libdispatch's manager
/// thread (waiting in `epoll_wait`, which nothing of ours uses) is not counted.
struct ThreadCounters {
    var switches: [String: Int] = [:]
    var cpuTicks = 0

    init(pid: Int32) {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        for tid in tasks {
            let wchan = (try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/wchan", encoding: .utf8)) ?? ""
            if wchan.contains("epoll") { continue }
            guard let status = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/status", encoding: .utf8) else { continue }
            switches[tid] = status.split(separator: "\n").filter { $0.contains("ctxt_switches") }
                .compactMap { $0.split(separator: "\t").last.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) } }.reduce(0, +)
        }
        if let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
           let close = stat.lastIndex(of: ")") {
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            cpuTicks = (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
        }
    }

    /// Switches since `before`, of threads that lived through both samples or started since.
    func wakeups(since before: ThreadCounters) -> Int {
        switches.reduce(0) { $0 + $1.value - (before.switches[$1.key] ?? 0) }
    }
}

/// Shared between the writer and the test: whether the writer is done.
final class WriterProgress: @unchecked Sendable {
    private let lock = NSLock()
    private var done = false
    var isDone: Bool { lock.withLock { done } }
    func finish() { lock.withLock { done = true } }
}

/// The app's writes in the stress tests: a random stream of photo and tag changes in
/// transactions of 1 to 40, through a connection of its own.
struct StoreWriter {
    let db: Database
    var rng: FuzzRandom
    let pace: Bool

    init(path: String, seed: UInt64, pace: Bool = true) throws {
        db = try Database(path: path)
        rng = FuzzRandom(seed: seed)
        self.pace = pace
    }

    /// Writes `count` changes; returns how many were made.
    mutating func write(_ count: Int, progress: WriterProgress) throws -> Int {
        defer { progress.finish() }
        var made = 0, names = 0
        while made < count {
            let size = min(count - made, 1 + rng.below(40))
            try db.transaction {
                for _ in 0..<size {
                    names += 1
                    try change(names)
                }
            }
            made += size
            if pace { usleep(UInt32(5_000 + rng.below(20_000))) }
        }
        return made
    }

    private mutating func change(_ n: Int) throws {
        let photos = try db.intScalar("SELECT count(*) FROM photos")
        func anyPhoto() throws -> Int {
            try db.intScalar("SELECT id FROM photos LIMIT 1 OFFSET ?", [.integer(Int64(rng.below(max(photos, 1))))])
        }
        let roll = photos < 5 ? 0 : rng.below(100)  // a few photos first, so the others have something to change
        switch roll {
        case 0..<35:
            try db.run("INSERT INTO photos(userSpecifiedName, path) VALUES (?, ?)", [.text("photo \(n)"), .text("/photos/\(n).jpg")])
        case 35..<55:
            try db.run("UPDATE photos SET userSpecifiedName = ? WHERE id = ?", [.text("renamed \(n)"), .integer(Int64(try anyPhoto()))])
        case 55..<75:
            let tag = "tag \(rng.below(30))"
            try db.run("INSERT OR IGNORE INTO tags(name) VALUES (?)", [.text(tag)])
            try db.run("INSERT OR IGNORE INTO photo_tags(photo_id, tag_id) SELECT ?, id FROM tags WHERE name = ?",
                [.integer(Int64(try anyPhoto())), .text(tag)])
        case 75..<80:
            try db.run("DELETE FROM photo_tags WHERE rowid = (SELECT rowid FROM photo_tags ORDER BY random() LIMIT 1)")
        case 80..<85:
            try db.run("UPDATE OR IGNORE tags SET name = ? WHERE id = (SELECT id FROM tags ORDER BY random() LIMIT 1)", [.text("tag \(n)")])
        case 85..<95:
            let victim = Int64(try anyPhoto())
            try db.run("DELETE FROM photo_tags WHERE photo_id = ?", [.integer(victim)])
            try db.run("DELETE FROM photos WHERE id = ?", [.integer(victim)])
        default:
            let victim = try db.intScalar("SELECT id FROM tags ORDER BY random() LIMIT 1")
            try db.run("DELETE FROM photo_tags WHERE tag_id = ?", [.integer(Int64(victim))])
            try db.run("DELETE FROM tags WHERE id = ?", [.integer(Int64(victim))])
        }
    }
}
