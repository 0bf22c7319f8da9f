import DequeModule
import Foundation
import StatePersistence
import StateStore
import Synchronization

/// The pipeline: one job at a time per session, in arrival order (changes and the delete),
/// drained in a loop.
extension Session {
    func enqueue(_ job: SessionPipeline.Job) {
        switch pipeline.admit(job) {
        case .refuse(let failure): Self.refuse(job, failure)
        case .queued: break
        case .run: drain(job)
        }
    }

    static func refuse(_ job: SessionPipeline.Job, _ failure: SessionFailure) {
        switch job {
        case .change(_, let done): done(.failed(failure))
        case .delete(let done): done(.failure(failure))
        }
    }

    /// Runs `first`, then the waiting jobs in order, until none is left or one goes on
    /// asynchronously (its completion drains the rest). A loop, not recursion: a long queue of
    /// synchronous jobs does not grow the stack.
    func drain(_ first: SessionPipeline.Job) {
        var job = first
        while true {
            // Only a plain change runs while changes commit; any other job waits for them.
            // (Memory mode's journal answers before `commit` returns: nothing commits then.)
            if commitsAnswerLater, !commitsAhead(job), pipeline.park(job) { return }
            let handoff = Handoff()
            run(job) { [self] in
                // Finished after `run` returned: this completion carries the pipeline on.
                if handoff.finish(), let next = takeNext() { drain(next) }
            }
            guard handoff.leave(), let next = takeNext() else { return }
            job = next
        }
    }

    /// The next waiting job, or `nil` (and the pipeline idle). After a delete, waiting jobs
    /// are refused.
    func takeNext() -> SessionPipeline.Job? {
        let (next, refused) = pipeline.next()
        for job in refused { Self.refuse(job, .sessionGone) }
        return next
    }

    /// Runs one job. Its caller is answered after `completion` hands the pipeline on, so a
    /// caller that resumes never finds the session still busy with its own request.
    func run(_ job: SessionPipeline.Job, completion: @escaping @Sendable () -> Void) {
        switch job {
        case .change(let request, let done):
            // A store not loaded yet (durable mode; callers normally load it first): loaded
            // outside the pipeline, then the change waits its turn again. A load may itself
            // submit a change (a recovery, a last-resort reset), which must not wait for this
            // job.
            let store = request.installing ?? loadedStore(request.feature)
            guard store != nil || registry[request.feature] == nil else {
                completion()
                Task { [self] in
                    do throws(SessionFailure) {
                        _ = try await self.store(request.feature)
                        enqueue(job)
                    } catch {
                        done(.failed(error))
                    }
                }
                return
            }
            // A plain change hands the pipeline on once it is handed to storage; its caller
            // is answered after its own commit.
            let release = commitsAhead(job) ? ChangeRelease(completion) : nil
            execute(request, store, release: release) { [self] outcome in
                // A change counts as use when it ends, not only when its request looked the
                // session up: one that waited or committed slowly must not leave the session
                // looking idle (the TTL sweep judges loaded sessions by this time).
                usage.markUsed()
                if let release { release.fire() } else { completion() }
                done(outcome)
            }
        case .delete(let done):
            storage.commit([.deleteSession(id: id)]) { [self] result in
                if case .success = result { markGone() }
                completion()
                done(result.mapError { .storage($0) })
            }
        }
    }

    /// Whether storage answers a commit after `commit` returns (durable storage: SQLite's
    /// writer, PostgreSQL, the twin's queue), so changes may be committing while later jobs
    /// run; memory mode's journal answers before it returns.
    var commitsAnswerLater: Bool { storage.lifetime == .durable }

    /// Whether `job` may run while earlier changes commit, and commit while later jobs run: a
    /// client's dispatch, rehydrate or reset with no idempotency key (a key must be answered by
    /// the change that made it) and no middleware (which reads the committed version), over
    /// storage that answers later (memory mode's journal answers at once: nothing to gain). A
    /// follow-up of asynchronous work waits: whether its work is still live is judged when it
    /// is computed and again when it is applied, and a reset or rehydrate committing ahead of
    /// it would cancel the work in between.
    func commitsAhead(_ job: SessionPipeline.Job) -> Bool {
        guard commitsAnswerLater, case .change(let request, _) = job, request.idempotencyKey == nil,
            settings.middleware.isEmpty
        else { return false }
        switch request.kind {
        case .dispatch, .rehydrate, .reset: return true
        case .followUp, .travel, .replay, .importStart, .recovery, .timer: return false
        }
    }
}
