import StatePersistence
import Synchronization

/// The session's changes handed to storage and not answered yet, and their numbers (every
/// storage commits a session's batches in order: ``SessionStorage/commit(_:done:)``). Change N+1 is computed on top of
/// N (``StateStore/PreparedChange/advance()``) and handed to storage while N commits; each is
/// applied in memory, published and acknowledged only once its own commit is answered, in order.
///
/// Storage fences every append on the session's last seq and the store's last version, so when
/// N fails, everything handed to storage on top of it fails too and nothing is stored out of
/// order. The first failure ends the chain's generation: the stores drop what they held ahead
/// (they are back at their last committed, durable state), numbering starts again after the
/// last published change, and the changes of the ended generation that fail after it report its
/// error (they failed because of it).
final class CommitChain: Sendable {
    private struct State {
        var generation = 0
        /// The last seq handed to storage in this generation (0: none since it began).
        var lastSeq = 0
        /// Why each ended generation ended, for the changes of it still to be answered (the
        /// oldest are forgotten: a generation's changes are answered soon after it ends).
        var endedBy: [(generation: Int, error: StorageError)] = []
        /// Each store's last change handed to storage: its version and state (the base of the
        /// next change's stored patch).
        var handed: [String: (version: Int, state: [UInt8])] = [:]
        /// Durable mode: bytes journaled per store since its last snapshot (a snapshot is
        /// written early when they outgrow the state, so a load never reads much more than
        /// twice it).
        var sinceSnapshot: [String: Int] = [:]
    }

    private let state = Mutex(State())

    /// The number of the next change (after `published`, the last one published, and after
    /// every one handed to storage meanwhile), with the generation it belongs to.
    func next(after published: Int) -> (seq: Int, generation: Int) {
        state.withLock { chain in
            chain.lastSeq = max(chain.lastSeq, published) + 1
            return (chain.lastSeq, chain.generation)
        }
    }

    /// A change of `generation` failed with `error`. Returns the error to report: `error`
    /// itself when it ends the current generation (then the caller drops what the stores held
    /// ahead), else the error that ended the change's generation.
    func failed(generation: Int, _ error: StorageError) -> (error: StorageError, ended: Bool) {
        state.withLock { chain in
            guard generation == chain.generation else {
                let cause = chain.endedBy.last { $0.generation == generation }?.error
                return (cause ?? error, false)
            }
            chain.endedBy.append((generation, error))
            if chain.endedBy.count > 4 { chain.endedBy.removeFirst() }
            chain.generation += 1
            chain.lastSeq = 0
            chain.handed = [:]
            return (error, true)
        }
    }

    /// The state of `feature` at `version` when that is its last change handed to storage.
    func handedState(_ feature: String, version: Int) -> [UInt8]? {
        state.withLock { chain in
            guard let last = chain.handed[feature], last.version == version else { return nil }
            return last.state
        }
    }

    /// Counts `bytes` journaled for `feature`; whether a snapshot is due, as `due` judges from
    /// the bytes since the last one (counting starts again when it is).
    func journaled(_ feature: String, bytes: Int, due: (_ grown: Int) -> Bool) -> Bool {
        state.withLock { chain in
            let grown = chain.sinceSnapshot[feature, default: 0] + bytes
            let isDue = due(grown)
            chain.sinceSnapshot[feature] = isDue ? 0 : grown
            return isDue
        }
    }

    func handed(_ feature: String, version: Int, state: [UInt8]) {
        self.state.withLock { $0.handed[feature] = (version, state) }
    }
}

/// Lets a change's job hand the pipeline on once (``Session/run(_:completion:)``): right after
/// the change was handed to storage when it may commit while the next job runs, else when it
/// ends.
final class ChangeRelease: Sendable {
    private let fired = Atomic<Bool>(false)
    private let completion: @Sendable () -> Void

    init(_ completion: @escaping @Sendable () -> Void) {
        self.completion = completion
    }

    func fire() {
        if !fired.exchange(true, ordering: .acquiringAndReleasing) { completion() }
    }
}
