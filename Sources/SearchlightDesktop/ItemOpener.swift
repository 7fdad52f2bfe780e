import Foundation
import SearchlightKit
#if canImport(Glibc)
import Glibc
#endif

/// Opens an item found by the desktop's search in the app that donated it: the
/// `continueUserActivity` of Linux (DESIGN §12, Docs/Desktop.md). Shared by `searchlight-desktop`
/// (GNOME Shell's ActivateResult, KRunner's Run) and `searchlight open`.
///
/// 1. The bundle declares the desktop file its items open with (unit key `OpenWith`, or
///    `searchlight register BUNDLE --open-with ID`) and it is installed: it is launched with one
///    argument, the item's `searchlight-item:BUNDLE/IDENTIFIER` URI, by `gio launch` — GLib's
///    launcher, the one GNOME Shell itself goes through: the `Exec` field codes (`%u`/`%U` get the
///    URI), `Path`, `Terminal`, and for `DBusActivatable=true` apps the D-Bus activation
///    (`org.freedesktop.Application.Open` with the URI) instead of `Exec`.
/// 2. Else the item's `contentURL`, with the desktop's default handler for it: `gio open URL`
///    (the handler `mimeapps.list` names for its type or scheme), or `xdg-open URL` on a system
///    without GLib's `gio` tool (package libglib2.0-bin).
/// 3. Else nothing can open it: an error that says so.
public struct ItemOpener: Sendable {
    /// What opening an item does.
    public enum Action: Sendable, Equatable {
        /// Launch the app's desktop file (at `path`) with the item's URI.
        case application(desktopID: String, path: String, uri: String)
        /// Open the item's content URL with the default handler.
        case contentURL(String)
    }

    public struct Opened: Sendable {
        public var action: Action
        /// The command that was run.
        public var command: [String]
        /// Set when the declared desktop file is not installed and the content URL was opened instead.
        public var note: String?
    }

    /// Nothing could open the item, or the launcher failed; `description` says why and what to do.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    public var environment: [String: String]
    /// How long the launcher (`gio`, `xdg-open`) may take to hand over before it is left to run.
    public var launcherTimeout: TimeInterval = 10

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.environment = environment
    }

    /// Another user's item: opening it would run what that user declared (or donated) as the
    /// user opening it. Thrown by `plan` and `open` unless `allowOtherUsersItems`.
    public struct OtherUsersItem: Error, Sendable, CustomStringConvertible {
        public var ownerUID: UInt32
        public var openerUID: UInt32
        /// What opening would do.
        public var action: Action
        public var description: String {
            let what: String
            switch action {
            case .application(let id, let path, let uri): what = "launch \(id) (\(path)) with \(uri)"
            case .contentURL(let url): what = "open \(url.prefix(200)) with the default handler"
            }
            return "the item belongs to uid \(ownerUID); opening it would \(what) as uid \(openerUID)"
        }
    }

    /// Opening an item of a bundle owned by another uid (`ownerUID`) than the one opening it: off
    /// by default. A desktop file a unit declares is an administrator's choice and is exempt.
    public var allowOtherUsersItems = false

    /// What `open` would do, without doing it. `ownerUID`: the bundle's owner as the daemon
    /// records it (`DesktopResolve.Response.ownerUID`); `fromUnit`: the desktop file was declared
    /// by the bundle's unit (an administrator's file in system mode), not registered by its owner.
    /// `uri`: what the app is launched with, when not the item's `searchlight-item:` URI (a user
    /// activity's `searchlight-activity:` URI).
    public func plan(_ item: SearchableItemActivity, openWith: String?, contentURL: String?,
                     ownerUID: UInt32? = nil, fromUnit: Bool = false, uri: String? = nil) throws(Failure) -> (action: Action, note: String?) {
        let planned = try plannedAction(item, openWith: openWith, contentURL: contentURL, uri: uri ?? item.uri)
        let opener = UInt32(geteuid())
        if let ownerUID, ownerUID != opener, !allowOtherUsersItems {
            let declaredByUnit: Bool
            if case .application = planned.action { declaredByUnit = fromUnit } else { declaredByUnit = false }
            if !declaredByUnit {
                throw Failure(OtherUsersItem(ownerUID: ownerUID, openerUID: opener, action: planned.action).description
                    + "; not opened (`searchlight open --yes` opens it anyway, after you have checked what it runs)")
            }
        }
        return planned
    }

    private func plannedAction(_ item: SearchableItemActivity, openWith: String?, contentURL: String?, uri: String) throws(Failure) -> (action: Action, note: String?) {
        var note: String?
        if let openWith {
            let locator = DesktopEntryLocator(environment: environment)
            switch locator.resolve(desktopID: openWith) {
            case .success(let path):
                return (.application(desktopID: openWith, path: path, uri: uri), nil)
            case .failure(.notInstalled):
                note = "\(openWith) (declared to open \(item.bundleIdentifier)'s items) is not installed under "
                    + locator.applicationDirectories.joined(separator: ", ")
            case .failure(let refusal):
                // Declared, found, and not to be trusted: nothing is opened instead, so that a
                // planted file is noticed rather than worked around.
                throw Failure("the desktop file declared to open \(item.bundleIdentifier)'s items is refused: \(refusal)")
            }
            guard contentURL != nil else {
                throw Failure(note! + ", and the item has no contentURL; install the app, or fix its OpenWith (unit) or registration (`searchlight register`)")
            }
        }
        guard let contentURL else {
            throw Failure("\(item.bundleIdentifier) declares no desktop file to open its items with (unit key OpenWith, or `searchlight register \(item.bundleIdentifier) --open-with ID`) and the item \(item.uniqueIdentifier.prefix(200)) has no contentURL, so nothing can open it")
        }
        guard Self.isOpenableURL(contentURL) else {
            throw Failure("the item's contentURL is not a URL with a scheme (\(contentURL.prefix(80))); nothing was opened")
        }
        return (.contentURL(contentURL), note)
    }

    /// Opens the item; returns once the launcher has handed over (the app runs on by itself).
    public func open(_ item: SearchableItemActivity, openWith: String?, contentURL: String?,
                     ownerUID: UInt32? = nil, fromUnit: Bool = false, uri: String? = nil) throws(Failure) -> Opened {
        let (action, note) = try plan(item, openWith: openWith, contentURL: contentURL, ownerUID: ownerUID, fromUnit: fromUnit, uri: uri)
        let command: [String]
        switch action {
        case .application(_, let path, let uri):
            command = try launchCommand(path: path, uri: uri)
        case .contentURL(let url):
            if let gio = executable("gio") {
                command = [gio, "open", url]
            } else if let xdgOpen = executable("xdg-open") {
                command = [xdgOpen, url]
            } else {
                throw Failure("opening \(url.prefix(200)) needs gio (libglib2.0-bin) or xdg-open (xdg-utils), neither is on PATH; install one")
            }
        }
        try run(command)
        return Opened(action: action, command: command, note: note)
    }

    /// Launches an installed desktop file with one URI argument (`gio launch`); returns the command run.
    @discardableResult
    public func launch(desktopID: String, uri: String) throws(Failure) -> [String] {
        let locator = DesktopEntryLocator(environment: environment)
        let path: String
        switch locator.resolve(desktopID: desktopID) {
        case .success(let found): path = found
        case .failure(.notInstalled(let why)): throw Failure(why + "; `make install` installs it")
        case .failure(let refusal): throw Failure(refusal.description)
        }
        let command = try launchCommand(path: path, uri: uri)
        try run(command)
        return command
    }

    private func launchCommand(path: String, uri: String) throws(Failure) -> [String] {
        guard let gio = executable("gio") else {
            throw Failure("launching \(path) needs GLib's gio tool, which is not on PATH; install it (Debian: apt-get install libglib2.0-bin)")
        }
        return [gio, "launch", path, uri]
    }

    /// A URL with a scheme (`file:`, `https:`, …): never an option to the launcher, never a
    /// relative path, at most 8 KiB.
    static func isOpenableURL(_ s: String) -> Bool {
        guard s.utf8.count <= 8192, let colon = s.firstIndex(of: ":"), colon > s.startIndex,
              !s.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else { return false }
        let scheme = s[..<colon]
        return scheme.first!.isASCII && scheme.first!.isLetter
            && scheme.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "+" || $0 == "-" || $0 == ".") }
    }

    /// A program on `PATH`.
    func executable(_ name: String) -> String? {
        let path = environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Runs the launcher and waits for it to hand over; a failure exit is an error. Its stderr is
    /// ours (the journal, for the provider; the terminal, for the CLI), never a pipe: the app it
    /// starts inherits it, and would block writing to a pipe nobody reads any more.
    private func run(_ command: [String]) throws(Failure) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.standardError
        let done = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in done.signal() }
        do {
            try process.run()
        } catch {
            throw Failure("cannot run \(command[0]): \(error)")
        }
        guard done.wait(timeout: .now() + launcherTimeout) == .success else { return }
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            throw Failure("\(command.prefix(2).joined(separator: " ")) \(command.dropFirst(2).first ?? "") failed (status \(process.terminationStatus)); its own message is on standard error")
        }
    }
}
