import Foundation
import Synchronization

/// What the user is doing in an app, kept by `searchlightd` as the app's recent history and found
/// by the desktop's search: NSUserActivity's search side, on Linux (DESIGN §13, Docs/SDK.md
/// "User activities").
///
/// ```swift
/// UserActivity.configure(bundleIdentifier: "com.example.notes")
/// let activity = UserActivity(activityType: "com.example.notes.view")
/// activity.title = "Trip to Natural Bridges"
/// activity.persistentIdentifier = "note-42"
/// activity.userInfo = ["note": "42"]
/// activity.isEligibleForSearch = true
/// try await activity.becomeCurrent()
/// ```
///
/// Opening the activity from the desktop's search launches the app's `OpenWith` desktop file with
/// `searchlight-activity:BUNDLE/PERSISTENT-ID`; the app reads it back with `UserActivity(uri:)` or
/// `fromLaunchArguments()`, and the saved fields with `restore()`.
///
/// An activity whose `contentAttributeSet.relatedUniqueIdentifier` names an item the app donated
/// is shown once, as that item, which ranks as recently used.
public final class UserActivity: Sendable {
    /// The URI scheme of an opened activity.
    public static let uriScheme = "searchlight-activity"

    /// Which app the activities belong to, and where the daemon is: set once, at launch.
    public struct Configuration: Sendable, Hashable {
        public var bundleIdentifier: String
        public var socketPath: String?
        public init(bundleIdentifier: String, socketPath: String? = nil) {
            self.bundleIdentifier = bundleIdentifier
            self.socketPath = socketPath
        }
    }

    private static let configuration = Mutex<Configuration?>(nil)
    private static let connections = Mutex<[Configuration: SearchlightConnection]>([:])

    /// Sets the app (bundle) whose activities these are, and the daemon's socket (default: the
    /// user's daemon, as `SearchableIndex`). Call it before the first activity.
    public static func configure(bundleIdentifier: String, socketPath: String? = nil) {
        configuration.withLock { $0 = Configuration(bundleIdentifier: bundleIdentifier, socketPath: socketPath) }
    }

    /// The configured app, else the bundle of a supervisor-launched extension
    /// (`SEARCHLIGHT_BUNDLE_IDENTIFIER`).
    static func currentConfiguration() throws -> Configuration {
        if let c = configuration.withLock({ $0 }) { return c }
        if let b = ProcessInfo.processInfo.environment[ExtensionEnvironment.bundleIdentifier], Names.validBundle(b) {
            return Configuration(bundleIdentifier: b)
        }
        throw SearchlightError(.invalidRequest, "no app is configured for user activities; call UserActivity.configure(bundleIdentifier:) first")
    }

    /// One connection per app and socket, shared by its activities (becomeCurrent is frequent).
    static func connection(_ c: Configuration) -> SearchlightConnection {
        connections.withLock { all in
            if let found = all[c] { return found }
            let made = SearchlightConnection(role: .app(bundleIdentifier: c.bundleIdentifier), socketPath: c.socketPath)
            all[c] = made
            return made
        }
    }

    private struct State: Sendable {
        var title: String?
        var keywords: Set<String> = []
        var userInfo: [String: JSONValue]?
        var contentAttributeSet: AttributeSet?
        var isEligibleForSearch = false
        var expirationDate: Date?
        var webpageURL: URL?
        var persistentIdentifier: String?
        var isCurrent = false
        var isValid = true
    }

    private let state = Mutex(State())
    /// The kind of activity, reverse DNS (`com.example.notes.view`).
    public let activityType: String
    /// The app and daemon it belongs to (`configure`, or the one it was read back for).
    public let configuration: Configuration?
    /// The app it belongs to.
    public var bundleIdentifier: String? { configuration?.bundleIdentifier }
    /// The history's key when `persistentIdentifier` is not set: one per instance.
    private let automaticIdentifier = "auto-" + UUID().uuidString

    /// An activity of the app set with `configure` (read when it is made).
    public init(activityType: String) {
        self.activityType = activityType
        configuration = try? Self.currentConfiguration()
    }

    /// An activity of the app and daemon named here (several apps, or several daemons, in one process).
    public init(activityType: String, configuration: Configuration) {
        self.activityType = activityType
        self.configuration = configuration
    }

    private init(activityType: String, configuration: Configuration, persistentIdentifier: String) {
        self.activityType = activityType
        self.configuration = configuration
        state.withLock { $0.persistentIdentifier = persistentIdentifier }
    }

    public var title: String? { get { state.withLock { $0.title } } set { state.withLock { $0.title = newValue } } }
    public var keywords: Set<String> { get { state.withLock { $0.keywords } } set { state.withLock { $0.keywords = newValue } } }
    /// JSON values that restore the activity in the app (at most 16 KiB encoded).
    public var userInfo: [String: JSONValue]? { get { state.withLock { $0.userInfo } } set { state.withLock { $0.userInfo = newValue } } }
    /// The searchable metadata; its `relatedUniqueIdentifier` ties the activity to a donated item.
    public var contentAttributeSet: AttributeSet? {
        get { state.withLock { $0.contentAttributeSet } } set { state.withLock { $0.contentAttributeSet = newValue } }
    }
    /// Whether the activity is kept in the searchable history (false, as NSUserActivity's).
    public var isEligibleForSearch: Bool {
        get { state.withLock { $0.isEligibleForSearch } } set { state.withLock { $0.isEligibleForSearch = newValue } }
    }
    /// When it leaves the history (at most a year ahead; default: the daemon's item default, 30 days).
    public var expirationDate: Date? { get { state.withLock { $0.expirationDate } } set { state.withLock { $0.expirationDate = newValue } } }
    /// An `http:`/`https:` page showing the same thing: what opens when the app declares no `OpenWith`.
    public var webpageURL: URL? { get { state.withLock { $0.webpageURL } } set { state.withLock { $0.webpageURL = newValue } } }
    /// The activity's key in the history, for `deleteSavedUserActivities(withPersistentIdentifiers:)`
    /// and the `searchlight-activity:` URI; without one, the instance gets its own.
    public var persistentIdentifier: String? {
        get { state.withLock { $0.persistentIdentifier } } set { state.withLock { $0.persistentIdentifier = newValue } }
    }
    /// Set by `becomeCurrent()`, cleared by `resignCurrent()` and `invalidate()`.
    public var isCurrent: Bool { state.withLock { $0.isCurrent } }

    /// The key the history stores it under.
    public var savedIdentifier: String { persistentIdentifier ?? automaticIdentifier }

    /// `searchlight-activity:BUNDLE/PERSISTENT-ID` (both percent-encoded); nil without an app.
    public var uri: String? {
        guard let bundleIdentifier else { return nil }
        return Self.uriScheme + ":" + SearchableItemActivity.percentEncode(bundleIdentifier) + "/"
            + SearchableItemActivity.percentEncode(savedIdentifier)
    }

    /// The request this activity saves as (checked here as the daemon checks it).
    public func saveRequest(current: Bool) throws -> ActivitySave {
        let s = state.withLock { $0 }
        var r = ActivitySave(persistentIdentifier: savedIdentifier, activityType: activityType)
        r.title = s.title
        r.keywords = s.keywords.isEmpty ? nil : s.keywords.sorted()
        r.userInfo = s.userInfo.map { .object($0) }
        r.attributeSet = s.contentAttributeSet
        r.expirationDate = s.expirationDate
        r.webpageURL = s.webpageURL?.absoluteString
        r.eligibleForSearch = s.isEligibleForSearch
        r.current = current
        return try ActivitySave.decode(r.params)
    }

    /// Marks this the app's current activity: saved in the history (when eligible for search),
    /// and counted as the user's engagement with it. Returns once the daemon has committed it.
    public func becomeCurrent() async throws {
        guard state.withLock({ $0.isValid }) else {
            throw SearchlightError(.invalidRequest, "this activity was invalidated; make a new UserActivity")
        }
        let request = try saveRequest(current: true)
        _ = try await Self.send(request, configuration)
        state.withLock { $0.isCurrent = true }
    }

    /// No longer the current activity; it stays in the history.
    public func resignCurrent() async throws {
        guard state.withLock({ $0.isCurrent }) else { return }
        _ = try await Self.send(ActivityResign(persistentIdentifier: savedIdentifier), configuration)
        state.withLock { $0.isCurrent = false }
    }

    /// Resigns it and ends it: it cannot become current again (its saved history stays).
    public func invalidate() async {
        try? await resignCurrent()
        state.withLock { $0.isValid = false }
    }

    /// Removes these activities from the app's history (`configuration`: default, `configure`'s).
    public static func deleteSavedUserActivities(withPersistentIdentifiers identifiers: [String],
                                                 configuration: Configuration? = nil) async throws {
        guard !identifiers.isEmpty else { return }
        for start in stride(from: 0, to: identifiers.count, by: ActivityLimits.deleteIdentifiers) {
            let part = Array(identifiers[start..<min(identifiers.count, start + ActivityLimits.deleteIdentifiers)])
            _ = try await send(ActivityDelete(persistentIdentifiers: part), configuration)
        }
    }

    /// Removes every activity of the app's history (`configuration`: default, `configure`'s).
    public static func deleteAllSavedUserActivities(configuration: Configuration? = nil) async throws {
        _ = try await send(ActivityDeleteAll(), configuration)
    }

    private static func send<R: WireRequest>(_ request: R, _ configuration: Configuration?) async throws -> R.Response {
        let c = try configuration ?? currentConfiguration()
        return try await connection(c).send(request)
    }

    // MARK: - Opened from the desktop

    /// Reads a `searchlight-activity:BUNDLE/PERSISTENT-ID` URI (the scheme in any letter case);
    /// nil when it is not one. Its other fields are empty until `restore()`.
    public convenience init?(uri: String) {
        let prefix = Self.uriScheme + ":"
        guard uri.utf8.count > prefix.utf8.count, uri.prefix(prefix.count).lowercased() == prefix,
              let ref = SearchableItemActivity(resultID: String(uri.dropFirst(prefix.count))) else { return nil }
        self.init(activityType: "", configuration: Configuration(bundleIdentifier: ref.bundleIdentifier), persistentIdentifier: ref.uniqueIdentifier)
    }

    /// The activity named by the first `searchlight-activity:` URI among an app's launch arguments.
    public static func fromLaunchArguments(_ arguments: [String] = CommandLine.arguments) -> UserActivity? {
        arguments.dropFirst().lazy.compactMap { UserActivity(uri: $0) }.first
    }

    /// The saved activity as the daemon keeps it (`activity.resolve`), with its type, title,
    /// keywords, userInfo, webpageURL and attributes; nil when it is no longer in the history.
    /// `socketPath`: the daemon's, when not the configured one (the default daemon).
    public func restore(socketPath: String? = nil) async throws -> UserActivity? {
        guard let bundleIdentifier else { return nil }
        let c = Configuration(bundleIdentifier: bundleIdentifier, socketPath: socketPath ?? (try? Self.currentConfiguration())?.socketPath)
        let answer = try await Self.connection(c).send(ActivityResolve(persistentIdentifier: savedIdentifier))
        guard let item = answer.item, let attributes = item["attributeSet"]?.objectValue else { return nil }
        let custom = attributes["custom"]?.objectValue ?? [:]
        let restored = UserActivity(activityType: custom["activityType"]?.stringValue ?? "", configuration: c,
                                    persistentIdentifier: savedIdentifier)
        var set = AttributeSet(validatedValues: attributes.filter { $0.key != "custom" })
        set.lastUsedDate = nil
        let ownContent = custom["activityOpensWebpage"]?.boolValue != true
        if !ownContent { set.contentURL = nil }
        if let related = custom["activityRelatedItem"]?.stringValue { set.relatedUniqueIdentifier = related }
        restored.state.withLock { s in
            s.title = set.title
            s.keywords = Set(set.keywords ?? [])
            s.userInfo = custom["activityUserInfo"]?.stringValue.flatMap { try? JSONValue.parse($0) }?.objectValue
            s.webpageURL = custom["activityWebpageURL"]?.stringValue.flatMap(URL.init(string:))
            s.contentAttributeSet = set
            s.isEligibleForSearch = true
            s.expirationDate = item["expirationDate"]?.stringValue.flatMap(ISO8601.parse)
        }
        return restored
    }
}
