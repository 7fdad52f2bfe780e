import SearchlightWire

/// The session of an app (`initialize {role: "app", bundleIdentifier}`): it donates to and queries
/// its own bundle, and asks its extension for item data.
final class AppSession: BundleSession {
    let client: ClientSession
    /// The app's bundle, named at the handshake: every call acts on it.
    let bundle: String
    let calls: BundleCalls

    init(client: ClientSession, bundle: String) {
        self.client = client
        self.bundle = bundle
        calls = BundleCalls(client: client, caller: .app(bundle: bundle))
    }

    static let handlers: HandlerTable<AppSession> = {
        var table = HandlerTable<AppSession>()
        table.addIndexMethods()
        table.addQueryMethods()
        table.addItemDataMethods()
        table.addDesktopSettingsMethods()
        table.addActivityMethods()
        return table
    }()
}
