import NowOrLater
import Synchronization

/// A change's outcome, given once by the change path (``fill(_:)``, from any thread) and read
/// once by the caller of ``Session/submit(_:)`` (``outcome``): `now` when it was given before
/// it is read, else `later`, awaited.
///
/// Not generic: a generic class's storage and deinit run unspecialized in their own module,
/// where its metadata was looked up on every request.
final class OutcomePromise: Sendable {
    typealias Value = ChangeOutcome

    private enum State {
        case empty
        case filled(Value)
        case waiting(CheckedContinuation<Value, Never>)
        case taken
    }

    private let state = Mutex(State.empty)

    init() {}

    /// Gives the value; only the first call counts.
    func fill(_ value: Value) {
        let waiter = state.withLock { state -> CheckedContinuation<Value, Never>? in
            switch state {
            case .empty:
                state = .filled(value)
                return nil
            case .waiting(let continuation):
                state = .taken
                return continuation
            case .filled, .taken:
                return nil
            }
        }
        waiter?.resume(returning: value)
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
        return .later { [self] in await wait() }
    }

    private func wait() async -> Value {
        await withCheckedContinuation { (continuation: CheckedContinuation<Value, Never>) in
            let ready = state.withLock { state -> Value? in
                if case .filled(let value) = state {
                    state = .taken
                    return value
                }
                state = .waiting(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
