import StatePersistence

/// Where a session records a change before applying it — the one seam between the change path
/// and storage. Every change (dispatch, rehydrate, reset, follow-up, recovery) goes through
/// ``Session/submit(_:)`` and is recorded here first, in every mode: memory mode's storage
/// is a bounded in-memory journal (``InMemoryStorage/process(_:)``) that answers at once.
public protocol ChangeJournal: Sendable {
    /// The storage behind the journal: where sessions load from and what history, recordings,
    /// travel and resumed streams read.
    var storage: any SessionStorage { get }

    /// Records `writes` atomically, then calls `done`: with success once they are stored, or
    /// with the error (nothing recorded). `done` may run before `record` returns (memory mode's
    /// journal answers at once).
    func record(
        _ writes: () -> [StorageWrite], done: @escaping @Sendable (Result<Void, StorageError>) -> Void)

    /// Whether its records are committed and answered in the order they were made, from one
    /// queue (``OrderedCommits``): a session may then compute its next change on top of one
    /// still committing (``CommitChain``).
    var pipelines: Bool { get }
}

extension ChangeJournal {
    /// `record` for async callers.
    func record(_ writes: () -> [StorageWrite]) async throws(StorageError) {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, StorageError>, Never>) in
            record(writes) { continuation.resume(returning: $0) }
        }
        try result.get()
    }

    /// How long what the storage keeps lives (``StorageLifetime``): the one thing about the
    /// storage that the session layer lets change what it does.
    var lifetime: StorageLifetime { storage.lifetime }
}

/// The journal for `storage`: committed at once in memory mode, handed to the writer in order
/// where the storage keeps it (SQLite), as a task otherwise.
func journal(over storage: any SessionStorage) -> any ChangeJournal {
    if let memory = storage as? InMemoryStorage, memory.lifetime == .process { return ImmediateJournal(memory: memory) }
    if let ordered = storage as? any OrderedCommits { return OrderedJournal(ordered) }
    return StorageJournal(storage)
}

/// Durable mode over storage that commits in order (SQLite): each change is handed to its
/// writer from the caller's thread (no task), and answered on the storage's answer queue in
/// the order the changes were made.
public struct OrderedJournal: ChangeJournal {
    let ordered: any OrderedCommits
    public var storage: any SessionStorage { ordered }
    public var pipelines: Bool { true }

    public init(_ storage: any OrderedCommits) {
        self.ordered = storage
    }

    public func record(
        _ writes: () -> [StorageWrite], done: @escaping @Sendable (Result<Void, StorageError>) -> Void
    ) {
        ordered.commit(writes(), done: done)
    }
}

/// Memory mode: each change is committed to the process's bounded journal on the caller's
/// thread (no task, no wait), so the whole change path runs synchronously.
struct ImmediateJournal: ChangeJournal {
    let memory: InMemoryStorage
    var storage: any SessionStorage { memory }
    var pipelines: Bool { false }

    func record(
        _ writes: () -> [StorageWrite], done: @escaping @Sendable (Result<Void, StorageError>) -> Void
    ) {
        do throws(StorageError) {
            try memory.commitNow(writes())
            done(.success(()))
        } catch {
            done(.failure(error))
        }
    }
}

/// Durable mode: each change is committed to `storage` (journal row, idempotency reply,
/// snapshot) before it is applied; the commit runs as a task, so no caller's thread waits.
public struct StorageJournal: ChangeJournal {
    let store: any SessionStorage
    public var storage: any SessionStorage { store }
    public var pipelines: Bool { false }

    public init(_ storage: any SessionStorage) {
        self.store = storage
    }

    public func record(
        _ writes: () -> [StorageWrite], done: @escaping @Sendable (Result<Void, StorageError>) -> Void
    ) {
        let batch = writes()
        let storage = store
        Task {
            do throws(StorageError) {
                try await storage.commit(batch)
                done(.success(()))
            } catch {
                done(.failure(error))
            }
        }
    }
}
