import CoreMetrics
import StatePersistence
import StateStore
import Synchronization

/// Fires the timers reducers scheduled, when they are due, through the one change path: each
/// is a ``ChangeRequest`` of kind `.timer` submitted to its session (loaded first when it is
/// not in memory; with several nodes, taken over when its owner is gone). The firing and the
/// timer's removal commit together, so a timer fires once: a firing that finds it no longer
/// pending (fired, cancelled, replaced) does nothing.
///
/// It reads storage's due-time index, never every session: it sleeps until the next timer is
/// due, or until a change schedules an earlier one (``wake(before:)``). With shared storage it
/// also looks again every ``sharedPollInterval``: a timer of a node that died becomes this
/// node's to fire once that node's lease has run out. Timers missed while the server was down
/// are due at start, and fire in due order (each session's in order; sessions side by side).
public final class TimerScheduler: Sendable {
    /// Timers fired per look at the index (then it looks again).
    static let batch = 256
    /// Sessions whose timers fire side by side.
    static let concurrentSessions = 16
    /// Shared storage: the longest sleep, so that timers of a node that died are found.
    static let sharedPollInterval: Duration = .seconds(1)
    /// How often, at most, the pending gauge is counted while nothing fires.
    static let countInterval: Duration = .seconds(15)
    /// How long a timer whose firing failed (storage unreachable) waits before it is tried again.
    static let retryAfter: Int64 = 1_000

    private let storage: any SessionStorage
    /// Fires one timer; set by the session manager.
    private let fire = Mutex<(@Sendable (TimerReference) async -> FiringResult)?>(nil)
    private let wakeup = Wakeup()
    /// The wall-clock time (ms) the scheduler sleeps until (`Int64.max`: until woken).
    private let sleepingUntil = Atomic<Int64>(.max)
    /// Timers whose firing failed, and when each may be tried again.
    private let backoff = Mutex<[TimerReference: Int64]>([:])
    private let fired = Counter(label: "stateserver_timers_fired_total")
    private let lateness = Timer(label: "stateserver_timer_lateness_seconds")
    private let pending = Gauge(label: "stateserver_timers_pending")

    /// What firing one timer came to.
    public enum FiringResult: Sendable {
        /// Applied as a change of cause `timer`.
        case fired
        /// No longer pending (fired, cancelled, replaced), or its session is gone.
        case nothingToFire
        /// Another node serves the session (it fires it).
        case elsewhere
        /// Not now (storage unreachable, memory full): tried again later.
        case failed
    }

    init(storage: any SessionStorage) {
        self.storage = storage
    }

    func firing(_ body: @escaping @Sendable (TimerReference) async -> FiringResult) {
        fire.withLock { $0 = body }
    }

    /// A change scheduled a timer due at `due`: wakes the scheduler if it sleeps past it.
    func wake(before due: Int64) {
        if due < sleepingUntil.load(ordering: .acquiring) { wakeup.signal() }
    }

    /// Fires due timers until the task is cancelled.
    public func run() async {
        // The pending gauge is counted after firings, else at most every countInterval: a count
        // reads the whole timer table (PostgreSQL: every node, every poll), which 100,000
        // pending timers made the idle scheduler's main cost.
        var countedAt = Int64.min
        var fired = true
        while !Task.isCancelled {
            let now = WallClock.now
            var next: Int64?
            do throws(StorageError) {
                let due = try await storage.dueTimers(through: now, limit: Self.batch)
                let ready = backoff.withLock { waiting in
                    waiting = waiting.filter { $0.value > now }
                    return due.filter { waiting[$0] == nil }
                }
                if !ready.isEmpty {
                    // Each one either fires (and leaves the index) or waits before it is tried
                    // again: looking again at once always makes progress.
                    await fireAll(ready)
                    fired = true
                    continue
                }
                if fired || now - countedAt >= SessionManager.milliseconds(Self.countInterval) {
                    pending.record(try await storage.timerCount())
                    countedAt = now
                    fired = false
                }
                next = try await storage.nextTimerDue()
                if let retry = backoff.withLock({ $0.values.min() }) { next = min(next ?? retry, retry) }
                // Due but not ours to fire now (another node's, or waiting to be tried again).
                if let soon = next, soon <= now { next = now + Self.retryAfter }
            } catch {
                next = WallClock.now + Self.retryAfter
            }
            if storage.isShared {
                let poll = WallClock.now + SessionManager.milliseconds(Self.sharedPollInterval)
                next = min(next ?? poll, poll)
            }
            await sleep(until: next)
        }
    }

    /// Sleeps until wall-clock time `deadline` (ms; nil: until woken), or until woken.
    private func sleep(until deadline: Int64?) async {
        sleepingUntil.store(deadline ?? .max, ordering: .releasing)
        defer { sleepingUntil.store(.max, ordering: .releasing) }
        let delay = deadline.map { Duration.milliseconds(max(0, $0 - WallClock.now)) }
        await wakeup.wait(atMost: delay)
    }

    /// Fires `due` (in due order): each session's timers one after another, in order, and
    /// sessions side by side, at most ``concurrentSessions`` at a time.
    private func fireAll(_ due: [TimerReference]) async {
        var bySession: [String: [TimerReference]] = [:]
        var order: [String] = []
        for reference in due {
            if bySession[reference.session] == nil { order.append(reference.session) }
            bySession[reference.session, default: []].append(reference)
        }
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for session in order {
                guard let references = bySession[session] else { continue }
                if running == Self.concurrentSessions {
                    await group.next()
                    running -= 1
                }
                running += 1
                group.addTask { [self] in
                    for reference in references { await fireOne(reference) }
                }
            }
        }
    }

    private func fireOne(_ reference: TimerReference) async {
        guard let fire = fire.withLock({ $0 }) else { return }
        switch await fire(reference) {
        case .fired:
            fired.increment()
            lateness.recordMilliseconds(max(0, WallClock.now - reference.due))
        case .nothingToFire, .elsewhere, .failed:
            // Looked at again after a while (a timer that is really gone leaves the index with
            // the change that removed it, and this entry expires).
            backoff.withLock { $0[reference] = WallClock.now + Self.retryAfter }
        }
    }

    /// Wakes the scheduler now (shutdown, tests).
    public func wakeNow() {
        wakeup.signal()
    }
}

/// One sleeper woken by a signal or a timeout; a signal sent while nobody sleeps wakes the next
/// sleep at once.
final class Wakeup: Sendable {
    private struct State {
        var waiter: CheckedContinuation<Void, Never>?
        var signalled = false
        var generation: UInt64 = 0
    }

    private let state = Mutex(State())

    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.signalled = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns when signalled, after `delay` (nil: only when signalled), or when the task is
    /// cancelled.
    func wait(atMost delay: Duration?) async {
        let generation = state.withLock { state -> UInt64 in
            state.generation &+= 1
            return state.generation
        }
        let timeout: Task<Void, Never>? = delay.map { delay in
            Task { [self] in
                try? await Task.sleep(for: delay)
                guard !Task.isCancelled else { return }
                wake(generation)
            }
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.signalled || state.generation != generation {
                        state.signalled = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            signal()
        }
        timeout?.cancel()
    }

    /// The timeout of sleep `generation`: wakes it if it still sleeps.
    private func wake(_ generation: UInt64) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.generation == generation, let waiter = state.waiter else {
                if state.generation == generation { state.signalled = true }
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }
}
