import Foundation

/// Sends a stream of items to an index in calls of bounded size, a few in flight: the encoded
/// items go straight into each call's frame (no `JSONValue` tree for the call), and calls are on
/// the wire in order, so the daemon applies them in order while the next one is built.
struct ItemSender {
    /// Calls in flight at most: enough that the daemon always has the next one queued (it commits
    /// queued calls together), few enough that little is held in memory.
    static let depth = 3

    let index: SearchableIndex
    private var limits: (items: Int, bytes: Int)?
    private var params: [UInt8] = []
    private var count = 0
    private var inFlight: [(call: SubmittedCall, params: [UInt8], items: Int)] = []
    /// Times the calls in flight were sent again after the daemon announced an idle close.
    private var resends = 0

    init(index: SearchableIndex) { self.index = index }

    mutating func add(_ item: SearchableItem) async throws {
        if let dump = index.dump {
            dump.write(item)
            return
        }
        if limits == nil { limits = await index.serverLimits() }
        if count == 0 {
            params.removeAll(keepingCapacity: true)
            params += Array(#"{"items":["#.utf8)
        } else {
            params.append(UInt8(ascii: ","))
        }
        item.json.write(to: &params)
        count += 1
        if count >= limits!.items || params.count >= limits!.bytes { try await send() }
    }

    /// Sends what is left and waits for every call: returns once everything is committed.
    mutating func finish() async throws {
        try await send()
        while !inFlight.isEmpty { try await completeOldest() }
    }

    private mutating func send() async throws {
        guard count > 0 else { return }
        try Task.checkCancellation()
        params.append(UInt8(ascii: "]"))
        if !index.name.isEmpty {
            params += Array(#","index":"#.utf8)
            JSONValue.string(index.name).write(to: &params)
        }
        params.append(UInt8(ascii: "}"))
        if inFlight.count >= Self.depth { try await completeOldest() }
        while true {
            do {
                let call = try await index.connection.submit(Method.indexItems, encodedParams: params,
                    sameConnectionAs: inFlight.last?.call.connection)
                inFlight.append((call, params, count))
                break
            } catch is SearchlightConnection.ConnectionChanged {
                // The daemon closed the connection the calls in flight went on: they go again
                // first (in order, on a new connection), then this one. Counted as a resend, so a
                // daemon closing every connection at once ends the donation instead of looping.
                guard resends < SearchlightConnection.maximumResends else { throw Self.closedAgain }
                resends += 1
                while !inFlight.isEmpty { try await completeOldest() }
            } catch let error as SearchlightError where error.code == .remoteConnection && resends < SearchlightConnection.maximumResends {
                // The write failed: the connection is closing, and this call (a frame never
                // finished is never read) went nowhere. The calls in flight settle first: each
                // completes, goes again after an announced close, or fails the donation.
                resends += 1
                while !inFlight.isEmpty { try await completeOldest() }
            }
        }
        count = 0
    }

    /// The daemon kept closing the connections the donation went on.
    static var closedAgain: SearchlightError {
        SearchlightError(.remoteConnection, "searchlightd closed the connection again while the donation was sent again; retry")
    }

    private mutating func completeOldest() async throws {
        while true {
            let (call, _, items) = inFlight[0]
            do {
                _ = try await call.value()
                inFlight.removeFirst()
                await index.itemsCommitted(items)
                return
            } catch let error as SearchlightError where error.code == .remoteConnection && resends < SearchlightConnection.maximumResends {
                // The daemon closes an idle connection with `$/closing` and reads nothing after it:
                // then none of the calls in flight was processed, and all go again, in order, on a
                // new connection (as `SearchlightConnection.call` does for one call).
                await call.connection.waitUntilClosed()
                guard call.connection.closeAnnouncement != nil else { throw error }
                resends += 1
                var again: [(call: SubmittedCall, params: [UInt8], items: Int)] = []
                for pending in inFlight {
                    do {
                        let call = try await index.connection.submit(Method.indexItems, encodedParams: pending.params,
                            sameConnectionAs: again.last?.call.connection)
                        again.append((call, pending.params, pending.items))
                    } catch is SearchlightConnection.ConnectionChanged {
                        // The new connection closed too before these went: an error of the
                        // public kind, never the SDK's internal signal.
                        throw Self.closedAgain
                    }
                }
                inFlight = again
            }
        }
    }
}

/// `--dump`: what a reindex-all would donate, printed to standard output as JSON lines in the
/// shape `searchlight import` reads (sorted keys, so two dumps diff cleanly). Deletions, batches
/// and progress do nothing; queries find nothing; item data is not available.
final class ItemDump: @unchecked Sendable {
    private let lock = NSLock()
    private var buffer: [UInt8] = []
    private(set) var written = 0

    func write(_ item: SearchableItem) {
        lock.withLock {
            item.json.write(to: &buffer, sortedKeys: true)
            buffer.append(0x0A)
            written += 1
            if buffer.count >= 1 << 20 { flushLocked() }
        }
    }

    func flush() { lock.withLock { flushLocked() } }

    private func flushLocked() {
        buffer.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(1, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { exit(0) }  // stdout closed (`| head`): nobody reads on
                offset += n
            }
        }
        buffer.removeAll(keepingCapacity: true)
    }

    /// What a call answers under `--dump`.
    func answer(_ method: String) throws -> JSONValue {
        switch method {
        case Method.indexFetchLastClientState: return ["clientState": .null]
        case Method.querySearch: return ["items": []]
        case Method.queryUser: return ["items": [], "rankedItems": [], "suggestions": []]
        case Method.indexFetchData, Method.indexFetchFileURL:
            throw SearchlightError(.indexingUnsupported, "there is no daemon under --dump, so no item data")
        default: return [:]
        }
    }

    /// Runs `implementation`'s reindex-all into a dump of `index`; the exit status.
    static func run<Extension: IndexExtension>(_ implementation: Extension, index name: String, name program: String) async -> Int32 {
        let dump = ItemDump()
        do {
            try await implementation.reindexAllSearchableItems(in: SearchableIndex(name: name, dump: dump))
            dump.flush()
            FileHandle.standardError.write(Data("\(program): --dump: \(dump.written) items\n".utf8))
            return 0
        } catch {
            dump.flush()
            FileHandle.standardError.write(Data("\(program): --dump failed after \(dump.written) items: \(error)\n".utf8))
            return 1
        }
    }
}
