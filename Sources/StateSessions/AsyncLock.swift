import DequeModule
import Synchronization

/// A first-in-first-out lock for async code: waiters suspend (no thread is blocked) and get
/// the lock in arrival order.
public final class AsyncLock: Sendable {
    private struct State {
        var locked = false
        var waiters = Deque<CheckedContinuation<Void, Never>>()
    }

    private let state = Mutex(State())

    public init() {}

    public func lock() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let acquired = state.withLock { state -> Bool in
                if !state.locked {
                    state.locked = true
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if acquired { continuation.resume() }
        }
    }

    public func unlock() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let next = state.waiters.popFirst() { return next }
            state.locked = false
            return nil
        }
        next?.resume()
    }

    /// Runs `body` holding the lock.
    public func withLock<T: Sendable, E: Error>(_ body: () async throws(E) -> T) async throws(E) -> T {
        await lock()
        defer { unlock() }
        return try await body()
    }

    public var isLocked: Bool { state.withLock { $0.locked } }
}
