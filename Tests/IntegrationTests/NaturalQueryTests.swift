#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit
import SearchlightWire

/// Issue 37: semantic search as an app meets it. A recipes app's items and the seeds' example
/// (Apple's CSUserQuery example: "windsurfing carmel"), searched as a person types: a query of
/// several words where some are absent from the index, and a query that shares no word with what
/// it should find. Each query's top 5 must hold the items a person would expect, in every state:
/// the static tier (no `prepare()`), after `UserQuery.prepare(index:)` (a transformer query on
/// static document vectors), and after refinement (both from the transformer).
@Suite("Natural-language user queries (issue 37)", .onOwnThreads, .serialized)
struct NaturalQueryTests {
    static func item(_ id: String, _ title: String, _ description: String, _ text: String) -> String {
        let set: JSONValue = ["title": .string(title), "contentDescription": .string(description), "textContent": .string(text)]
        return JSONValue.object(["uniqueIdentifier": .string(id), "attributeSet": set]).jsonString
    }

    /// 16 recipes: four soups (two without the word "soup"), a stew, three salads, four desserts,
    /// three breakfasts and a smoothie.
    static let recipes = [
        item("chicken-noodle", "Chicken noodle soup", "A classic homemade soup",
             "Simmer chicken, carrots, celery and egg noodles in a rich broth. Comforting when you have a cold."),
        item("french-onion", "French onion soup", "Caramelised onions in beef broth",
             "Slowly caramelise onions, add broth and thyme, top with toasted bread and melted gruyère, then grill."),
        item("minestrone", "Minestrone", "Hearty Italian vegetable and bean broth with pasta",
             "Beans, tomatoes, courgette and small pasta simmered together; serve hot with parmesan."),
        item("dal", "Red lentil dal", "Spiced Indian lentils",
             "Red lentils cooked with turmeric, cumin, garlic and ginger until creamy; serve hot with rice or naan."),
        item("beef-stew", "Beef stew", "Slow-cooked beef with root vegetables",
             "Brown the beef, add potatoes, carrots and red wine, and braise for three hours. A hearty winter dinner."),
        item("greek-salad", "Greek salad", "Tomatoes, cucumber, olives and feta",
             "Chop tomatoes, cucumber and red onion, add olives and a slab of feta, dress with olive oil and oregano."),
        item("caesar-salad", "Caesar salad", "Crisp romaine with a creamy anchovy dressing",
             "Toss romaine lettuce with croutons, parmesan and a dressing of anchovies, egg yolk, lemon and garlic."),
        item("caprese", "Caprese salad", "Mozzarella, tomato and basil",
             "Slice ripe tomatoes and fresh mozzarella, layer with basil leaves, drizzle with olive oil."),
        item("lava-cake", "Chocolate lava cake", "Rich dessert with a molten centre",
             "Melt dark chocolate and butter, whisk with eggs and sugar, bake briefly so the middle stays runny."),
        item("brownies", "Chocolate brownies", "Fudgy squares",
             "Melt chocolate and butter, stir in sugar, eggs and flour, bake until just set, cut into squares."),
        item("tiramisu", "Tiramisu", "Italian layered dessert with coffee and mascarpone",
             "Dip ladyfingers in espresso, layer with sweetened mascarpone cream, dust with cocoa and chill."),
        item("apple-crumble", "Apple crumble", "Baked apples under a buttery topping",
             "Toss sliced apples with sugar and cinnamon, cover with a crumbly mix of flour, butter and oats, bake until golden."),
        item("pancakes", "Buttermilk pancakes", "Fluffy breakfast pancakes",
             "Whisk flour, buttermilk, eggs and a little sugar, cook on a hot griddle, serve with maple syrup."),
        item("oats", "Overnight oats", "A make-ahead breakfast",
             "Stir rolled oats with milk and yoghurt, leave in the fridge overnight, top with berries in the morning."),
        item("eggs", "Scrambled eggs on toast", "A quick breakfast",
             "Whisk eggs with a splash of milk, stir gently over low heat, pile onto buttered toast."),
        item("smoothie", "Banana smoothie", "A quick breakfast drink",
             "Blend a ripe banana with milk, yoghurt and a spoon of honey until smooth."),
    ]

    /// The seeds' example among unrelated items (the Debian check's top hit was a submarine simulator).
    static let activities = [
        item("windsurfing", "Windsurfing lessons at Carmel beach", "Learn to windsurf with a certified instructor",
             "Two-hour beginner lessons on the bay, board and wetsuit included."),
        item("submarine", "Submarine simulator", "A game about commanding a submarine",
             "Dive, navigate by sonar and command your crew in this naval simulation."),
        item("pottery", "Pottery workshop", "Throw your first bowl on the wheel",
             "An evening class in a downtown studio; clay and firing included."),
        item("chess-club", "Chess club", "Weekly chess evenings",
             "Casual games and tournaments for every level in the community hall."),
        item("hiking", "Guided mountain hike", "A day in the hills",
             "A guided walk through the forest to the summit, lunch included."),
        item("wine", "Wine tasting", "Local vineyard tour",
             "Taste five wines from the valley with the winemaker."),
    ]

    /// Each query and the items a person expects among its first five: `all` must all be there,
    /// and at least `atLeast` of `some`.
    struct Expectation {
        var query: String
        var all: [String] = []
        var some: [String] = []
        var atLeast = 0
        /// `some` is asked of the refined index only: the static table alone does not rank them
        /// in the top 5 (the reason a small index is refined soon after donation).
        var someOnceRefined = false
    }

    static let recipeExpectations = [
        // "chocolate" is in two titles, "dessert" in two descriptions: the chocolate desserts
        // first, another dessert after them.
        Expectation(query: "chocolate dessert", all: ["lava-cake", "brownies"], some: ["tiramisu", "apple-crumble"], atLeast: 1),
        // No word of it in the recipes (but "cold"): the warm dishes by meaning.
        Expectation(query: "something warm for a cold evening",
                    some: ["chicken-noodle", "french-onion", "minestrone", "dal", "beef-stew"], atLeast: 2),
        // Two soups say so; the minestrone and the dal are soups a person expects too (the static
        // table puts a salad nearer "soup" than either: refined, the minestrone is there).
        Expectation(query: "soup", all: ["chicken-noodle", "french-onion"], some: ["minestrone", "dal"], atLeast: 1, someOnceRefined: true),
        Expectation(query: "sweet treat", some: ["lava-cake", "brownies", "tiramisu", "apple-crumble"], atLeast: 2),
    ]

    static let activityExpectations = [
        Expectation(query: "windsurfing carmel", all: ["windsurfing"]),
        Expectation(query: "water sports by the ocean", all: ["windsurfing"]),
    ]

    static func top5(_ query: String, _ daemon: DaemonProcess, bundle: String) async throws -> [String] {
        let r = try await runCLI(["search", bundle, query, "--json"], socket: daemon.socket)
        let json = (try? JSONValue.parse(Array(r.stdout.utf8))) ?? .null
        return (json["items"]?.arrayValue ?? []).prefix(5).compactMap { $0["uniqueIdentifier"]?.stringValue }
    }

    /// Checks every expectation; `state` names the state in the failure messages.
    static func check(_ expectations: [Expectation], bundle: String, state: String, _ daemon: DaemonProcess) async throws {
        for e in expectations {
            let top = try await top5(e.query, daemon, bundle: bundle)
            print("issue 37 [\(state)] \(e.query): \(top)")
            for id in e.all { #expect(top.contains(id), "[\(state)] \"\(e.query)\": \(id) not in the top 5 \(top)") }
            guard !e.someOnceRefined || state == "refined" else { continue }
            let found = e.some.filter(top.contains)
            #expect(found.count >= e.atLeast, "[\(state)] \"\(e.query)\": \(found) of \(e.some) in the top 5 \(top), \(e.atLeast) expected")
        }
    }

    static func donate(_ daemon: DaemonProcess, _ dir: TempDir) async throws {
        try await SemanticSearchTests.importItems(recipes, bundle: "com.example.recipes", daemon: daemon, dir: dir) {
            try await runCLI($0, socket: daemon.socket)
        }
        try await SemanticSearchTests.importItems(activities, bundle: "com.example.activities", daemon: daemon, dir: dir) {
            try await runCLI($0, socket: daemon.socket)
        }
    }

    static func checkAll(state: String, _ daemon: DaemonProcess) async throws {
        try await check(recipeExpectations, bundle: "com.example.recipes", state: state, daemon)
        try await check(activityExpectations, bundle: "com.example.activities", state: state, daemon)
    }

    @Test("static tier: a query of several words with one absent, and one by meaning alone, find the expected items")
    func staticTier() async throws {
        let dir = TempDir()
        let daemon = try await DaemonProcess(arguments: ["--model-dir", try SemanticSearchTests.staticModelDirectory(dir)], dir: dir)
        try await Self.donate(daemon, dir)
        try await Self.checkAll(state: "static", daemon)
        // The lexical side alone: best-match, so a word absent from the index no longer empties it.
        let lexical = try await runCLI(["search", "com.example.recipes", "chocolate dessert", "--no-semantic", "--json"], socket: daemon.socket)
        let ids = ((try? JSONValue.parse(Array(lexical.stdout.utf8)))?["items"]?.arrayValue ?? []).compactMap { $0["uniqueIdentifier"]?.stringValue }
        #expect(Set(ids.prefix(2)) == ["lava-cake", "brownies"], "items with both words first: \(ids)")
        #expect(Set(ids) == ["lava-cake", "brownies", "tiramisu"], "the items with either word: \(ids)")
        // The CSSearchQuery language keeps its exact semantics: every word.
        let exact = try await runCLI(["query", "com.example.recipes", "textContent == \"*chocolate*\"cd && contentDescription == \"*dessert*\"cd", "--json"],
            socket: daemon.socket)
        #expect(exact.status == 0 && exact.stdout.contains("lava-cake") && !exact.stdout.contains("brownies") && !exact.stdout.contains("tiramisu"),
            "\(exact.stdout) \(exact.stderr)")
    }

    @Test("with the transformer: before prepare(), after it (documents still static) and after refinement, the same items found")
    func preparedAndRefined() async throws {
        guard let model = SemanticSearchTests.transformerModel else { return }
        let dir = TempDir()
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model], dir: dir)
        try await Self.donate(daemon, dir)
        try await Self.checkAll(state: "static", daemon)
        let index = daemon.index("com.example.recipes")
        let state = try await UserQuery.prepare(index: index)
        #expect(state.state == "loaded", "\(state)")
        await index.close()
        try await Self.checkAll(state: "prepared", daemon)
        let mark = daemon.log.count
        let idle = try await runCLI(["simulate", "idle", "--json"], socket: daemon.socket)
        #expect(idle.status == 0, "\(idle.stderr)")
        _ = try await daemon.waitForLog("vectors refined", after: mark)
        // Both bundles refined (one line each), then the checks on transformer vectors.
        let json = try JSONValue.parse(Array(try await runCLI(["status", "--json"], socket: daemon.socket).stdout.utf8))
        var pending = (json["bundles"]?.arrayValue ?? []).filter { b in
            (b["indexes"]?.arrayValue ?? []).contains { $0["refined"]?.intValue != $0["vectors"]?.intValue }
        }
        var after = daemon.log.count
        while !pending.isEmpty {
            _ = try await daemon.waitForLog("vectors refined", after: after)
            after = daemon.log.count
            let again = try JSONValue.parse(Array(try await runCLI(["status", "--json"], socket: daemon.socket).stdout.utf8))
            pending = (again["bundles"]?.arrayValue ?? []).filter { b in
                (b["indexes"]?.arrayValue ?? []).contains { $0["refined"]?.intValue != $0["vectors"]?.intValue }
            }
        }
        try await Self.checkAll(state: "refined", daemon)
    }
    /// A fake `/proc/pressure` (the load tests' seam) with each resource's `some avg10`.
    static func writePressure(_ root: String, cpu: Double, memory: Double) throws {
        try FileManager.default.createDirectory(atPath: root + "/pressure", withIntermediateDirectories: true)
        for (name, v) in [("cpu", cpu), ("io", 0.0), ("memory", memory)] {
            try "some avg10=\(v) avg60=0.00 avg300=0.00 total=1\n".write(toFile: root + "/pressure/" + name, atomically: true, encoding: .utf8)
        }
    }

    /// Each bundle's (vectors, refined), from `status`.
    static func counts(_ daemon: DaemonProcess) async throws -> [String: (vectors: Int, refined: Int)] {
        let json = try JSONValue.parse(Array(try await runCLI(["status", "--json"], socket: daemon.socket).stdout.utf8))
        var out: [String: (vectors: Int, refined: Int)] = [:]
        for b in json["bundles"]?.arrayValue ?? [] {
            guard let name = b["bundle"]?.stringValue, let i = b["indexes"]?.arrayValue?.first else { continue }
            out[name] = (i["vectors"]?.intValue ?? -1, i["refined"]?.intValue ?? -1)
        }
        return out
    }

    @Test("a busy machine: the small indexes are refined by the low-priority share (never idle, CPU pressure over the pause mark); memory pressure pauses it; the refined expectations hold")
    func refinedOnBusyMachine() async throws {
        guard let model = SemanticSearchTests.transformerModel else { return }
        let dir = TempDir()
        let proc = dir.path + "/proc"
        // CPU pressure over the pause mark for the whole test (idle maintenance never starts),
        // and memory pressure over its pause mark while the items come in.
        try Self.writePressure(proc, cpu: 70, memory: 40)
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model, "--proc-root", proc, "--load-interval", "0.5",
            "--refine-share-items", "10000", "--refine-share-after", "1"], dir: dir)
        let mark = daemon.log.count
        try await Self.donate(daemon, dir)
        // The share looks at the recipes once they settled, sees the memory pressure and gives way.
        let pausedLine = try await daemon.waitForLog("memory pressure", after: mark, timeout: 120)
        #expect(pausedLine.contains("refinement share paused"), "\(pausedLine)")
        // Two samples of the load later, still nothing refined.
        let samples = try JSONValue.parse(Array(try await runCLI(["status", "--json"], socket: daemon.socket).stdout.utf8))["throttle"]?["samples"]?.intValue ?? 0
        try await RefinementIntegrationTests.until("two more load samples", timeout: 60) {
            try await RefinementIntegrationTests.status(daemon)["throttle"]?["samples"]?.intValue ?? 0 >= samples + 2
        }
        let held = try await Self.counts(daemon)
        #expect(held["com.example.recipes"]?.refined == 0 && held["com.example.activities"]?.refined == 0, "refined under memory pressure: \(held)")
        let share = try await RefinementIntegrationTests.status(daemon)["refinementShare"]
        #expect(share?["state"]?.stringValue == "paused", "\(String(describing: share))")

        // Memory pressure gone, the CPU still busy: the share refines both indexes to the end.
        try Self.writePressure(proc, cpu: 70, memory: 0)
        try await RefinementIntegrationTests.until("every vector refined by the share", timeout: 600) {
            let c = try await Self.counts(daemon)
            return c.count == 2 && c.values.allSatisfy { $0.vectors > 0 && $0.refined == $0.vectors }
        }
        let status = try await RefinementIntegrationTests.status(daemon)
        #expect(status["throttle"]?["state"]?.stringValue == "paused", "the machine counted as busy throughout: \(String(describing: status["throttle"]))")
        #expect(status["maintenance"]?["running"]?.boolValue == false && status["maintenance"]?["lastSummary"] == nil,
            "no idle maintenance ran: \(String(describing: status["maintenance"]))")
        #expect(daemon.log.dropFirst(mark).contains { $0.contains("vectors refined by the share") && $0.contains("com.example.recipes") })
        try await Self.checkAll(state: "refined", daemon)
    }
}

