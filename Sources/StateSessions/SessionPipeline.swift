import DequeModule
import Synchronization

/// A session's pipeline: its jobs (changes and the delete) run one at a time, in
/// arrival order. It owns which job runs, which wait, and whether the session was deleted or
/// retired; the session runs the jobs (``Session/drain(_:)``).
///
/// Lock order: the pipeline before the hub (``retire(if:)`` asks the hub under this lock).
final class SessionPipeline: Sendable {
    enum Job {
        case change(ChangeRequest, @Sendable (ChangeOutcome) -> Void)
        case delete(@Sendable (Result<Void, SessionFailure>) -> Void)
    }

    /// What becomes of a job given to the pipeline.
    enum Admission {
        /// Deleted (`.sessionGone`) or retired (`.retired`).
        case refuse(SessionFailure)
        /// Behind the running job.
        case queued
        /// Now, by the caller: the pipeline was idle and is running now.
        case run
    }

    private struct State {
        var running = false
        var waiting = Deque<Job>()
        /// Deleted: every request is refused with `.sessionGone`.
        var deleted = false
        /// Evicted from memory: requests are refused with `.retired` (the caller loads again).
        var retired = false
        /// Changes handed to storage and not answered yet (``CommitChain``): the pipeline went
        /// on to the next job without waiting for their commits.
        var committing = 0
        /// A job that must not run while changes commit (anything but a plain change): it waits
        /// here, holding the pipeline, until the last of them is answered.
        var parked: Job?
    }

    private let state = Mutex(State())

    func admit(_ job: Job) -> Admission {
        state.withLock { p -> Admission in
            if p.deleted { return .refuse(.sessionGone) }
            if p.retired { return .refuse(.retired) }
            if p.running {
                p.waiting.append(job)
                return .queued
            }
            p.running = true
            return .run
        }
    }

    /// The next waiting job, or nil (and the pipeline idle). After a delete, the waiting jobs
    /// come back in `refused` (to be refused with `.sessionGone`).
    func next() -> (job: Job?, refused: [Job]) {
        state.withLock { p in
            var refused: [Job] = []
            if p.deleted {
                refused = Array(p.waiting)
                p.waiting.removeAll()
            }
            if let next = p.waiting.popFirst() { return (next, refused) }
            p.running = false
            return (nil, refused)
        }
    }

    /// A job running or waiting, or a change committing.
    var isRunning: Bool { state.withLock { $0.running || $0.committing > 0 } }

    /// A change was handed to storage: the pipeline may go on before its commit is answered.
    func commitStarted() { state.withLock { $0.committing += 1 } }

    /// A change handed to storage was answered. Returns the parked job when it was the last
    /// (the caller runs it: the pipeline is still running).
    func commitEnded() -> Job? {
        state.withLock { p -> Job? in
            p.committing -= 1
            guard p.committing == 0, let job = p.parked else { return nil }
            p.parked = nil
            return job
        }
    }

    /// Parks `job` while changes commit (`true`: the runner leaves, and the answer of the last
    /// commit runs it); `false` when none does (the runner runs it now).
    func park(_ job: Job) -> Bool {
        state.withLock { p in
            guard p.committing > 0 else { return false }
            p.parked = job
            return true
        }
    }

    var isDeleted: Bool { state.withLock { $0.deleted } }

    func markDeleted() { state.withLock { $0.deleted = true } }

    func markRetired() { state.withLock { $0.retired = true } }

    /// Retires the pipeline if it is idle, not deleted or retired, and `idle()` (asked under the
    /// pipeline's lock, so no job can arrive meanwhile) says nothing else uses the session.
    func retire(if idle: () -> Bool) -> Bool {
        state.withLock { p in
            guard !p.running, p.committing == 0, !p.deleted, !p.retired, idle() else { return false }
            p.retired = true
            return true
        }
    }
}

/// Tells a job's runner whether its completion ran before `run` returned (then the runner
/// takes the next job) or after (then the completion does).
final class Handoff: Sendable {
    private let state = Atomic<Int>(0)  // 0 running, 1 finished, 2 runner left

    /// Called by the completion; `true` when the runner already left.
    func finish() -> Bool { state.exchange(1, ordering: .acquiringAndReleasing) == 2 }

    /// Called by the runner after `run`; `true` when the completion already ran.
    func leave() -> Bool { state.exchange(2, ordering: .acquiringAndReleasing) == 1 }
}
