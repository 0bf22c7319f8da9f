import Synchronization

/// Shared storage: how far a session's copy must catch up with the other nodes' commits, and
/// whether a pull to do so is queued already (at most one is). Owns both marks; the session
/// queues the pull in its pipeline (``Session/pullIfBehind()``).
final class CatchUpMarks: Sendable {
    private let heard = Atomic<Int>(0)
    private let pullQueued = Atomic<Bool>(false)

    /// A commit up to `seq` was heard (perhaps another node's).
    func heard(seq: Int) { heard.max(seq, ordering: .sequentiallyConsistent) }

    /// Whether a commit after `published` (the hub's last seq) was heard.
    func isBehind(_ published: Int) -> Bool { heard.load(ordering: .sequentiallyConsistent) > published }

    /// Takes the one queued pull for the caller: `false` when one is queued already.
    func queuePull() -> Bool {
        pullQueued.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged
    }

    /// The queued pull ran.
    func pullDone() { pullQueued.store(false, ordering: .sequentiallyConsistent) }
}
