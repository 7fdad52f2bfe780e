import Foundation
import SearchlightSemantic
import SearchlightWire

/// How an index store behaves; the daemon fills it from its flags.
public struct StoreOptions: Sendable {
    /// Seconds an item lives when its donor sets no expiration date (DESIGN §3: 30 days).
    public var defaultExpiration: TimeInterval = 30 * 86400
    public var limits = Limits()
    /// The clock; tests inject a fixed or stepping one.
    public var clock: @Sendable () -> Date = { Date() }
    /// Read connections kept open for queries (WAL lets them run beside the writer).
    public var maxReaders = 4
    /// The writer thread runs at background CPU priority (`BackgroundPriority`): a migration's
    /// shadow, whose writes are a reindex-all no query reads until the swap.
    public var backgroundWriter = false
    /// `synchronous=FULL`: a commit is durable on power loss, not only on process crash.
    public var fullSync = true
    /// The writer's page cache, KiB, while no stream of large calls runs: small, so that a
    /// daemon with many open indexes stays small.
    public var cacheKiB = 8_000
    /// While a stream of large calls runs (a reindex-all, a bulk import), the writer keeps a
    /// larger page cache and checkpoints the WAL less often (see `IndexStore` "Streams").
    public var streamCacheKiB = 64_000
    /// WAL pages between automatic checkpoints during a stream (SQLite's default, 1000, otherwise).
    public var streamCheckpointPages = 16_384
    /// A group of at least this many items starts a stream, in an index of at least
    /// `streamIndexItems` items (a smaller one fits the default cache well enough).
    public var streamGroupItems = 500
    public var streamIndexItems = 100_000
    /// Seconds without a call that end a stream: the cache shrinks back and its memory is returned.
    public var streamIdleSeconds = 2.0
    /// The static encoder of semantic search (Docs/SemanticSearch.md): with it, every donated
    /// item's vector is written with its text, and user queries can search the vectors.
    public var vectorEncoder: StaticEncoder?
    /// Above this many vectors the loaded index keeps a coarse partition (`VectorIndex.partitionLimit`),
    /// saved beside the store; tests lower it.
    public var vectorPartitionLimit = 100_000
    /// Whether the partition is saved beside the store and restored on the next load
    /// (`SEARCHLIGHT_VECTOR_PARTITION_FILE=0` turns it off, for the bench's side-by-side rows).
    public var vectorPartitionFile = ProcessInfo.processInfo.environment["SEARCHLIGHT_VECTOR_PARTITION_FILE"] != "0"
    /// Whether the loaded vector index is saved beside the store when it closes cleanly and read
    /// back by the next load instead of the table (`VectorIndexFile`;
    /// `SEARCHLIGHT_VECTOR_INDEX_FILE=0` turns it off, for side-by-side measurements).
    public var vectorIndexFile = ProcessInfo.processInfo.environment["SEARCHLIGHT_VECTOR_INDEX_FILE"] != "0"
    /// Told what became of a saved vector index (saved at a close, or not used by a load and why);
    /// the daemon logs it.
    public var vectorIndexEvents: (@Sendable (VectorIndexEvent) -> Void)?
    /// Whether queries start background builds of the ranked index (`RankMaintainer`); tests that
    /// want to decide when it is built turn it off and call `buildRankedIndex()`.
    public var rankedIndexBuilds = true
    /// Whether a background-priority thread's maintenance writes run on that thread while the
    /// writer waits in its turn (`IndexStore.maintenanceWrite`), instead of on the writer.
    /// Off by default: with it and the threads' slices (`QueryLatency`) together, an integration
    /// test that donates while queries and ranked builds run lost a connection in 2 of 3 runs
    /// (not understood yet). `SEARCHLIGHT_WRITER_LEND=1` in the daemon's environment turns it on.
    public var lendWriterToBackground = ProcessInfo.processInfo.environment["SEARCHLIGHT_WRITER_LEND"] == "1"
    /// A build waits until no client has written for this long…
    public var rankedIndexIdleSeconds = 1.0
    /// …but not longer than this after a query asked for it.
    public var rankedIndexMaxDeferral = 10.0
    /// Whether the ranked index makes fresh segments while writes come in (`RankMaintainer`);
    /// without, it is built only once the writes stop, as before store format 6's issue 32.
    /// `SEARCHLIGHT_RANKED_FRESH=0` in the daemon's environment turns it off (the bench's
    /// `--compare-fresh` runs both in one binary).
    public var rankedIndexFreshSegments = ProcessInfo.processInfo.environment["SEARCHLIGHT_RANKED_FRESH"] != "0"
    /// Whether tier merges while writes come in also take runs with smaller segments stranded
    /// between larger ones (`IndexStore.planTierMerge`). Off by default: measured at 64k it cut
    /// the segments after a donation (15 to 9-14) but showed no thread-CPU gain and settled later
    /// under load. `SEARCHLIGHT_RANKED_STRANDED=1` in the daemon's environment turns it on.
    public var rankedIndexMergesStranded = ProcessInfo.processInfo.environment["SEARCHLIGHT_RANKED_STRANDED"] == "1"
    /// Documents per segment of the ranked index, at most (tests make it small to get many).
    public var rankedIndexSegmentDocs = 65_536
    /// Whether `query.search` pages driven by a whole word always walk the ranked index
    /// (`RankedPageWalk`, as prefixes do). By default a whole word walks only when the reader
    /// keeps its list (kept while its segment is active), or is about to
    /// (`PostingListCache.walksWholeWord`: asked twice since the last commit): FTS5 walks one
    /// word's doclist lazily, where the walk reads the list whole (slower for a frequent word,
    /// unless kept). Tests set it.
    public var rankedPagesForWholeWords = false

    public init() {}
}

/// A change to an index. A call's changes are applied all together or not at all.
public enum Mutation: Sendable {
    case items([SearchableItem])
    case deleteIdentifiers([String])
    case deleteDomains([String])
    case deleteAll
}

extension [Mutation] {
    /// The items donated by these mutations.
    var itemCount: Int {
        reduce(0) { n, m in if case .items(let items) = m { n + items.count } else { n } }
    }
}

/// What a batch expects the stored client state to be before it applies (compare-and-swap).
public enum ClientStateExpectation: Sendable, Equatable {
    /// Apply whatever the stored state is.
    case any
    /// Apply only if the stored state equals this (nil: no state stored yet).
    case equals([UInt8]?)
}

/// The outcome of applying mutations.
public struct ApplyResult: Sendable, Equatable {
    public var indexed = 0
    public var updatesDropped = 0
    public var deleted = 0
}

/// One page of `query.search` results.
public struct SearchPage: Sendable {
    public var items: [JSONValue]
    /// Present while more results remain; pass it back to get the next page.
    public var cursor: String?
}

/// The state of an index file, for `admin.status`.
public struct IndexSummary: Sendable {
    public var itemCount: Int
    public var fileBytes: Int64
    public var formatVersion: Int
    public var hasClientState: Bool
    /// The ranked index, nil for a file of an older format.
    public var rankedIndex: RankedIndexSummary?
    /// Items with a semantic vector, and how many of those the transformer made.
    public var vectors = 0
    public var refined = 0
}

/// How much of an index the ranked index holds (`admin.status`).
public struct RankedIndexSummary: Sendable {
    /// Segments in use and the items they hold.
    public var segments: Int
    public var items: Int
    /// Items queries read from `items` until a build takes them in: above the coverage, or
    /// rewritten since their segment was built.
    public var pending: Int
    /// Segments built since the store was opened, and the last build's failure.
    public var builds: Int
    public var lastError: String?
    /// Nothing pending and nothing left to merge, rebuild or clean up: queries meet the layout
    /// they will meet from now on (until the next write).
    public var settled = true
}

/// Findings of an integrity check.
public struct CheckReport: Sendable {
    public var ok: Bool
    public var problems: [String]
    public var repaired: [String]
}

/// One store's memory, as `IndexStore.memoryFigures` reads it.
public struct StoreMemory: Sendable, Equatable {
    public var readers = 0
    public var busyReaders = 0
    public var readerPageCacheBytes = 0
    public var postingCacheBytes = 0
    public var unionScratchBytes = 0
    public var vectorHeapBytes = 0
    public var partitionBuilding = false
    /// Where the loaded vector index came from (nil: not loaded since the store opened).
    public var vectorLoad: VectorIndexLoad?
    public init() {}
}

/// What became of the vector index saved beside a store (`StoreOptions.vectorIndexEvents`).
public enum VectorIndexEvent: Sendable, Equatable {
    case saved(path: String, bytes: Int, milliseconds: Int)
    case notUsed(path: String, reason: String)
}

/// Where a store's vector index was loaded from.
public enum VectorIndexLoad: Sendable, Equatable {
    /// The index saved at the last clean close.
    case savedFile
    /// Every row of `item_vectors`; why the saved index was not used.
    case table(String)
}
