// PostgresStorage's ordered commits: a session's batches committed one after another, those
// handed over while one commits committed together right after it.
import StatePersistence
import Synchronization

/// Each session's batches handed to ``PostgresStorage/commit(_:done:)`` and not answered yet:
/// at most one commit of a session runs at a time (batches of different sessions run side by
/// side on the pool's connections), so the order a session handed its batches over is the order
/// PostgreSQL sees them — a session may hand over change N+1, computed on top of N, while N
/// commits (its append is fenced on N's seq, which another connection could otherwise reach
/// first).
final class OrderedCommitQueues: Sendable {
    typealias Job = (batch: [StorageWrite], done: @Sendable (Result<Void, StorageError>) -> Void)

    /// The most batches committed in one transaction (the rest wait for the next one).
    static let groupLimit = 64

    /// Sessions with a commit running, and the batches waiting behind it.
    private let waiting = Mutex<[String: [Job]]>([:])

    /// Queues `job` behind the session's running commit; `true` when none runs (the caller
    /// runs it now, and the session counts as running from here).
    func admit(_ session: String, _ job: Job) -> Bool {
        waiting.withLock { queues in
            if queues[session] != nil {
                queues[session]!.append(job)
                return false
            }
            queues[session] = []
            return true
        }
    }

    /// The waiting batches that were computed on top of a commit that just failed (every batch
    /// with an append: a change handed over while another of the same session commits is one),
    /// taken out of the queue. Other batches (grants, activity) stay and run next.
    func takeDependents(_ session: String) -> [Job] {
        waiting.withLock { queues in
            guard let queue = queues[session] else { return [] }
            let dependent = queue.filter { Self.appends($0.batch) }
            queues[session] = queue.filter { !Self.appends($0.batch) }
            return dependent
        }
    }

    /// The next batches to commit together, or `nil`: none waits, and the session no longer
    /// counts as running. Changes (batches with an append) go together, at most ``groupLimit``
    /// of them; any other batch goes alone, so it never fails for a change's fence.
    func next(_ session: String) -> [Job]? {
        waiting.withLock { queues in
            guard let queue = queues[session], let first = queue.first else {
                queues[session] = nil
                return nil
            }
            let group =
                Self.appends(first.batch)
                ? Array(queue.prefix(Self.groupLimit).prefix { Self.appends($0.batch) }) : [first]
            queues[session] = Array(queue.dropFirst(group.count))
            return group
        }
    }

    static func appends(_ batch: [StorageWrite]) -> Bool {
        batch.contains { if case .append = $0 { true } else { false } }
    }
}

extension PostgresStorage {
    /// Commits `batch` after every batch of the same session handed over before it, and answers
    /// them in that order. The batches that wait while one commits are committed together in one
    /// transaction next (one round trip each, one `COMMIT`): all of them or none. When a commit
    /// fails, the waiting batches with appends fail with its error without being sent: they were
    /// computed on top of it, and their fences would refuse them (or, after an outcome that is
    /// not known, might not).
    public func commit(_ batch: [StorageWrite], done: @escaping @Sendable (Result<Void, StorageError>) -> Void) {
        guard let session = batch.first?.session else {
            Task { done(.success(())) }
            return
        }
        guard ordered.admit(session, (batch, done)) else { return }
        Task { await self.runOrdered(session, first: [(batch, done)]) }
    }

    private func runOrdered(_ session: String, first: [OrderedCommitQueues.Job]) async {
        var jobs = first
        while true {
            let result: Result<Void, StorageError>
            do throws(StorageError) {
                try await commit(jobs.count == 1 ? jobs[0].batch : jobs.flatMap(\.batch))
                result = .success(())
            } catch {
                result = .failure(error)
            }
            // Taken before anyone is answered: an answer may hand over the next change at once,
            // computed afresh, which must not be failed with these.
            let dependents: [OrderedCommitQueues.Job] = if case .failure = result { ordered.takeDependents(session) } else { [] }
            for job in jobs { job.done(result) }
            for job in dependents { job.done(result) }
            guard let group = ordered.next(session) else { return }
            jobs = group
        }
    }
}

extension StorageWrite {
    /// The session the write is about.
    var session: String {
        switch self {
        case .createSession(let s): s.id
        case .deleteSession(let id): id
        case .append(let e, _): e.session
        case .snapshot(let s): s.session
        case .touch(let session, _): session
        case .compact(let session, _, _, _, _, _): session
        case .createGrant(let g): g.session
        case .deleteGrants(let session, _): session
        case .timers(let session, _, _): session
        }
    }
}
