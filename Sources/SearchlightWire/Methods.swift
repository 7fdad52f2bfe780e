/// Method names of the wire protocol (DESIGN §4), compiled into every peer.
public enum Method {
    public static let initialize = "initialize"

    public static let indexItems = "index.items"
    public static let indexDeleteIdentifiers = "index.deleteIdentifiers"
    public static let indexDeleteDomains = "index.deleteDomains"
    public static let indexDeleteAll = "index.deleteAll"
    public static let indexBeginBatch = "index.beginBatch"
    public static let indexEndBatch = "index.endBatch"
    public static let indexFetchLastClientState = "index.fetchLastClientState"
    public static let indexFetchData = "index.fetchData"
    public static let indexFetchFileURL = "index.fetchFileURL"

    public static let querySearch = "query.search"
    public static let queryUser = "query.user"
    public static let queryEngaged = "query.engaged"
    /// Loads the semantic model ahead of the first query (`UserQuery.prepare()`).
    public static let queryPrepare = "query.prepare"

    public static let adminStatus = "admin.status"
    public static let adminReindex = "admin.reindex"
    public static let adminErase = "admin.erase"
    public static let adminCheck = "admin.check"
    public static let adminSimulate = "admin.simulate"
    public static let adminUnits = "admin.units"
    public static let adminRequests = "admin.requests"
    public static let adminMonitor = "admin.monitor"
    public static let adminSetIndexing = "admin.setIndexing"
    /// Stops an extension's running copy gracefully and launches it again (`units restart`).
    public static let adminRestartExtension = "admin.restartExtension"
    /// `admin.setOwner {bundle, uid}`: gives a bundle an owner (DESIGN §6 Security).
    public static let adminSetOwner = "admin.setOwner"

    /// Desktop search (DESIGN §12, Docs/Desktop.md). `desktop.setHidden {bundle?, hidden}` keeps a
    /// bundle out of the desktop's search (`searchlight desktop hide|show`); `desktop.register
    /// {bundle?, openWith}` declares the desktop file its items open with, for an app without a
    /// unit (`searchlight register`); both for the bundle's owner (role app) or an administrator.
    public static let desktopSetHidden = "desktop.setHidden"
    public static let desktopRegister = "desktop.register"
    /// `desktop.resolve {bundle?, identifier}` -> `{bundle, item?, openWith?, openWithSource?}`:
    /// what opening an item needs (role desktop, or the bundle's app, or an administrator).
    public static let desktopResolve = "desktop.resolve"
    /// `desktop.settings {bundle?}` -> `{bundles: [{bundle, hidden, openWith?, openWithSource?}]}`.
    public static let desktopSettings = "desktop.settings"
    /// `desktop.staleItems {bundle, index?, identifiers}`: items the desktop left out because their
    /// `file:` contentURL no longer exists (role desktop).
    public static let desktopStaleItems = "desktop.staleItems"

    /// Supervisor -> extension requests; the answer is the acknowledgement.
    public static let extensionReindexAll = "extension.reindexAll"
    public static let extensionReindexIdentifiers = "extension.reindexIdentifiers"
    public static let extensionDataForItem = "extension.dataForItem"
    public static let extensionFileURLForItem = "extension.fileURLForItem"
    /// Supervisor -> extension notifications.
    public static let extensionDidThrottle = "extension.didThrottle"
    public static let extensionDidFinishThrottle = "extension.didFinishThrottle"
    public static let extensionShutdown = "extension.shutdown"
    /// Extension -> supervisor (and supervisor -> a waiting admin client) progress notification.
    public static let progress = "$/progress"
    /// Supervisor -> admin client: one event of `admin.monitor`'s stream.
    public static let adminEvent = "admin.event"
    /// Supervisor -> client, just before it closes the connection: `{reason: "idle", seconds}`.
    /// Nothing sent after it is read, so a call that then fails was never processed and the SDK
    /// sends it again on a new connection.
    public static let closing = "$/closing"
}

/// The environment a supervisor-launched extension finds (DESIGN §5).
public enum ExtensionEnvironment {
    public static let fd = "SEARCHLIGHT_EXTENSION_FD"
    public static let label = "SEARCHLIGHT_EXTENSION_LABEL"
    public static let bundleIdentifier = "SEARCHLIGHT_BUNDLE_IDENTIFIER"
    /// The descriptor number of the inherited socket.
    public static let descriptor: Int32 = 3
}

/// The protocol version of this contract, and the roles a connection may take.
public enum Protocol {
    public static let version = 1
    public static let roles: Set<String> = ["app", "extension", "admin", "desktop"]
}
