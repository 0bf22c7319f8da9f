import StatePersistence

/// Where a session records a change before applying it — the one seam between the change path
/// and storage. Every change (dispatch, rehydrate, reset, follow-up, recovery) goes through
/// ``Session/submit(_:done:)`` and is recorded here first; memory mode is a journal that keeps
/// nothing, not a separate branch of the change path.
public protocol ChangeJournal: Sendable {
    /// The storage behind the journal, for loading sessions and stores; `nil` when nothing is
    /// kept (memory mode: stores start empty and die with the process).
    var storage: (any SessionStorage)? { get }

    /// Records `writes` atomically, then calls `done`: with success once they are durable, or
    /// with the error (nothing recorded). `writes` is called at most once, before `record`
    /// returns, so a journal that keeps nothing builds nothing. `done` may run before `record`
    /// returns (a journal that keeps nothing answers at once).
    func record(
        _ writes: () -> [StorageWrite], done: @escaping @Sendable (Result<Void, StorageError>) -> Void)
}

extension ChangeJournal {
    /// `record` for async callers.
    func record(_ writes: () -> [StorageWrite]) async throws(StorageError) {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, StorageError>, Never>) in
            record(writes) { continuation.resume(returning: $0) }
        }
        try result.get()
    }
}

/// Memory mode: nothing is written; every change is acknowledged at once.
public struct VolatileJournal: ChangeJournal {
    public init() {}
    public var storage: (any SessionStorage)? { nil }

    public func record(
        _ writes: () -> [StorageWrite], done: @escaping @Sendable (Result<Void, StorageError>) -> Void
    ) {
        done(.success(()))
    }
}

/// Durable mode: each change is committed to `storage` (journal row, idempotency reply,
/// snapshot) before it is applied; the commit runs as a task, so no caller's thread waits.
public struct StorageJournal: ChangeJournal {
    let store: any SessionStorage
    public var storage: (any SessionStorage)? { store }

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
