import NowOrLater
import Synchronization

/// A change's outcome, given once by the change path (``fill(_:)``, from any thread) and read
/// once by the caller of ``Session/submit(_:)`` (``outcome``): `now` when it was given before
/// it is read, else `promised`: the thread that fills it calls the waiter (no task).
///
/// Not generic: a generic class's storage and deinit run unspecialized in their own module,
/// where its metadata was looked up on every request.
final class OutcomePromise: Sendable {
    typealias Value = ChangeOutcome

    private enum State {
        case empty
        case filled(Value)
        case waiting(@Sendable (Result<Value, Never>) -> Void)
        case taken
    }

    private let state = Mutex(State.empty)

    init() {}

    /// Gives the value; only the first call counts.
    func fill(_ value: Value) {
        let waiter = state.withLock { state -> (@Sendable (Result<Value, Never>) -> Void)? in
            switch state {
            case .empty:
                state = .filled(value)
                return nil
            case .waiting(let done):
                state = .taken
                return done
            case .filled, .taken:
                return nil
            }
        }
        waiter?(.success(value))
    }

    /// The value: now if it was given already, else later. Read it once.
    var outcome: NowOrLater<Value, Never> {
        if let value = state.withLock({ state -> Value? in
            guard case .filled(let value) = state else { return nil }
            state = .taken
            return value
        }) {
            return .now(value)
        }
        return .promised { [self] done in wait(done) }
    }

    /// Calls `done` with the value once it is given (at once when it is).
    private func wait(_ done: @escaping @Sendable (Result<Value, Never>) -> Void) {
        let ready = state.withLock { state -> Value? in
            if case .filled(let value) = state {
                state = .taken
                return value
            }
            state = .waiting(done)
            return nil
        }
        if let ready { done(.success(ready)) }
    }
}
