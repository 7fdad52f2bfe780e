import Foundation
import SearchlightUnits
import SearchlightWire

extension ExtensionHost {
    /// One extension unit's life as a value: one `State`, changed only by `transition`, which says
    /// what to do as `Effect`s. Pure (time is passed in, processes are handles), so every path
    /// is tested without processes or clocks, as `Throttle` is (ExtensionHostMachineTests).
    struct Machine {
        /// A crash streak is forgiven after this long without trouble.
        static let healthyReset: TimeInterval = 600
        static let maximumBackoff: TimeInterval = 300

        private(set) var state: State = .idle(lastLaunch: nil, streak: 0)
        private(set) var unit: ExtensionUnit
        private(set) var record = Record()
        /// The first relaunch delay after a failure (`--backoff`).
        let backoffBase: TimeInterval

        init(unit: ExtensionUnit, backoffBase: TimeInterval) {
            self.unit = unit
            self.backoffBase = backoffBase
        }

        var label: String { unit.label }

        // MARK: - The transition

        mutating func transition(_ event: Event, at now: Date) -> [Effect] {
            switch event {
            case .linkWanted(let waiter): return linkWanted(waiter, now)
            case .spawned(let launch): return spawned(launch, now)
            case .spawnFailed(let message, let program): return spawnFailed(message, program: program, now)
            case .handshakeCompleted(let connection): return handshakeCompleted(connection, now)
            case .handshakeTimedOut(let launch):
                guard case .launching(let current, _, _) = state, current === launch else { return [] }
                return [log(.warning, "extension did not complete its handshake", ["pid": launch.pid,
                    "timeout_s": unit.indexExtension.acknowledgementTimeout])] + terminate(hung: true)
            case .attached(let session): return attached(session, now)
            case .detached(let connection, let reason): return detached(connection, reason: reason)
            case .connectionClosed(let connection, let reason): return connectionClosed(connection, reason: reason)
            case .exited(let launch, let termination): return exited(launch, termination, now)
            case .exitTimedOut(let launch):
                guard !launch.process.hasExited else { return [] }
                return [log(.warning, "extension did not exit in time; killing it", ["pid": launch.pid, "after_s": unit.exitTimeOut]),
                        .signal(launch, SIGKILL)]
            case .terminate(let hung): return terminate(hung: hung)
            case .stopLaunch(let launch, let hung): return stopLaunch(launch, hung: hung)
            case .idleExpired:
                guard case .running(_, let work, _) = state, work.inFlight == 0,
                      work.lastActivity.addingTimeInterval(unit.timeOut) <= now else { return [] }
                return [log(.info, "extension idle; asking it to exit", ["timeout_s": unit.timeOut])] + terminate(hung: false)
            case .kill: return kill()
            case .activity: return withWork { work in work.lastActivity = now }
            case .requestEnded(let connection, let ticket): return requestEnded(connection, ticket, now)
            case .stopPacing(let id):
                var stopped = false
                let effects = withWork { work in
                    guard work.request == id, work.background else { return }
                    work.background = false
                    stopped = true
                }
                return stopped ? effects + [.answer("pacing stopped")] : effects
            case .waiveLaunchDelay: return waiveLaunchDelay(now)
            case .paced:
                record.pacedCalls += 1
                return []
            case .unitChanged(let unit):
                self.unit = unit
                return []
            }
        }

        private mutating func linkWanted(_ waiter: Waiter, _ now: Date) -> [Effect] {
            switch state {
            case .running(let link, var work, let streak):
                work.begin(waiter.ticket, at: now)
                state = .running(link, work, streak: streak)
                return [.deliver([waiter], .success(link))]
            case .attached(let link, var work):
                work.begin(waiter.ticket, at: now)
                state = .attached(link, work)
                return [.deliver([waiter], .success(link))]
            case .spawning(let at, let streak, let waiters):
                state = .spawning(at: at, streak: streak, waiters: waiters + [waiter])
                return []
            case .launching(let launch, let streak, let waiters):
                state = .launching(launch, streak: streak, waiters: waiters + [waiter])
                return []
            case .stopping:
                return [.deliver([waiter], .failure(NotAvailable(retryAt: now.addingTimeInterval(1), reason: "the extension is stopping")))]
            case .idle(let lastLaunch, let streak):
                if let lastLaunch, lastLaunch.addingTimeInterval(unit.throttleInterval) > now {
                    return [.deliver([waiter], .failure(NotAvailable(retryAt: lastLaunch.addingTimeInterval(unit.throttleInterval),
                        reason: "ThrottleInterval \(unit.throttleInterval) s")))]
                }
                state = .spawning(at: now, streak: streak, waiters: [waiter])
                return [.spawn(unit, at: now)]
            case .backingOff(let until, let streak):
                if until > now {
                    return [.deliver([waiter], .failure(NotAvailable(retryAt: until, reason: "it is backing off after \(streak) failed launch(es)")))]
                }
                state = .spawning(at: now, streak: streak, waiters: [waiter])
                return [.spawn(unit, at: now)]
            }
        }

        private mutating func spawned(_ launch: LaunchedExtension, _ now: Date) -> [Effect] {
            record.launches += 1
            record.launchFailure = nil
            var effects = [log(.info, "extension launched", ["pid": launch.pid]),
                           Effect.emit("extension.launched", ["label": .string(label), "pid": .number(Double(launch.pid))])]
            switch state {
            case .spawning(_, let streak, let waiters):
                let (forgiven, notice) = noticeProgram(launch.program, streak: streak)
                state = .launching(launch, streak: forgiven ? 0 : streak, waiters: waiters)
                // An extension that never completes its handshake is treated like one that hangs.
                return notice + effects + [.serve(launch, handshakeTimeout: unit.indexExtension.acknowledgementTimeout)]
            case .idle, .backingOff, .launching, .running, .attached, .stopping:
                // A hand-started copy attached meanwhile (or another launch won): this one is not
                // wanted. Not in `state`, its exit counts as asked for.
                _ = noticeProgram(launch.program, streak: state.streak)
                effects += [.serve(launch, handshakeTimeout: nil), .stop(launch)]
                return effects
            }
        }

        private mutating func spawnFailed(_ message: String, program: ProgramIdentity?, _ now: Date) -> [Effect] {
            record.crashes += 1
            record.launchFailure = "could not start: \(message)"
            var effects = [log(.error, "extension could not start", ["error": message]),
                           Effect.emit("extension.failed", ["label": .string(label), "message": .string(message)])]
            switch state {
            case .spawning(_, let streak, let waiters):
                let (forgiven, notice) = noticeProgram(program, streak: streak)
                let streak = (forgiven ? 0 : streak) + 1
                state = .backingOff(until: now.addingTimeInterval(relaunchDelay(streak: streak)), streak: streak)
                effects = notice + effects
                effects.append(.deliver(waiters, .failure(SearchlightError(.extensionFailed, "\(label) could not start: \(message)"))))
                return effects
            case .idle, .backingOff, .launching, .running, .attached, .stopping:
                _ = noticeProgram(program, streak: state.streak)
                return effects
            }
        }

        private mutating func handshakeCompleted(_ connection: RPCConnection, _ now: Date) -> [Effect] {
            switch state {
            case .launching(let launch, let streak, let waiters) where launch.connection === connection:
                let link = Link(session: launch.session, launch: launch, since: now)
                var work = Work(lastActivity: now)
                for waiter in waiters { work.begin(waiter.ticket, at: now) }
                state = .running(link, work, streak: streak)
                let startup = now.timeIntervalSince(launch.at) * 1000
                return [log(.info, "extension ready", ["pid": launch.pid, "startup_ms": String(format: "%.1f", startup)]),
                        .deliver(waiters, .success(link)),
                        // Launched while the machine is busy: it learns at once, as the running ones did.
                        .tellIfThrottled(connection), .wake]
            case .idle, .backingOff, .spawning, .launching, .running, .attached, .stopping:
                return []
            }
        }

        private mutating func attached(_ session: any ExtensionSessionHandle, _ now: Date) -> [Effect] {
            var effects: [Effect] = []
            var waiters: [Waiter] = []
            switch state {
            case .running(let old, _, _):
                // The spawned copy it replaces is asked to exit: not in `state`, its exit is expected.
                if let launch = old.launch { effects.append(.askToExit(launch)) } else { effects.append(.close(old.connection)) }
            case .attached(let old, _):
                effects.append(.close(old.connection))
            case .launching(let launch, _, let waiting):
                effects.append(.askToExit(launch))
                waiters = waiting
            case .spawning(_, _, let waiting):
                waiters = waiting  // the launch under way is stopped when it completes
            case .idle, .backingOff, .stopping:
                break
            }
            let link = Link(session: session, launch: nil, since: now)
            var work = Work(lastActivity: now)
            for waiter in waiters { work.begin(waiter.ticket, at: now) }
            // Whatever the launched copies did, the author's own copy starts with a clean record.
            state = .attached(link, work)
            return effects + [
                log(.notice, "extension attached", ["pid": session.peer.pid, "uid": session.peer.uid]),
                .emit("extension.attached", ["label": .string(label), "pid": .number(Double(session.peer.pid))]),
                .deliver(waiters, .success(link)), .wake,
            ]
        }

        private mutating func detached(_ connection: RPCConnection, reason: String) -> [Effect] {
            switch state {
            case .attached(let link, _) where link.connection === connection:
                state = .idle(lastLaunch: nil, streak: 0)
                return [log(.notice, "extension detached", ["reason": reason]), .emit("extension.detached", ["label": .string(label)]), .wake]
            case .idle, .backingOff, .spawning, .launching, .running, .attached, .stopping:
                return []
            }
        }

        /// After its exit that is expected (the exit was handled); before it, the extension closed
        /// its socket but lives on: it is stopped, and its end is a failure.
        private mutating func connectionClosed(_ connection: RPCConnection, reason: String) -> [Effect] {
            let launch: LaunchedExtension, streak: Int, waiters: [Waiter]
            switch state {
            case .running(let link, _, let s) where link.connection === connection:
                guard let l = link.launch else { return [] }
                (launch, streak, waiters) = (l, s, [])
            case .launching(let l, let s, let w) where l.connection === connection:
                (launch, streak, waiters) = (l, s, w)
            case .idle, .backingOff, .spawning, .launching, .running, .attached, .stopping:
                return []
            }
            state = .stopping(launch, .closedConnection, streak: streak, waiters: waiters)
            return [log(.warning, "extension connection closed; stopping the extension", ["pid": launch.pid, "reason": reason]), .stop(launch)]
        }

        private mutating func exited(_ launch: LaunchedExtension, _ termination: Termination, _ now: Date) -> [Effect] {
            // Ours: the launch `state` is about. Otherwise it was replaced or superseded, and asked to exit.
            var ours: (stop: Stop?, streak: Int, waiters: [Waiter])?
            switch state {
            case .launching(let l, let streak, let waiters) where l === launch: ours = (nil, streak, waiters)
            case .running(let link, _, let streak) where link.launch === launch: ours = (nil, streak, [])
            case .stopping(let l, let stop, let streak, let waiters) where l === launch: ours = (stop, streak, waiters)
            case .idle, .backingOff, .spawning, .launching, .running, .attached, .stopping: ours = nil
            }
            let asked = ours.map { $0.stop == .asked } ?? true
            let failed = !asked || termination != .exited(0)
            if let ours {
                let healthy = now.timeIntervalSince(launch.at) >= Self.healthyReset
                let streak = healthy ? 0 : ours.streak
                if !asked {
                    record.crashes += 1
                    state = .backingOff(until: now.addingTimeInterval(relaunchDelay(streak: streak + 1)), streak: streak + 1)
                } else {
                    state = .idle(lastLaunch: launch.at, streak: failed ? ours.streak : streak)
                }
            }
            let nextLaunch: Date? = if case .backingOff(let until, _) = state, until > now { until } else { nil }
            let exit = ExtensionExit(pid: launch.pid, termination: termination, expected: asked, stoppedAsHung: ours?.stop == .hung,
                lastStderr: launch.stderrTail.snapshot, stderrPath: unit.standardErrorPath, nextLaunch: nextLaunch,
                crashStreak: state.streak, at: now)
            record.lastExit = exit
            var effects: [Effect] = [.exited(launch, exit)]
            if !asked {
                effects.append(log(.warning, "extension exited unexpectedly", ["pid": launch.pid, "status": exit.summary,
                    "stderr": exit.lastStderr.last ?? "-"]))
            } else {
                effects.append(log(.info, "extension exited", ["pid": launch.pid, "status": termination]))
            }
            effects.append(.emit("extension.exited", ["label": .string(label), "pid": .number(Double(launch.pid)),
                "status": .string(termination.description), "crashed": .bool(!asked)]))
            if let waiters = ours?.waiters, !waiters.isEmpty {
                effects.append(.deliver(waiters, .failure(SearchlightError(.extensionFailed, "\(label) exited (\(termination)) before its handshake"))))
            }
            effects.append(.wake)
            return effects
        }

        /// Stops the extension: `hung` sends SIGTERM at once (its end counts as a failure);
        /// otherwise it is asked with `extension.shutdown`. Either way SIGKILL follows after
        /// `ExitTimeOut`. An attached extension's connection is closed instead.
        private mutating func terminate(hung: Bool) -> [Effect] {
            switch state {
            case .attached(let link, _):
                state = .idle(lastLaunch: nil, streak: 0)
                return [.close(link.connection)]
            case .running(let link, _, let streak):
                guard let launch = link.launch else { return [] }
                state = .stopping(launch, hung ? .hung : .asked, streak: streak, waiters: [])
                return [hung ? .stop(launch) : .askToExit(launch)]
            case .launching(let launch, let streak, let waiters):
                state = .stopping(launch, hung ? .hung : .asked, streak: streak, waiters: waiters)
                return [hung ? .stop(launch) : .askToExit(launch)]
            case .stopping(let launch, let stop, let streak, let waiters):
                // Asked again (the daemon stopping while it is): SIGTERM now. An exit the daemon
                // wants anyway stays no failure.
                state = .stopping(launch, hung && stop != .asked ? .hung : .asked, streak: streak, waiters: waiters)
                return [.stop(launch)]
            case .idle, .backingOff, .spawning:
                return []
            }
        }

        private mutating func stopLaunch(_ launch: LaunchedExtension, hung: Bool) -> [Effect] {
            if state.launch === launch { return terminate(hung: hung) }
            // Superseded: whoever replaced it already asked it to exit; if it hung meanwhile, it
            // alone is stopped (its exit is no longer the state's business).
            guard hung, !launch.process.hasExited else { return [] }
            return [log(.warning, "superseded extension launch hung; stopping it", ["pid": launch.pid]), .stop(launch)]
        }

        private func kill() -> [Effect] {
            switch state {
            case .running(let link, _, _): return link.launch.map { [.signal($0, SIGKILL)] } ?? []
            case .launching(let launch, _, _), .stopping(let launch, _, _, _): return [.signal(launch, SIGKILL)]
            case .attached(let link, _): return [.close(link.connection)]
            case .idle, .backingOff, .spawning: return []
            }
        }

        private mutating func requestEnded(_ connection: RPCConnection, _ ticket: Ticket, _ now: Date) -> [Effect] {
            switch state {
            case .running(let link, var work, let streak) where link.connection === connection:
                let idle = work.end(ticket, at: now)
                state = .running(link, work, streak: streak)
                return idle ? [.wake] : []  // its idle deadline starts now
            case .attached(let link, var work) where link.connection === connection:
                _ = work.end(ticket, at: now)
                state = .attached(link, work)
                return []
            case .idle, .backingOff, .spawning, .launching, .running, .attached, .stopping:
                return []
            }
        }

        /// A request asked for by hand may launch the extension now: the crash backoff and
        /// `ThrottleInterval` are waived for the next launch (the crash streak stays, so a relaunch
        /// that crashes again backs off longer). Answers what was waived, if anything.
        private mutating func waiveLaunchDelay(_ now: Date) -> [Effect] {
            switch state {
            case .backingOff(let until, let streak):
                state = .idle(lastLaunch: nil, streak: streak)
                guard until > now else { return [] }
                let crashes = streak == 1 ? "1 failed launch" : "\(streak) failed launches in a row"
                return [.answer("the extension's launch backoff after \(crashes) (next launch was in \(DurationText.of(seconds: until.timeIntervalSince(now)))) is waived")]
            case .idle(let lastLaunch, let streak):
                state = .idle(lastLaunch: nil, streak: streak)
                guard let lastLaunch, lastLaunch.addingTimeInterval(unit.throttleInterval) > now else { return [] }
                return [.answer("ThrottleInterval (\(DurationText.of(seconds: unit.throttleInterval)) between launches) is waived")]
            case .spawning, .launching, .running, .attached, .stopping:
                return []
            }
        }

        // MARK: - Helpers of the transition

        /// Changes the work of a running or attached extension.
        private mutating func withWork(_ change: (inout Work) -> Void) -> [Effect] {
            switch state {
            case .running(let link, var work, let streak):
                change(&work)
                state = .running(link, work, streak: streak)
            case .attached(let link, var work):
                change(&work)
                state = .attached(link, work)
            case .idle, .backingOff, .spawning, .launching, .stopping:
                break
            }
            return []
        }

        /// The wait before the next launch after `streak` failures in a row (never less than `ThrottleInterval`).
        private func relaunchDelay(streak: Int) -> TimeInterval {
            max(Backoff.delay(attempt: streak, base: backoffBase, cap: Self.maximumBackoff), unit.throttleInterval)
        }

        /// A program rebuilt since the last launch is a new program: it is logged, and the crash
        /// streak of the old one no longer counts against it.
        private mutating func noticeProgram(_ program: ProgramIdentity?, streak: Int) -> (forgiven: Bool, [Effect]) {
            let previous = record.program
            record.program = program
            guard let previous, let program, previous != program else { return (false, []) }
            return (true, [log(.notice, "extension program changed since its last launch", ["program": unit.executable,
                "modified": ISO8601.format(program.modified), "crash_streak_forgiven": streak])])
        }

        private func log(_ level: Logger.Level, _ message: String, _ fields: KeyValuePairs<String, any CustomStringConvertible>) -> Effect {
            .log(LogLine(level: level, message: message, fields: [("label", label)] + fields.map { ($0.key, $0.value.description) }))
        }
    }
}

