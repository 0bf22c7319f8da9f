import Synchronization

/// A value that is here now, or that asynchronous work gives later: how an answer travels from
/// the session layer (a change's outcome) through the routes (a reply or a contract error) to
/// the socket (the response libmicrohttpd queues).
///
/// Answering now is the common case (a store in memory, memory mode's journal): it takes no
/// task, no continuation and no thread hop. Only what must wait (a store to load, a commit to
/// disk, a node to forward to) goes `later`.
public enum NowOrLater<Value: Sendable, Failure: Error>: Sendable {
    case now(Value)
    /// Work that gives the value (``later(_:)`` makes one from a throwing closure). Its result
    /// is a `Result`, not a closure that throws: Swift 6.3 crashes lowering a closure that
    /// `throws(Never)` out of an enum's payload.
    case pending(@Sendable () async -> Result<Value, Failure>)

    /// Work that gives the value later.
    public static func later(_ work: @escaping @Sendable () async throws(Failure) -> Value) -> Self {
        .pending {
            do throws(Failure) {
                return .success(try await work())
            } catch {
                return .failure(error)
            }
        }
    }

    /// The value: at once, or when the work gives it.
    public func value() async throws(Failure) -> Value {
        switch self {
        case .now(let value): return value
        case .pending(let work): return try await work().get()
        }
    }

    /// The value when it is here now.
    public var now: Value? {
        if case .now(let value) = self { return value }
        return nil
    }

    /// The value changed by `transform`, now when it is here now.
    public func map<Other: Sendable>(
        _ transform: @escaping @Sendable (Value) -> Other
    ) -> NowOrLater<Other, Failure> {
        switch self {
        case .now(let value): .now(transform(value))
        case .pending(let work): .pending { await work().map(transform) }
        }
    }

    /// A failure turned into a value by `handle`: what cannot fail any more, now when it is
    /// here now.
    public func recover(_ handle: @escaping @Sendable (Failure) -> Value) -> NowOrLater<Value, Never> {
        switch self {
        case .now(let value): .now(value)
        case .pending(let work):
            .pending {
                switch await work() {
                case .success(let value): .success(value)
                case .failure(let error): .success(handle(error))
                }
            }
        }
    }
}

/// A value given once by its producer (``fill(_:)``, from any thread) and read once by its
/// consumer (``outcome``): `now` when it was given before it is read, else `later`, awaited.
public final class Promise<Value: Sendable>: Sendable {
    private enum State {
        case empty
        case filled(Value)
        case waiting(CheckedContinuation<Value, Never>)
        case taken
    }

    private let state = Mutex(State.empty)

    public init() {}

    /// Gives the value; only the first call counts.
    public func fill(_ value: Value) {
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
    public var outcome: NowOrLater<Value, Never> {
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
