/// The queue of CPU-heavy query work (a query's transformer embedding, `QueryCompute`) as a pure
/// state machine: one FIFO per owner (a uid), owners served in turn (round robin), at most
/// `perOwner` jobs of one owner running and `slots` in all. A job whose deadline passes while it
/// waits leaves the queue as expired (answered `cancelled`); a job can be withdrawn while it
/// waits (its client disconnected). Time is given to it (`now`, monotonic nanoseconds), so the
/// tests drive it with an injected clock.
///
/// One user sending a hundred queries on thirty connections therefore holds at most `perOwner`
/// of the compute threads, and another user's query waits for at most the jobs already running,
/// not for the hundred queued.
struct FairQueue<Job> {
    struct Entry {
        let id: UInt64
        let owner: UInt32
        /// Monotonic nanoseconds after which the job is not worth starting.
        let deadline: UInt64
        let job: Job
    }

    /// What `next` hands out: jobs to start now, and waiting jobs whose deadline passed.
    struct Step {
        var start: [Entry] = []
        var expired: [Entry] = []
    }

    let slots: Int
    let perOwner: Int
    private var queues: [UInt32: [Entry]] = [:]
    /// Owners with queued jobs, in the order they are served next.
    private var turn: [UInt32] = []
    private var running: [UInt32: Int] = [:]
    private(set) var runningCount = 0
    private var nextID: UInt64 = 1
    /// When each owner last had a job started (a counter): the owner served least recently goes
    /// first, so a uid that just arrived is not put behind a flood that was already in the line.
    private var served: [UInt32: UInt64] = [:]
    private var serveCount: UInt64 = 0

    init(slots: Int, perOwner: Int) {
        precondition(slots >= 1 && perOwner >= 1)
        self.slots = slots
        self.perOwner = perOwner
    }

    /// Jobs waiting (all owners).
    var queuedCount: Int { queues.values.reduce(0) { $0 + $1.count } }

    func queued(owner: UInt32) -> Int { queues[owner]?.count ?? 0 }
    func running(owner: UInt32) -> Int { running[owner] ?? 0 }

    /// Queues `job`; returns its id (for `withdraw`). It starts at a later `next`.
    mutating func enqueue(owner: UInt32, deadline: UInt64, job: Job) -> UInt64 {
        let id = nextID
        nextID += 1
        if queues[owner, default: []].isEmpty { turn.append(owner) }
        queues[owner, default: []].append(Entry(id: id, owner: owner, deadline: deadline, job: job))
        return id
    }

    /// Takes a waiting job out of the queue (its client left, or its caller stopped waiting).
    /// nil when it is not waiting: it already started, finished or expired.
    mutating func withdraw(_ id: UInt64) -> Entry? {
        for (owner, q) in queues {
            guard let i = q.firstIndex(where: { $0.id == id }) else { continue }
            let entry = queues[owner]!.remove(at: i)
            if queues[owner]!.isEmpty { dropOwner(owner) }
            return entry
        }
        return nil
    }

    /// The jobs that start now (each owner in turn, while slots are free and the owner is under
    /// `perOwner`), and every waiting job whose deadline is at or before `now`. A started job
    /// holds its slot until `finished(owner:)`.
    mutating func next(now: UInt64) -> Step {
        var step = Step()
        for owner in turn {
            let (live, dead) = queues[owner]!.partitioned { $0.deadline > now }
            step.expired += dead
            queues[owner] = live
        }
        turn.removeAll { queues[$0]?.isEmpty ?? true }
        for owner in Array(queues.keys) where queues[owner]!.isEmpty {
            queues[owner] = nil
            forgetIfIdle(owner)
        }
        var progress = true
        while runningCount < slots && progress {
            progress = false
            // The eligible owner served least recently (never: first), ties in line order.
            var pick: Int?
            for (k, owner) in turn.enumerated() where (running[owner] ?? 0) < perOwner {
                if let p = pick, (served[turn[p]] ?? 0) <= (served[owner] ?? 0) { continue }
                pick = k
            }
            guard let k = pick else { break }
            let owner = turn[k]
            let entry = queues[owner]!.removeFirst()
            running[owner, default: 0] += 1
            runningCount += 1
            serveCount += 1
            served[owner] = serveCount
            step.start.append(entry)
            // This owner goes to the back of the line (or leaves it, with nothing queued).
            turn.remove(at: k)
            if queues[owner]!.isEmpty {
                queues[owner] = nil
            } else {
                turn.append(owner)
            }
            progress = true
        }
        return step
    }

    /// A started job of `owner` ended: its slot is free.
    mutating func finished(owner: UInt32) {
        guard let n = running[owner], n > 0 else { return }
        running[owner] = n == 1 ? nil : n - 1
        runningCount -= 1
        forgetIfIdle(owner)
    }

    private mutating func dropOwner(_ owner: UInt32) {
        queues[owner] = nil
        turn.removeAll { $0 == owner }
        forgetIfIdle(owner)
    }

    /// An owner with nothing queued or running is forgotten (the table stays as small as the
    /// uids at work); it comes back as never served, which an idle uid deserves.
    private mutating func forgetIfIdle(_ owner: UInt32) {
        if (queues[owner]?.isEmpty ?? true) && running[owner] == nil { served[owner] = nil }
    }
}

extension Array {
    /// The elements for which `keep` is true, and the others, each in order.
    fileprivate func partitioned(_ keep: (Element) -> Bool) -> ([Element], [Element]) {
        var yes: [Element] = [], no: [Element] = []
        for e in self {
            if keep(e) { yes.append(e) } else { no.append(e) }
        }
        return (yes, no)
    }
}
