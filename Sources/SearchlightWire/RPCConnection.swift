import Foundation
import Synchronization

/// One JSON-RPC peer over a stream socket, used by both ends (daemon, SDK, CLI, extensions).
///
/// A dedicated reader thread reads frames and hands each incoming request or notification to the
/// handler *on that thread*, so one connection's requests are handled in order and a slow peer
/// stalls only its own thread. Responses resume the matching `call`. When the connection closes,
/// every outstanding call fails with `remoteConnection` (as sourcekit-lsp does).
///
/// A write never waits on the caller's thread: `send`, `call`, `notify`, `reply` and `submit`
/// write the frame at once only when nothing is queued before it and the socket takes it without
/// blocking (the usual case: one `send`, no thread hand-off); otherwise the frame, or what is left
/// of it, goes to the connection's outbox, and its own serial writer queue writes it (in order).
/// A peer that reads slowly therefore holds only that writer, never a thread of Swift's
/// cooperative pool (the daemon's scheduler runs there) nor the daemon's reader thread. The
/// outbox is bounded (`OutboxLimit`): past it the daemon closes the connection, the SDK's sender
/// waits for room.
public final class RPCConnection: @unchecked Sendable {
    public enum CloseReason: Sendable, Equatable, CustomStringConvertible {
        case peerClosed
        case closedLocally
        case frameTooLarge(limit: Int)
        /// A frame was begun and not finished within the socket's receive timeout.
        case incompleteFrame(seconds: Int)
        case readError(String)
        /// Nothing came or went for this long, and the idle policy allowed the close.
        case idle(seconds: Int)
        /// An answer could not be written: the peer stopped reading (the send timeout passed) or vanished.
        case unreadAnswers(String)
        /// This many malformed frames in a row, each owed an error answer: the peer is not a client.
        case malformedFrames(count: Int)
        /// More than this many bytes of answers and calls waited for the peer to read them.
        case outboxFull(bytes: Int)

        public var description: String {
            switch self {
            case .peerClosed: "peer closed the connection"
            case .closedLocally: "closed locally"
            case .frameTooLarge(let limit): "frame larger than \(limit) bytes"
            case .incompleteFrame(let seconds): "a frame was left unfinished for \(seconds) s"
            case .readError(let e): "read error: \(e)"
            case .idle(let seconds): "idle for \(seconds) s"
            case .unreadAnswers(let e): "an answer could not be written (the peer does not read it): \(e)"
            case .malformedFrames(let count): "\(count) malformed frames in a row"
            case .outboxFull(let bytes): "the peer does not read: more than \(bytes) bytes waited for it"
            }
        }
    }

    /// When a connection may be closed for idleness (the daemon's side): after `seconds` with
    /// nothing received or sent, if `mayClose` (asked on the reader thread, between frames) agrees.
    public struct IdlePolicy: Sendable {
        public var seconds: Int
        public var mayClose: @Sendable () -> Bool
        public init(seconds: Int, mayClose: @escaping @Sendable () -> Bool) {
            self.seconds = seconds
            self.mayClose = mayClose
        }
    }

    /// Error answers to malformed frames a peer may cause in a row (with no well-formed message
    /// between) before the connection is closed. A junk writer that does not read is cut off
    /// after this many answers, before they fill the socket buffer; one that slips a well-formed
    /// message in now and then is cut off when an answer cannot be written within the send
    /// timeout. (Clients that make mistakes send one bad frame, not a hundred in a row.)
    public static let maxMalformedFramesInARow = 100

    /// What happens when frames queued for writing (not yet taken by the peer) pass `bytes`.
    /// A frame is always admitted into an empty outbox, whatever its size.
    public enum OutboxLimit: Sendable {
        /// The sender waits for room (the SDK's behaviour: a client that outpaces the daemon is
        /// slowed down, as a blocking write did). Never used on the daemon's side.
        case wait(bytes: Int)
        /// The connection is closed (`CloseReason.outboxFull`): the daemon's side, where a peer
        /// that does not read must cost only its own connection.
        case close(bytes: Int)

        var bytes: Int {
            switch self {
            case .wait(let bytes), .close(let bytes): bytes
            }
        }
    }

    /// How long a local `close()` lets frames already queued reach the peer before shutting the
    /// socket down anyway (a frame sent just before `close()` was on the wire when writes were
    /// synchronous, and still is; a peer that does not read them delays the close this long).
    public static let closeFlushSeconds: TimeInterval = 2

    public typealias MessageHandler = @Sendable (RPCConnection, RPCMessage) -> Void
    public typealias CloseHandler = @Sendable (RPCConnection, CloseReason) -> Void

    public let socket: UnixSocket
    public let maxFrameBytes: Int
    public let maxDepth: Int
    /// Set when the socket has a receive timeout: how long a half-sent frame may wait for the rest.
    /// A connection that is merely idle between messages is never closed for it.
    public let incompleteFrameTimeout: Int?
    private let lock = NSLock()
    /// Guards the outbox below; signalled when the writer takes a frame or stops.
    private let outboxCondition = NSCondition()
    private var outbox: [[UInt8]] = []
    private var outboxHead = 0
    private var outboxBytes = 0
    private var writerRunning = false
    /// Set when a write failed: nothing more is written.
    private var writeFailure: String?
    /// A write failed because the peer closed (or shut down) its end: the reader reads on to the
    /// end of what the peer sent before that, instead of stopping at the close this side then
    /// requests. (The peer's last words, `$/closing` above all, were sent before it closed, and
    /// are still in the socket: a reader that stopped at the close lost them, and the SDK then
    /// gave up a donation it should have sent again.) Answers and notifications are handled;
    /// requests are dropped, since no answer can be written any more. Guarded by `lock`.
    private var drainingAfterWriteFailure = false
    /// `close()` was asked while frames were queued: the writer shuts the socket down once done.
    private var shutdownWhenFlushed = false
    /// Set by `finish` before it releases the descriptor: no writer starts after it (one that
    /// read the descriptor's number before the close could write into whatever connection
    /// `accept` gave that number next).
    private var writerRetired = false
    private let writer: DispatchQueue
    public let outboxLimit: OutboxLimit
    private var nextID = 1
    private var pending: [RPCID: Waiter] = [:]
    /// Calls sent with `submit`, whose answers are awaited later (pipelining).
    private var submitted: [RPCID: SubmittedCall] = [:]
    private var closed: CloseReason?
    private var closeRequested = false
    /// Why the connection is being closed from this side, when there is more to say than "locally".
    private var closeReason: CloseReason?
    /// The last time a message came or went (for the idle policy).
    private var lastActivity = Date()
    private var idlePolicy: IdlePolicy?
    /// The reason the peer gave in a `$/closing` notification before it closed the connection.
    private var announcedClose: String?
    /// The frames read so far: used by whoever holds the read role (only the reader thread
    /// without `callerReads`).
    private var frames: FrameDecoder
    /// With `callerReads`: who reads the socket (see `ReadRole`).
    let readRole: ReadRole?
    /// How the stream ended when a caller reading its own answer met its end (the reader thread
    /// closes the connection for it, as if it had read that itself).
    private var callerReadEnd: ReadEnd?
    enum ReadEnd { case eof, error(String) }

    /// Calls that read their own answers (see `init`).
    public struct CallerReads: Sendable {
        /// How long a call waits on its own thread for its answer (then the reader thread takes
        /// over and the caller's task is resumed as before): a thread of Swift's cooperative pool
        /// is never held longer than this, nor for the reader thread to give the socket up.
        public var waitSeconds: TimeInterval
        /// How long the read role stays free after a call gave it back before the reader thread
        /// takes it again (`ReadRole.linger`): the most a notification arriving just after a call
        /// waits; calls that follow one another closer than this never wake the reader thread.
        public var linger: TimeInterval
        /// The token a caller takes before it reads: `CallerReaders.process` (one caller reading
        /// per process); tests give a connection its own.
        public var readers: CallerReaders
        /// For how long of `waitSeconds` the caller polls the socket without sleeping (a
        /// non-blocking read, then `sched_yield`) before it waits in `poll`. A short answer then
        /// finds the caller's core awake: a core that went idle while its thread slept in `poll`
        /// takes tens of µs to wake in a virtual machine (back-to-back term pages, 2 cores, KVM
        /// guest with halt polling off: 110 µs a round trip sleeping, 78 spinning; the spin round
        /// in `git show 8eae301:Docs/Performance.md`).
        /// It costs this process at most this much CPU per call; the yield leaves the core to
        /// anything else runnable on it (the daemon, when both share one core). 0: never spin.
        public var spinSeconds: TimeInterval

        public init(waitSeconds: TimeInterval, linger: TimeInterval, spinSeconds: TimeInterval = 0,
                    readers: CallerReaders = .process) {
            self.waitSeconds = waitSeconds
            self.linger = linger
            self.spinSeconds = min(max(0, spinSeconds), waitSeconds)
            self.readers = readers
        }

        /// 2 ms (a term query's answer takes 0.1-0.2 ms, a hybrid user query's about 1 ms), 5 ms,
        /// spinning for the first 0.3 ms (a term or prefix page's answer, a lexical user query's).
        public static let standard = CallerReads(waitSeconds: 0.002, linger: 0.005, spinSeconds: 0.0003)
    }
    /// Set with `callerReads`.
    let callerReadSeconds: TimeInterval
    /// Set with `callerReads` (`CallerReads.spinSeconds`), in nanoseconds.
    let callerSpinNanoseconds: UInt64
    /// What a caller holding the read role reads into (one at a time: the role is exclusive).
    private let callerChunk: UnsafeMutableRawBufferPointer

    /// `outboxLimit` defaults to waiting for room past one largest frame plus 1 MiB.
    ///
    /// `callerReads` (the SDK's calls): a call that finds no other caller reading waits for its
    /// answer on its own thread, for at most `waitSeconds`, instead of the reader thread waking
    /// and resuming it on another thread (one wake-up per call on this side where there were
    /// two). Not with an idle policy or a receive timeout (the daemon's side): those are the
    /// reader thread's, and callers do not keep its clock.
    public init(socket: UnixSocket, maxFrameBytes: Int = 16 << 20, maxDepth: Int = 128, incompleteFrameTimeout: Int? = nil,
                outboxLimit: OutboxLimit? = nil, callerReads: CallerReads? = nil) {
        self.socket = socket
        self.maxFrameBytes = maxFrameBytes
        self.maxDepth = maxDepth
        self.incompleteFrameTimeout = incompleteFrameTimeout
        self.outboxLimit = outboxLimit ?? .wait(bytes: maxFrameBytes + (1 << 20))
        writer = DispatchQueue(label: "rpc.writer")
        frames = FrameDecoder(maxFrameBytes: maxFrameBytes)
        let callerReads = incompleteFrameTimeout == nil ? callerReads : nil
        readRole = callerReads.map { ReadRole(linger: $0.linger, readers: $0.readers) }
        callerReadSeconds = callerReads?.waitSeconds ?? 0
        callerSpinNanoseconds = UInt64((callerReads?.spinSeconds ?? 0) * 1e9)
        callerChunk = .allocate(byteCount: callerReads == nil ? 0 : 64 * 1024, alignment: 1)
    }

    deinit { callerChunk.deallocate() }

    /// Connects to the daemon's socket.
    public static func connect(path: String, maxFrameBytes: Int = 16 << 20, callerReads: CallerReads? = nil) throws -> RPCConnection {
        RPCConnection(socket: try UnixSocket.connect(path: path), maxFrameBytes: maxFrameBytes, callerReads: callerReads)
    }

    public var isClosed: Bool { lock.withLock { closed != nil } }

    /// The reason of the peer's `$/closing` notification, once one arrived: the peer read nothing
    /// sent after it (the daemon announces an idle close this way).
    public var closeAnnouncement: String? { lock.withLock { announcedClose } }

    /// Closes the connection when it has been idle as `policy` says. Set before `start`.
    public func setIdlePolicy(_ policy: IdlePolicy) { lock.withLock { idlePolicy = policy } }

    /// Returns once the reader thread has ended and every outstanding call has failed (at most
    /// `timeout` seconds): by then every message the peer sent before closing was handled.
    public func waitUntilClosed(timeout: TimeInterval = 2) async {
        // Only after a call failed, when the close is under way: a short poll is enough.
        let deadline = Date().addingTimeInterval(timeout)
        while !isClosed, Date() < deadline { try? await Task.sleep(for: .milliseconds(5)) }
    }

    /// Starts the reader thread. `onMessage` receives requests, notifications and undecodable
    /// frames already answered; `onClose` runs once, after every outstanding call has failed.
    public func start(name: String = "rpc", onMessage: @escaping MessageHandler, onClose: CloseHandler? = nil) {
        start(name: name, answersQueries: false, onMessage: onMessage, onClose: onClose)
    }

    /// `answersQueries`: the thread answers a client's queries (the daemon's side): a short time
    /// slice, so it wakes up at once (`QueryLatency`).
    public func start(name: String, answersQueries: Bool, onMessage: @escaping MessageHandler, onClose: CloseHandler? = nil) {
        let thread = Thread { [self] in
            BackgroundPriority.nameCurrentThread(name)  // what top -H shows
            if answersQueries { QueryLatency.shortenCurrentThreadSlice() }
            let reason = self.readLoop(onMessage: onMessage)
            self.finish(reason)
            onClose?(self, reason)
        }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
    }

    private func readLoop(onMessage: MessageHandler) -> CloseReason {
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 1)
        defer { chunk.deallocate() }
        // When the unfinished frame in the decoder began: a trickle of bytes does not reset it.
        var partialSince: Date?
        var malformed = 0
        let closedHere = { [self] () -> CloseReason in lock.withLock { closeReason ?? .closedLocally } }
        // Handles the whole frames buffered; a reason when the connection must close.
        func handleFrames() -> CloseReason? {
            do {
                while let frame = try frames.next() {
                    partialSince = nil
                    if dispatch(frame, onMessage: onMessage) {
                        malformed = 0
                    } else {
                        malformed += 1
                        if malformed >= Self.maxMalformedFramesInARow { return .malformedFrames(count: malformed) }
                    }
                    if lock.withLock({ closeRequested && !drainingAfterWriteFailure }) { return closedHere() }
                }
            } catch {
                switch error {
                case .frameTooLarge(let limit): return .frameTooLarge(limit: limit)
                }
            }
            return nil
        }
        while true {
            if let readRole {
                // A caller may have held the role: what it left (a frame it does not handle and
                // those after it, bytes of a frame) is this thread's, in order, before any read.
                guard readRole.threadAcquire() else { return closedHere() }
                if let reason = handleFrames() { return reason }
                if let end = lock.withLock({ callerReadEnd }) {
                    if lock.withLock({ closeRequested }) { return closedHere() }
                    switch end {
                    case .eof: return .peerClosed
                    case .error(let e): return .readError(e)
                    }
                }
                if !readRole.threadWaitReadable(socket.fd) { continue }
            }
            let n: Int
            do {
                n = try socket.read(into: chunk)
            } catch is UnixSocket.ReceiveTimeout {
                n = -1
            } catch {
                return lock.withLock { closeRequested } ? closedHere() : .readError("\(error)")
            }
            if n == 0 { return lock.withLock { closeRequested } ? closedHere() : .peerClosed }
            if n > 0 {
                lock.withLock { lastActivity = Date() }
                frames.append(UnsafeRawBufferPointer(rebasing: chunk[0..<n]))
                if let reason = handleFrames() { return reason }
            }
            if n < 0, frames.pendingByteCount == 0, let seconds = idleFor() {
                // Announced first, so that a peer which sent a call meanwhile (never read now)
                // knows it was not processed and may send it again.
                try? send(.notification(method: Method.closing, params: ["reason": "idle", "seconds": .number(Double(seconds))]))
                return .idle(seconds: seconds)
            }
            if frames.pendingByteCount == 0 {
                partialSince = nil
            } else if let seconds = incompleteFrameTimeout {
                let since = partialSince ?? Date()
                partialSince = since
                if Date().timeIntervalSince(since) >= Double(seconds) { return .incompleteFrame(seconds: seconds) }
            }
        }
    }

    /// The seconds of idleness that allow closing the connection now, if its policy says so.
    private func idleFor() -> Int? {
        let (policy, last) = lock.withLock { (idlePolicy, lastActivity) }
        guard let policy, Date().timeIntervalSince(last) >= Double(policy.seconds) else { return nil }
        guard policy.mayClose() else {
            // Busy (a call outstanding, a batch, a stream): the idle time counts from now.
            lock.withLock { lastActivity = Date() }
            return nil
        }
        return policy.seconds
    }

    /// Handles one frame; false when it was malformed (and answered with an error).
    private func dispatch(_ frame: ArraySlice<UInt8>, onMessage: MessageHandler) -> Bool {
        if deliverDecoded(frame) { return true }
        let message: RPCMessage
        do {
            message = try RPCMessage.decode(frame, maxDepth: maxDepth)
        } catch {
            // Bad input gets an error answer and the connection stays usable (DESIGN §4); a bad
            // response gets none (JSON-RPC: never answer a response).
            if error.isResponse { return false }
            do {
                try send(.response(id: error.id ?? .number(0), result: .failure(error.error)), nullID: error.id == nil)
            } catch {
                // The peer does not read its answers (the send timeout passed): stop here rather
                // than wait out the timeout once per line it sent.
                close(reason: .unreadAnswers("\(error)"))
            }
            return false
        }
        if case .notification(let method, let params) = message, method == Method.closing {
            lock.withLock { announcedClose = params["reason"]?.stringValue ?? "unspecified" }
        }
        if case .request = message, lock.withLock({ drainingAfterWriteFailure }) { return true }
        if case .response(let id, let result) = message {
            let (waiter, call) = lock.withLock { (pending.removeValue(forKey: id), submitted.removeValue(forKey: id)) }
            call?.complete(result.mapError { $0 as any Error })
            waiter?.resume(result)
            return true
        }
        onMessage(self, message)
        return true
    }

    private func finish(_ reason: CloseReason) {
        // No caller reads from now on (the thread held the role to get here).
        readRole?.retire()
        let (waiting, calls): ([Waiter], [SubmittedCall]) = lock.withLock {
            if closed == nil { closed = reason }
            defer {
                pending.removeAll()
                submitted.removeAll()
            }
            return (Array(pending.values), Array(submitted.values))
        }
        let lost = SearchlightError(.remoteConnection, "connection lost before the answer arrived (\(reason)); retry")
        for c in waiting { c.fail(lost) }
        for call in calls { call.complete(.failure(lost)) }
        // What was queued before the close (an answer, `$/closing`) still goes out, briefly;
        // the descriptor is released only once the writer no longer uses it.
        let flushed = waitForWriter(within: Self.closeFlushSeconds)
        let writing = outboxCondition.withLock {
            writerRetired = true
            return writerRunning
        }
        // A writer still at work (a peer not reading, or a frame queued just now) fails at once.
        if !flushed || writing { socket.shutdown() }
        _ = waitForWriter(within: .infinity)
        socket.close()
    }

    /// Waits until the writer has nothing left to do; false if `seconds` passed first.
    private func waitForWriter(within seconds: TimeInterval) -> Bool {
        outboxCondition.lock()
        defer { outboxCondition.unlock() }
        guard seconds.isFinite else {
            // Not `wait(until: .distantFuture)`: Foundation on Linux traps converting it to a timespec.
            while writerRunning { outboxCondition.wait() }
            return true
        }
        let deadline = Date().addingTimeInterval(seconds)
        while writerRunning {
            if !outboxCondition.wait(until: deadline) { return !writerRunning }
        }
        return true
    }

    /// Sends one message: queues it for the connection's writer and returns (see the type's
    /// comment). Throws when the connection is closed or a write already failed. `nullID`
    /// answers an error to a frame whose id could not be read.
    public func send(_ message: RPCMessage, nullID: Bool = false) throws {
        try enqueue(message.frame(nullID: nullID))
    }

    /// Puts one whole frame in the outbox and makes sure the writer runs.
    private func enqueue(_ frame: [UInt8]) throws {
        if lock.withLock({ closed != nil || closeRequested }) {
            throw SearchlightError(.remoteConnection, "the connection is closed; reconnect")
        }
        outboxCondition.lock()
        var overflow = false
        if case .wait(let limit) = outboxLimit {
            while outboxBytes > 0, outboxBytes + frame.count > limit, writeFailure == nil, !shutdownWhenFlushed {
                BlockingCheck.blocking("RPCConnection: waiting for room in the outbox")
                outboxCondition.wait()
            }
        } else if outboxBytes > 0, outboxBytes + frame.count > outboxLimit.bytes {
            overflow = true
        }
        if let failure = writeFailure {
            outboxCondition.unlock()
            throw SearchlightError(.remoteConnection, "the connection is closed (\(failure)); reconnect")
        }
        if writerRetired {
            outboxCondition.unlock()
            throw SearchlightError(.remoteConnection, "the connection is closed; reconnect")
        }
        if overflow || shutdownWhenFlushed {
            outboxCondition.unlock()
            if overflow { close(reason: .outboxFull(bytes: outboxLimit.bytes)) }
            throw SearchlightError(.remoteConnection, overflow
                ? "the peer does not read: more than \(outboxLimit.bytes) bytes are waiting for it; connection closed"
                : "the connection is closing; reconnect")
        }
        if !writerRunning {
            // Nothing queued and no writer: this thread writes what the socket takes now, without
            // waiting (it holds the writer's place meanwhile, so frames queued by others follow it).
            writerRunning = true
            outboxCondition.unlock()
            writeNow(frame)
            return
        }
        outbox.append(frame)
        outboxBytes += frame.count
        outboxCondition.unlock()
    }

    /// Writes `frame` on the calling thread as far as the socket takes it without blocking (a
    /// peer that keeps up: every answer of a search box, one `send` and no thread hand-off); what
    /// is left, and frames queued meanwhile, go to the writer queue, which may wait for the peer
    /// (up to the send timeout). Called holding the writer's place (`writerRunning`).
    private func writeNow(_ frame: [UInt8]) {
        let written: Int
        do {
            written = try frame.withUnsafeBytes { try socket.writeAvailable($0) }
        } catch {
            writeFailed(error)
            return
        }
        if written > 0 { lock.withLock { lastActivity = Date() } }
        outboxCondition.lock()
        if written < frame.count {
            let rest = Array(frame[written...])
            outbox.insert(rest, at: outboxHead)
            outboxBytes += rest.count
        }
        let more = outboxHead < outbox.count
        if !more {
            outbox.removeAll(keepingCapacity: false)
            outboxHead = 0
            writerRunning = false
        }
        let shut = !more && shutdownWhenFlushed
        outboxCondition.broadcast()
        outboxCondition.unlock()
        if more {
            writer.async { [self] in drainOutbox() }
        } else if shut {
            socket.shutdown()
        }
    }

    /// A write failed: nothing more is written, and the connection closes (`unreadAnswers`).
    /// `waited`: how long the failed write was blocked (the writer's; for the log, where it shows
    /// the send timeout at work).
    private func writeFailed(_ error: any Error, waited: Duration? = nil) {
        // The peer is gone (its end closed or shut down), not merely slow (a send timeout): what
        // it sent before is read to the end (`drainingAfterWriteFailure`). The socket is shut
        // down by the close below, so the reads end at what is buffered.
        if let e = error as? SystemError, e.errno == EPIPE || e.errno == ECONNRESET {
            // Not when this side chose to close (its own shutdown fails the writer's write too).
            lock.withLock { if !closeRequested { drainingAfterWriteFailure = true } }
        }
        // The wait in the failure itself, so that a sender that sees it first says it too.
        let failure = "\(error)" + (waited.map { w in
            String(format: " (after %.2f s)", w.seconds)
        } ?? "")
        outboxCondition.lock()
        writeFailure = failure
        outbox.removeAll()
        outboxHead = 0
        outboxBytes = 0
        writerRunning = false
        outboxCondition.broadcast()
        outboxCondition.unlock()
        // Part of the frame may be on the wire: the stream is no longer in a known state.
        close(reason: .unreadAnswers(failure))
    }

    /// The writer: writes queued frames in order until none is left. A frame not taken within
    /// the socket's send timeout, or a failed write, closes the connection (`unreadAnswers`).
    private func drainOutbox() {
        while true {
            outboxCondition.lock()
            guard outboxHead < outbox.count else {
                outbox.removeAll(keepingCapacity: false)
                outboxHead = 0
                writerRunning = false
                let shut = shutdownWhenFlushed
                outboxCondition.broadcast()
                outboxCondition.unlock()
                if shut { socket.shutdown() }
                return
            }
            let frame = outbox[outboxHead]
            outbox[outboxHead] = []
            outboxHead += 1
            outboxCondition.unlock()
            let began = ContinuousClock.now
            do {
                try socket.writeAll(frame)
                lock.withLock { lastActivity = Date() }
                outboxCondition.lock()
                outboxBytes -= frame.count
                outboxCondition.broadcast()
                outboxCondition.unlock()
            } catch {
                writeFailed(error, waited: ContinuousClock.now - began)
                return
            }
        }
    }

    /// Answers a request. If the answer cannot be written (the peer stopped reading until the send
    /// timeout, or vanished), the stream is no longer in a known state: the writer closes it.
    public func reply(to id: RPCID, _ result: Result<JSONValue, SearchlightError>) {
        do {
            try send(.response(id: id, result: result))
        } catch {
            close(reason: .unreadAnswers("\(error)"))
        }
    }

    /// Answers a request with a handler's answer: a value, or a result already written (a
    /// query's items), framed without being read again.
    public func reply(to id: RPCID, answer: Result<WireAnswer, SearchlightError>) {
        switch answer {
        case .success(.value(let value)): reply(to: id, .success(value))
        case .success(.encoded(let result)):
            do {
                try enqueue(RPCMessage.responseFrame(id: id, encodedResult: result))
            } catch {
                close(reason: .unreadAnswers("\(error)"))
            }
        case .failure(let error): reply(to: id, .failure(error))
        }
    }

    public func notify(_ method: String, _ params: JSONValue = [:]) throws {
        try send(.notification(method: method, params: params))
    }

    /// Sends a request and waits for its answer. A JSON-RPC error answer throws `SearchlightError`.
    public func call(_ method: String, _ params: JSONValue = [:]) async throws -> JSONValue {
        // Without a decoder the answer is the result's `JSONValue`.
        try await perform(method, params, decode: nil) as! JSONValue
    }

    /// Sends a request and reads its answer's result straight from the frame's bytes with
    /// `decode` (on the reader thread, as `call` parses the `JSONValue` there): for answers read
    /// into typed results, without the tree (`SearchPageAnswer`, `UserQueryAnswer`). A result
    /// `decode` refuses throws `parseError`; an error answer throws `SearchlightError`.
    public func call<T: Sendable>(_ method: String, _ params: JSONValue = [:],
                                  decode: @escaping @Sendable (UnsafeBufferPointer<UInt8>) throws -> T) async throws -> T {
        let value = try await perform(method, params, decode: { bytes in try decode(bytes) as any Sendable })
        // `decode` answers a T, and a `JSONValue` arrives only without one.
        return value as! T
    }

    /// Sends a request and reads its answer's result as a `T` straight from the frame's bytes,
    /// in one pass over the answer when its result is its last member (see `WireResultDecodable`;
    /// the result may be nested `maxDepth - 1` deep, as inside the envelope). A result `T`
    /// refuses throws `parseError`; an error answer throws `SearchlightError`.
    public func call<T: WireResultDecodable>(_ method: String, _ params: JSONValue = [:], as type: T.Type) async throws -> T {
        try await call(method, params: .value(params), as: type)
    }

    /// `call(_:_:as:)` with the params already written (a JSON object's bytes), straight into
    /// the frame: no `JSONValue` tree built for them and written out again.
    public func call<T: WireResultDecodable>(_ method: String, encodedParams: [UInt8], as type: T.Type) async throws -> T {
        try await call(method, params: .encoded(encodedParams), as: type)
    }

    private func call<T: WireResultDecodable>(_ method: String, params: Params, as type: T.Type) async throws -> T {
        let depth = maxDepth - 1
        let value = try await perform(method, params, decode: { bytes in try T.decode(bytes, maxDepth: depth) as any Sendable }, strict: true)
        return value as! T
    }

    /// A request's params: a value, or its JSON already written.
    private enum Params {
        case value(JSONValue)
        case encoded([UInt8])
    }

    private func perform(_ method: String, _ params: JSONValue, decode: Waiter.Decode?) async throws -> any Sendable {
        try await perform(method, .value(params), decode: decode, strict: false)
    }

    private func perform(_ method: String, _ params: Params, decode: Waiter.Decode?, strict: Bool) async throws -> any Sendable {
        let waiter = Waiter(decode: decode, strict: strict, maxDepth: maxDepth)
        let (id, closedReason): (RPCID, CloseReason?) = lock.withLock {
            defer { nextID += 1 }
            let id = RPCID.number(nextID)
            if closed == nil { pending[id] = waiter }
            return (id, closed)
        }
        if let closedReason {
            throw SearchlightError(.remoteConnection, "the connection is closed (\(closedReason)); reconnect")
        }
        do {
            // Written at once when the socket takes it, else queued: never waits here.
            switch params {
            case .value(let value): try send(.request(id: id, method: method, params: value))
            case .encoded(let bytes): try enqueue(RPCMessage.requestFrame(id: id, method: method, encodedParams: bytes))
            }
        } catch {
            if let c = lock.withLock({ pending.removeValue(forKey: id) }) {
                c.fail(SearchlightError(.remoteConnection, "could not send \(method): \(error)"))
            }
        }
        if let readRole, !waiter.isDone {
            // One deadline for taking the role and reading: the pool thread is held at most this long.
            let start = DispatchTime.now().uptimeNanoseconds
            let deadline = start + UInt64(callerReadSeconds * 1e9)
            if readRole.callerAcquire(within: callerReadSeconds) {
                readOwnAnswer(waiter, role: readRole, deadline: deadline, spinUntil: start + callerSpinNanoseconds)
            } else {
                // Another caller reads (it hands over when done) or the thread does.
                readRole.needThread()
            }
        }
        return try await withTaskCancellationHandler {
            try await waiter.value()
        } onCancel: {
            if let c = lock.withLock({ pending.removeValue(forKey: id) }) {
                c.fail(CancellationError())
            }
        }
    }

    /// Holding the read role, reads the socket on the calling thread until `waiter`'s answer is
    /// in, for at most `callerReadSeconds`, then gives the role back. Answers to other calls are
    /// delivered on the way (as the reader thread would); at the first frame that is not an
    /// answer (a notification, a request, a malformed frame) it stops, and leaves that frame and
    /// the rest to the reader thread, so that the handler sees them on that thread, in order.
    /// `deadline`: `DispatchTime`'s uptime in nanoseconds (monotonic: a step of the wall clock
    /// does not stretch it). Past it, even answers already buffered are left to the reader thread.
    /// Until `spinUntil` (same clock) it reads without sleeping (`CallerReads.spinSeconds`).
    private func readOwnAnswer(_ waiter: Waiter, role: ReadRole, deadline: UInt64, spinUntil: UInt64) {
        var handBack = false
        let fd = socket.fd
        reading: while !waiter.isDone {
            do {
                while let frame = try frames.next() {
                    guard DispatchTime.now().uptimeNanoseconds < deadline, dispatchAnswer(frame) else {
                        frames.putBackLastFrame()
                        handBack = true
                        break reading
                    }
                    if waiter.isDone { break reading }
                }
            } catch {
                // Too large a frame: the reader thread meets it again and closes the connection.
                handBack = true
                break
            }
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < deadline else { break }
            let n: Int
            do {
                if now < spinUntil {
                    // Awake: what the daemon sends is read the moment it is there.
                    guard let got = try socket.readAvailable(into: callerChunk) else {
                        sched_yield()
                        continue
                    }
                    n = got
                } else {
                    // Whole milliseconds left, rounded down: with less than one left the wait
                    // ends (the reader thread takes over), so the thread is never held past the
                    // bound (rounded up, it was held up to 1 ms longer).
                    let milliseconds = (deadline - now) / 1_000_000
                    guard milliseconds > 0 else { break }
                    var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    let rc = poll(&pfd, 1, Int32(milliseconds))
                    if rc < 0, errno == EINTR { continue }
                    if rc == 0 { continue } // the deadline is checked above
                    n = try socket.read(into: callerChunk)
                }
            } catch is UnixSocket.ReceiveTimeout {
                continue
            } catch {
                lock.withLock { callerReadEnd = .error("\(error)") }
                handBack = true
                break
            }
            if n == 0 {
                lock.withLock { callerReadEnd = .eof }
                handBack = true
                break
            }
            frames.append(UnsafeRawBufferPointer(rebasing: callerChunk[0..<n]))
        }
        let waiting = lock.withLock { !pending.isEmpty || !submitted.isEmpty }
        role.callerRelease(threadNeeded: handBack || waiting || frames.pendingByteCount > 0)
    }

    /// A caller's read: delivers `frame` when it is an answer to a call (true); false for any
    /// other frame, left to the reader thread.
    private func dispatchAnswer(_ frame: ArraySlice<UInt8>) -> Bool {
        if deliverDecoded(frame) { return true }
        guard case .response(let id, let result)? = try? RPCMessage.decode(frame, maxDepth: maxDepth) else { return false }
        let (waiter, call) = lock.withLock { (pending.removeValue(forKey: id), submitted.removeValue(forKey: id)) }
        call?.complete(result.mapError { $0 as any Error })
        waiter?.resume(result)
        return true
    }

    /// A success answer to a call that reads its result itself (`call(_:_:decode:)`), delivered
    /// from the frame's bytes without the `JSONValue` tree; false for every other frame (the
    /// general path reads it). Only the envelope is read here, the result skipped over.
    private func deliverDecoded(_ frame: ArraySlice<UInt8>) -> Bool {
        // Only a call waiting with a decoder gains from it; submitted calls and requests do not.
        guard lock.withLock({ pending.values.contains { $0.decode != nil } }) else { return false }
        return frame.withUnsafeBufferPointer { buffer -> Bool in
            // One pass: the result read where it starts, when it is the last member and its call's
            // decoder is strict (it then refuses anything but the result alone).
            if let head = ResponseEnvelope.resultLast(buffer, maxDepth: maxDepth) {
                let waiter: Waiter? = lock.withLock {
                    guard let waiter = pending[head.id], waiter.strict, submitted[head.id] == nil else { return nil }
                    return waiter
                }
                if let waiter, let value = waiter.decodeStrictly(UnsafeBufferPointer(rebasing: buffer[head.result])) {
                    // Gone only if the call was cancelled meanwhile (it has failed then, and keeps that).
                    lock.withLock {
                        if pending[head.id] === waiter { pending[head.id] = nil }
                    }
                    waiter.succeed(value)
                    return true
                }
                // Not the result alone (a member after it, or malformed): read in two passes below.
            }
            guard let envelope = ResponseEnvelope.scan(buffer, maxDepth: maxDepth) else { return false }
            let waiter: Waiter? = lock.withLock {
                guard pending[envelope.id]?.decode != nil, submitted[envelope.id] == nil else { return nil }
                return pending.removeValue(forKey: envelope.id)
            }
            guard let waiter else { return false }
            waiter.deliver(UnsafeBufferPointer(rebasing: buffer[envelope.result]))
            return true
        }
    }

    /// Sends a request whose params are already encoded (a JSON object's bytes), at once, and
    /// returns its call, whose answer is awaited later. Calls submitted one after another from
    /// one task are on the wire in that order, so several can be in flight (pipelined) while
    /// the peer handles them in order; encoding the params once, straight into the frame, also
    /// saves building a `JSONValue` tree for large calls (a chunk of items).
    public func submit(_ method: String, encodedParams: [UInt8]) throws -> SubmittedCall {
        let (id, call): (RPCID, SubmittedCall) = try lock.withLock {
            if let closed { throw SearchlightError(.remoteConnection, "the connection is closed (\(closed)); reconnect") }
            defer { nextID += 1 }
            let id = RPCID.number(nextID)
            let call = SubmittedCall(method: method, connection: self)
            submitted[id] = call
            return (id, call)
        }
        do {
            try enqueue(RPCMessage.requestFrame(id: id, method: method, encodedParams: encodedParams))
        } catch {
            _ = lock.withLock { submitted.removeValue(forKey: id) }
            throw SearchlightError(.remoteConnection, "could not send \(method): \(error)")
        }
        // Its answer is read by the reader thread (or a caller reading meanwhile).
        readRole?.needThread()
        return call
    }

    /// Closes the connection: the reader thread wakes, outstanding calls fail, `onClose` runs.
    /// Frames already queued are written first (for at most `closeFlushSeconds`).
    public func close() {
        lock.withLock { closeRequested = true }
        shutdownAfterFlush()
    }

    /// Closes the connection, telling `onClose` why (the first reason given wins).
    public func close(reason: CloseReason) {
        lock.withLock {
            if closeReason == nil, !closeRequested { closeReason = reason }
            closeRequested = true
        }
        shutdownAfterFlush()
    }

    private func shutdownAfterFlush() {
        // A reader thread lingering after a caller's read is needed to see the close.
        readRole?.needThread()
        outboxCondition.lock()
        let flushing = writerRunning
        if flushing { shutdownWhenFlushed = true }
        outboxCondition.broadcast()
        outboxCondition.unlock()
        guard flushing else {
            socket.shutdown()
            return
        }
        // A peer that does not read the rest does not keep the connection open for it.
        DispatchQueue.global().asyncAfter(deadline: .now() + Self.closeFlushSeconds) { [socket] in socket.shutdown() }
    }
}

/// A request sent with `RPCConnection.submit`: its answer, once it comes (or the connection's
/// loss). `value()` may be awaited once or several times, from any task.
public final class SubmittedCall: Sendable {
    public let method: String
    /// The connection it went on: after a `remoteConnection` failure, its `closeAnnouncement`
    /// says whether the peer announced the close (then the call was never processed).
    public let connection: RPCConnection
    private let state = Mutex<(result: Result<JSONValue, any Error>?, waiters: [CheckedContinuation<JSONValue, any Error>])>((nil, []))

    init(method: String, connection: RPCConnection) {
        self.method = method
        self.connection = connection
    }

    func complete(_ result: Result<JSONValue, any Error>) {
        let waiters: [CheckedContinuation<JSONValue, any Error>] = state.withLock { state in
            guard state.result == nil else { return [] }
            state.result = result
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(with: result) }
    }

    /// The answer; a JSON-RPC error answer throws `SearchlightError`.
    public func value() async throws -> JSONValue {
        try await withCheckedThrowingContinuation { continuation in
            let done: Result<JSONValue, any Error>? = state.withLock { state in
                if state.result == nil { state.waiters.append(continuation) }
                return state.result
            }
            if let done { continuation.resume(with: done) }
        }
    }
}

/// A call waiting for its answer, and how its result is read. The answer may come before the
/// caller waits for it (read by the caller itself, or by the reader thread while the caller was
/// still sending): it is kept until `value()` takes it.
final class Waiter: Sendable {
    typealias Decode = @Sendable (UnsafeBufferPointer<UInt8>) throws -> any Sendable
    /// Reads the result from the answer's bytes; nil: the result as a `JSONValue`.
    let decode: Decode?
    /// `decode` refuses anything but one well-formed JSON value (`WireResultDecodable`).
    let strict: Bool
    let maxDepth: Int
    private enum State {
        case waiting
        case suspended(CheckedContinuation<any Sendable, any Error>)
        case done(Result<any Sendable, any Error>)
        case taken
    }
    private let state = Mutex<State>(.waiting)

    init(decode: Decode?, strict: Bool = false, maxDepth: Int) {
        self.decode = decode
        self.strict = strict && decode != nil
        self.maxDepth = maxDepth
    }

    var isDone: Bool {
        state.withLock { if case .waiting = $0 { false } else if case .suspended = $0 { false } else { true } }
    }

    /// The answer: at once when it is in, else once it comes.
    func value() async throws -> any Sendable {
        let ready: Result<any Sendable, any Error>? = state.withLock { state in
            guard case .done(let result) = state else { return nil }
            state = .taken
            return result
        }
        if let ready { return try ready.get() }
        return try await withCheckedThrowingContinuation { continuation in
            let ready: Result<any Sendable, any Error>? = state.withLock { state in
                guard case .done(let result) = state else {
                    state = .suspended(continuation)
                    return nil
                }
                state = .taken
                return result
            }
            if let ready { continuation.resume(with: ready) }
        }
    }

    /// The first result wins; later ones (a cancellation after the answer) are dropped.
    private func complete(_ result: Result<any Sendable, any Error>) {
        let continuation: CheckedContinuation<any Sendable, any Error>? = state.withLock { state in
            switch state {
            case .waiting:
                state = .done(result)
                return nil
            case .suspended(let continuation):
                state = .taken
                return continuation
            case .done, .taken:
                return nil
            }
        }
        continuation?.resume(with: result)
    }

    /// An answer read by `RPCMessage.decode` (an error answer, or a call without a decoder).
    func resume(_ result: Result<JSONValue, SearchlightError>) {
        switch result {
        case .success(let value):
            guard decode != nil else { return complete(.success(value)) }
            // A success answer the envelope scan did not take (a member it does not know): its
            // result is decoded from the value, written out again. Rare, and never from our daemon.
            value.serialized().withUnsafeBufferPointer { deliver($0) }
        case .failure(let error):
            complete(.failure(error))
        }
    }

    /// A success answer's result bytes.
    func deliver(_ result: UnsafeBufferPointer<UInt8>) {
        do {
            if let decode {
                complete(.success(try decode(result)))
            } else {
                complete(.success(try JSONValue.parse(result, maxDepth: maxDepth)))
            }
        } catch {
            complete(.failure(SearchlightError(.parseError, "the answer could not be read: \(error)")))
        }
    }

    func fail(_ error: any Error) { complete(.failure(error)) }

    /// The result read by a strict `decode` from bytes that may not be the result alone; nil
    /// when it refuses them (nothing is completed then).
    func decodeStrictly(_ bytes: UnsafeBufferPointer<UInt8>) -> (any Sendable)? {
        guard strict, let decode else { return nil }
        return try? decode(bytes)
    }

    /// A result read by `decodeStrictly`.
    func succeed(_ value: any Sendable) { complete(.success(value)) }
}
