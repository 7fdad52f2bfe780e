import Foundation
import RecentFilesCore
import SearchlightKit

/// Brings the daemon's user activities in line with recently-used.xbel: saves the entries that
/// are new or changed (over an app connection for each entry's app, as that app would), deletes
/// those no longer in the file, and remembers what it imported in a state file of its own
/// (`$XDG_STATE_HOME/searchlight-recentfiles/imported.json`), so that an unchanged entry costs
/// nothing. When the file cannot be read (refused, malformed, too large) nothing changes.
struct RecentFilesImporter: Sendable {
    var xbelPath: String
    var statePath: String
    var socketPath: String?
    var plan: RecentActivityPlan
    var reader = XBELReader()

    struct Outcome: Sendable {
        var saved = 0
        var deleted = 0
        var unchanged = 0
    }

    /// The sample's own bundle: where an entry goes when no app is known for it, and where every
    /// entry goes under a system daemon.
    var fallbackBundle: String

    init(environment: [String: String], fallbackBundle: String, socketPath: String?) {
        self.fallbackBundle = fallbackBundle
        xbelPath = environment["SEARCHLIGHT_RECENT_FILES"] ?? XBELReader.defaultPath(environment: environment)
        let stateHome = environment["XDG_STATE_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? (environment["HOME"] ?? NSHomeDirectory()) + "/.local/state"
        statePath = stateHome + "/searchlight-recentfiles/imported.json"
        self.socketPath = socketPath
        plan = RecentActivityPlan(fallbackBundle: fallbackBundle, applications: ApplicationMap(folders: ApplicationMap.folders(environment: environment)))
    }

    /// One pass. Throws (having changed nothing) when the file is refused or malformed.
    func sync() async throws -> Outcome {
        let bookmarks = try reader.read(path: xbelPath)
        var imported = loadState()
        var outcome = Outcome()
        var connections: [String: SearchlightConnection] = [:]
        func connection(_ bundle: String) -> SearchlightConnection {
            if let c = connections[bundle] { return c }
            let c = SearchlightConnection(role: .app(bundleIdentifier: bundle), socketPath: socketPath)
            connections[bundle] = c
            return c
        }
        defer { for c in connections.values { Task { await c.close() } } }
        // Under a system daemon an app connection's first write claims a bundle for its user:
        // saving as other apps (org.gnome.gedit) would claim their bundles for this user. There,
        // every entry is saved to the sample's own bundle (the unit's), never another app's.
        let mode = try await connection(fallbackBundle).open()["capabilities"]?["mode"]?.stringValue
        let wanted = plan.activities(bookmarks, ownBundleOnly: mode == "system")
        var keep: [String: [String: String]] = [:]
        for a in wanted {
            keep[a.bundle, default: [:]][a.persistentIdentifier] = a.fingerprint
            if imported[a.bundle]?[a.persistentIdentifier] == a.fingerprint { outcome.unchanged += 1; continue }
            var request = ActivitySave(persistentIdentifier: a.persistentIdentifier, activityType: "org.freedesktop.recent-file")
            request.title = a.title
            if !a.application.isEmpty { request.keywords = [a.application] }
            var attributes = AttributeSet(contentType: a.contentType)
            attributes.contentURL = URL(string: a.contentURL)
            attributes.lastUsedDate = a.lastUsed
            attributes[custom: "recentCount"] = .number(Double(a.count))
            request.attributeSet = attributes
            request.eligibleForSearch = true
            _ = try await connection(a.bundle).send(request)
            imported[a.bundle, default: [:]][a.persistentIdentifier] = a.fingerprint
            outcome.saved += 1
            try saveState(imported)  // progress kept: an interrupted pass does not redo it
        }
        for (bundle, ids) in imported {
            // Under a system daemon nothing is written to another app's bundle, deletes neither (a
            // delete would claim it too): entries a user-mode run left in its state are forgotten
            // (they were saved to the user daemon, not to this one).
            if mode == "system" && bundle != fallbackBundle {
                imported[bundle] = nil
                continue
            }
            let gone = ids.keys.filter { keep[bundle]?[$0] == nil }.sorted()
            guard !gone.isEmpty else { continue }
            for start in stride(from: 0, to: gone.count, by: ActivityLimits.deleteIdentifiers) {
                let part = Array(gone[start..<min(gone.count, start + ActivityLimits.deleteIdentifiers)])
                _ = try await connection(bundle).send(ActivityDelete(persistentIdentifiers: part))
            }
            outcome.deleted += gone.count
            for id in gone { imported[bundle]?[id] = nil }
            if imported[bundle]?.isEmpty == true { imported[bundle] = nil }
            try saveState(imported)
        }
        try saveState(imported)
        return outcome
    }

    // MARK: - State

    /// bundle -> persistent identifier -> fingerprint, as imported.
    func loadState() -> [String: [String: String]] {
        guard let data = FileManager.default.contents(atPath: statePath),
              let state = try? JSONDecoder().decode([String: [String: String]].self, from: data) else { return [:] }
        return state
    }

    /// Written whole, then renamed over the old one.
    func saveState(_ state: [String: [String: String]]) throws {
        let folder = (statePath as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let data = try JSONEncoder().encode(state)
        try data.write(to: URL(fileURLWithPath: statePath), options: .atomic)
    }
}
