import Foundation
import SearchlightStore
import SearchlightUnits
import SearchlightWire

/// The index and query methods, the same for every role that uses them; the roles differ in
/// which bundle a call acts on and who the caller is (`Caller`). Every call is checked against
/// the bundle's owner first (`BundleAccess`), then acts on the bundle's index (leased to the
/// call until its answer).
struct BundleCalls: Sendable {
    /// Whose calls these are.
    enum Caller: Sendable {
        /// An app: its own bundle only.
        case app(bundle: String)
        /// An extension: its unit's bundle only (authenticated by its socket or its handshake).
        case extensionUnit(bundle: String, label: String)
        /// An administrator: names the bundle (`bundle`), or queries every bundle without one.
        case admin
        /// The desktop's search (DesktopSession): reads as the peer, like an app reads its own
        /// bundle; names the bundle, or queries every bundle it may show without one.
        case desktop
    }

    let client: ClientSession
    let caller: Caller

    var context: ServiceContext { client.context }
    var limits: Limits { client.limits }
    var log: Logger { client.log }

    // MARK: - Targets and permissions

    /// The bundle a call acts on: the app's or extension's own; an administrator names it.
    func target(_ requested: String?) throws(SearchlightError) -> String {
        switch caller {
        case .app(let bundle), .extensionUnit(let bundle, _): return bundle
        case .admin, .desktop: return try Names.bundle(requested.map(JSONValue.string))
        }
    }

    /// Checks that the caller may touch the bundle, before any other check of it (`BundleAccess`);
    /// a write records its owner (or claims a new bundle for an app).
    func authorize(_ bundle: String, write: Bool) throws(SearchlightError) {
        let access: BundleAccess.Caller
        switch caller {
        case .admin:
            access = .admin
        case .extensionUnit(_, let label):
            guard let unit = client.extensionHost?.unit ?? context.catalog.unit(label: label) else { throw BundleAccess.denied(bundle) }
            access = .extensionUnit(unit, client.sandbox)
        case .app, .desktop:
            access = .app(client.peer, client.sandbox)
        }
        try BundleAccess(context: context).authorize(bundle, by: access, write: write)
    }

    /// The bundle, index and store a call acts on, after the permission check; the store is
    /// leased to this call until its answer. A write may create the index, within
    /// `--max-indexes-per-bundle` for an app.
    func store(bundle requested: String?, index: String, write: Bool) throws(SearchlightError) -> (bundle: String, index: String, store: IndexStore?) {
        let bundle = try target(requested)
        try authorize(bundle, write: write)
        let peer = client.peer
        // The activity history is not an index the app creates (`ActivityCalls`): not counted.
        if write, case .app = caller, peer.uid != 0, peer.uid != context.daemonUID, index != Names.activityIndex,
           context.registry.servedStore(bundle: bundle, index: index) == nil,
           !FileManager.default.fileExists(atPath: context.registry.path(bundle: bundle, index: index)) {
            let limit = context.config.maxIndexesPerBundle
            let existing = context.registry.indexes(of: bundle).filter { $0 != Names.activityIndex }.count
            if existing >= limit, !context.mayAdminister(peer) {
                throw SearchlightError(.quotaExceeded,
                    "\(bundle) has \(existing) indexes, the most an app may create (--max-indexes-per-bundle \(limit)); write to one of them (\"index\")")
            }
        }
        return (bundle, index, try context.registry.store(bundle: bundle, index: index, create: write, lease: client.callLeases))
    }

    // MARK: - Index methods

    func items(_ r: IndexItems) throws(SearchlightError) -> MutationResponse {
        try mutate(.items(r.items), index: r.index, bundle: r.bundle)
    }

    /// Applies one mutation now, or adds it to the open batch of that index.
    func mutate(_ mutation: Mutation, index: String, bundle requested: String?) throws(SearchlightError) -> MutationResponse {
        let bundle = try target(requested)
        // The permission check comes first: a refused caller must not learn that indexing is off.
        try authorize(bundle, write: true)
        if case .items = mutation, context.state.bundle(bundle)?.indexingEnabled == false {
            throw SearchlightError(.indexingUnsupported, "indexing is off for \(bundle); turn it on with `searchlight indexing on \(bundle)`")
        }
        let batched: Bool = client.batches.withLock { open in
            guard open[index] != nil else { return false }
            open[index]!.append(mutation)
            return true
        }
        if batched { return MutationResponse(batched: true) }
        let r = try apply([mutation], index: index, bundle: requested)
        return MutationResponse(indexed: r.indexed, updatesDropped: r.updatesDropped, deleted: r.deleted)
    }

    func beginBatch(_ r: IndexBeginBatch) throws(SearchlightError) -> JSONResponse {
        try authorize(try target(r.bundle), write: true)
        let opened: Bool = client.batches.withLock { open in
            guard open[r.index] == nil else { return false }
            open[r.index] = []
            return true
        }
        guard opened else {
            throw SearchlightError(.invalidRequest, "a batch is already open for this index; end it with index.endBatch first")
        }
        return .empty
    }

    func endBatch(_ r: IndexEndBatch) throws(SearchlightError) -> MutationResponse {
        // The batch ends here whatever happens: a failed batch applies nothing and must be redone.
        guard let mutations = client.batches.withLock({ $0.removeValue(forKey: r.index) }) else {
            throw SearchlightError(.invalidRequest, "no batch is open for this index; call index.beginBatch first")
        }
        let expectation: ClientStateExpectation = r.expectedClientState.map { .equals($0) } ?? .any
        let result = try apply(mutations, index: r.index, bundle: r.bundle, expecting: expectation, newClientState: r.newClientState)
        return MutationResponse(indexed: result.indexed, updatesDropped: result.updatesDropped, deleted: result.deleted)
    }

    func fetchLastClientState(_ r: IndexFetchLastClientState) throws(SearchlightError) -> IndexFetchLastClientState.Response {
        guard let store = try store(bundle: r.bundle, index: r.index, write: false).store, let state = try store.clientState() else {
            return .init(clientState: nil)
        }
        return .init(clientState: Data(state))
    }

    /// Applies a call's mutations to the index and, while it is migrating, to its shadow
    /// (DESIGN §6 Triggers: the shadow misses nothing the old file had when it replaces it). The
    /// extension's `deleteAll` (the usual start of a reindex-all) goes to the shadow only: the old
    /// file keeps answering queries completely until the swap. An app's `deleteAll` goes to both.
    func apply(_ mutations: [Mutation], index: String, bundle requested: String?, expecting expectation: ClientStateExpectation = .any,
               newClientState: [UInt8]? = nil, engaging: (identifier: String, weight: Double)? = nil) throws(SearchlightError) -> ApplyResult {
        let target = try store(bundle: requested, index: index, write: true)
        guard let store = target.store else { throw SearchlightError(.indexUnavailable, "index could not be opened") }
        guard let shadow = context.registry.shadow(bundle: target.bundle, index: target.index) else {
            let result = try store.applySync(mutations, expecting: expectation, newClientState: newClientState, engaging: engaging)
            if result.indexed > 0 { context.refinementShare?.donated(bundle: target.bundle, index: target.index) }
            if result.indexed > 0, target.index.isEmpty { relatedItemsArrived(mutations, bundle: target.bundle, store: store) }
            return result
        }
        var forOld = mutations
        if case .extensionUnit = caller {
            forOld.removeAll { if case .deleteAll = $0 { true } else { false } }
        }
        let result = try store.applySync(forOld, expecting: expectation, newClientState: newClientState, engaging: engaging)
        if result.indexed > 0 { context.refinementShare?.donated(bundle: target.bundle, index: target.index) }
        if result.indexed > 0, target.index.isEmpty { relatedItemsArrived(mutations, bundle: target.bundle, store: store) }
        do {
            _ = try shadow.applySync(mutations, newClientState: newClientState)
        } catch {
            // The caller's change is committed to the index in service; the shadow is refilled
            // before it may replace it.
            log.error("donation not written to the migration shadow", ["bundle": target.bundle, "error": error.message])
            context.registry.noteShadowFault(bundle: target.bundle, index: target.index, error.message)
        }
        return result
    }

    /// Items donated to the default index that saved user activities name as their related item
    /// (saved before the item existed): each such activity is now shown as its item, by the rule
    /// of `activity.save` (`ActivityCalls.absorb`). A failure here never fails the donation.
    private func relatedItemsArrived(_ mutations: [Mutation], bundle: String, store: IndexStore) {
        guard ActivityCalls.historyExists(bundle, context: context) else { return }
        var ids = Set<String>()
        for case .items(let items) in mutations { for item in items { ids.insert(item.uniqueIdentifier) } }
        guard !ids.isEmpty else { return }
        do {
            try ActivityCalls.absorb(relatedTo: ids, bundle: bundle, items: store, context: context)
        } catch {
            log.warning("activities of donated items not merged", ["bundle": bundle, "error": error.message])
        }
    }

    // MARK: - Item data from the extension

    func fetchData(_ r: IndexFetchData) async throws -> IndexFetchData.Response {
        let (host, scheduler) = try extensionServing(r.bundle)
        let answer = try await scheduler.call(host, ExtensionDataForItem(identifier: r.identifier, typeIdentifier: r.typeIdentifier))
        return answer
    }

    func fetchFileURL(_ r: IndexFetchFileURL) async throws -> IndexFetchFileURL.Response {
        let (host, scheduler) = try extensionServing(r.bundle)
        return try await scheduler.call(host, ExtensionFileURLForItem(identifier: r.identifier, typeIdentifier: r.typeIdentifier, inPlace: r.inPlace))
    }

    /// The extension that serves the bundle a call names, after the (read) permission check.
    private func extensionServing(_ requested: String?) throws(SearchlightError) -> (ExtensionHost, RequestScheduler) {
        let bundle = try target(requested)
        try authorize(bundle, write: false)
        guard let scheduler = context.scheduler, let host = scheduler.host(bundle: bundle) else {
            throw SearchlightError(.unknownExtension, "no index extension serves \(bundle); install a unit for it to provide item data")
        }
        return (host, scheduler)
    }
}
