/// A value that is here now, or that asynchronous work gives later: how an answer travels from
/// the session layer (a change's outcome) through the routes (a reply or a contract error) to
/// the socket (the response libmicrohttpd queues).
///
/// Answering now is the common case (a store in memory, memory mode's journal): it takes no
/// task, no continuation and no thread hop. Its members are inlinable, so each use is
/// specialized for its types, as a concrete type of that module would be. Only what must wait (a store to load, a commit to
/// disk, a node to forward to) goes `later`.
public enum NowOrLater<Value: Sendable, Failure: Error>: Sendable {
    case now(Value)
    /// Work that gives the value (``later(_:)`` makes one from a throwing closure). Its result
    /// is a `Result`, not a closure that throws: Swift 6.3 crashes lowering a closure that
    /// `throws(Never)` out of an enum's payload.
    case pending(@Sendable () async -> Result<Value, Failure>)
    /// A value that something else gives later, through a callback: `subscribe(done)` calls
    /// `done` once, when the value is there (maybe at once). No task: the thread that gives the
    /// value (a storage's answer queue) carries it to whoever waits (``whenReady(_:)``).
    case promised(@Sendable (_ done: @escaping @Sendable (Result<Value, Failure>) -> Void) -> Void)

    /// Work that gives the value later.
    @inlinable
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
    @inlinable
    public func value() async throws(Failure) -> Value {
        switch self {
        case .now(let value): return value
        case .pending(let work): return try await work().get()
        case .promised(let subscribe):
            return try await withCheckedContinuation { continuation in
                subscribe { continuation.resume(returning: $0) }
            }.get()
        }
    }

    /// Calls `done` with the result: at once when it is here now, from a task for pending
    /// work, from the thread that gives a promised value.
    @inlinable
    public func whenReady(_ done: @escaping @Sendable (Result<Value, Failure>) -> Void) {
        switch self {
        case .now(let value): done(.success(value))
        case .pending(let work): Task { done(await work()) }
        case .promised(let subscribe): subscribe(done)
        }
    }

    /// The value when it is here now.
    @inlinable
    public var now: Value? {
        if case .now(let value) = self { return value }
        return nil
    }

    /// The value changed by `transform`, now when it is here now.
    @inlinable
    public func map<Other: Sendable>(
        _ transform: @escaping @Sendable (Value) -> Other
    ) -> NowOrLater<Other, Failure> {
        switch self {
        case .now(let value): .now(transform(value))
        case .pending(let work): .pending { await work().map(transform) }
        case .promised(let subscribe): .promised { done in subscribe { done($0.map(transform)) } }
        }
    }

    /// A failure turned into a value by `handle`: what cannot fail any more, now when it is
    /// here now.
    @inlinable
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
        case .promised(let subscribe):
            .promised { done in
                subscribe { result in
                    switch result {
                    case .success(let value): done(.success(value))
                    case .failure(let error): done(.success(handle(error)))
                    }
                }
            }
        }
    }
}
