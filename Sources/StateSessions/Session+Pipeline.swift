import DequeModule
import Foundation
import StatePersistence
import StateStore
import Synchronization

/// The pipeline: one job at a time per session, in arrival order (changes, deletes, loads
/// and catch-ups), drained in a loop.
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
        case .delete(let done), .refresh(let done), .pull(let done), .load(_, let done): done(.failure(failure))
        }
    }

    /// Runs `first`, then the waiting jobs in order, until none is left or one goes on
    /// asynchronously (its completion drains the rest). A loop, not recursion: a long queue of
    /// synchronous jobs does not grow the stack.
    func drain(_ first: SessionPipeline.Job) {
        var job = first
        while true {
            // Only a plain change runs while changes commit; any other job waits for them.
            if chain != nil, !commitsAhead(job), pipeline.park(job) { return }
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
        case .load(let feature, let done):
            Task { [self] in
                let result: Result<Void, SessionFailure>
                do throws(SessionFailure) {
                    _ = try await loadStore(feature)
                    result = .success(())
                } catch {
                    result = .failure(error)
                }
                completion()
                done(result)
            }
        case .refresh(let done):
            catchUpThen(checkingExistence: true, completion: completion, done: done)
        case .pull(let done):
            // Caught up meanwhile (by this node's own commit or a read): nothing to fetch.
            guard catchUp.isBehind(hub.seq) else {
                completion()
                return done(.success(()))
            }
            // A delete is heard as a notice of its own: one read, not two.
            catchUpThen(checkingExistence: false, completion: completion, done: done)
        case .change(let request, let done):
            // Over a journal that commits in order, a plain change hands the pipeline on once
            // it is handed to storage; its caller is answered after its own commit.
            let release = commitsAhead(job) ? ChangeRelease(completion) : nil
            execute(request, release: release) { [self] outcome in
                // A change counts as use when it ends, not only when its request looked the
                // session up: one that waited or committed slowly must not leave the session
                // looking idle (the TTL sweep judges loaded sessions by this time).
                lastUsed.store(WallClock.now, ordering: .relaxed)
                if let release { release.fire() } else { completion() }
                done(outcome)
            }
        case .delete(let done):
            let id = self.id
            journal.record({ [.deleteSession(id: id)] }) { [self] result in
                if case .success = result { markGone() }
                completion()
                done(result.mapError { .storage($0) })
            }
        }
    }

    /// Whether `job` may run while earlier changes commit, and commit while later jobs run: a
    /// client's dispatch, rehydrate or reset with no idempotency key (a key must be answered by
    /// the change that made it) and no middleware (which reads the committed version), over a
    /// journal that commits in order. A follow-up of asynchronous work waits: whether its work
    /// is still live is judged when it is computed and again when it is applied, and a reset
    /// or rehydrate committing ahead of it would cancel the work in between.
    func commitsAhead(_ job: SessionPipeline.Job) -> Bool {
        guard chain != nil, case .change(let request, _) = job, request.idempotencyKey == nil, settings.middleware.isEmpty
        else { return false }
        switch request.kind {
        case .dispatch, .rehydrate, .reset: return true
        case .followUp, .travel, .replay, .importStart, .recovery: return false
        }
    }

    func catchUpThen(
        checkingExistence: Bool, completion: @escaping @Sendable () -> Void,
        done: @escaping @Sendable (Result<Void, SessionFailure>) -> Void
    ) {
        Task { [self] in
            let result: Result<Void, SessionFailure>
            do throws(StorageError) {
                try await catchUp(checkingExistence: checkingExistence)
                result = .success(())
            } catch {
                result = .failure(error.kind == .sessionGone ? .sessionGone : .storage(error))
            }
            completion()
            done(result)
        }
    }
}
