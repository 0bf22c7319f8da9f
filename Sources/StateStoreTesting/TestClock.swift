import Synchronization

/// A clock that moves only when a test advances it, so work that waits (a login check's delay,
/// a timer) can be tested without waiting. Thread-safe.
///
/// Inject it where the feature takes a clock, let the work start sleeping, then advance:
///
/// ```swift
/// let clock = TestClock()
/// let store = TestStore(LoginFeature(checkDelay: .seconds(1), clock: clock))
/// store.send(.submit(username: "ada", password: "correct horse")) { ... }
/// #expect(await clock.waitForSleepers(count: 1))  // the check is waiting on the clock
/// clock.advance(by: .seconds(1))                    // its delay is over: it sends its result
/// await store.receive(.succeeded) { ... }
/// ```
///
/// A sleep whose task is cancelled ends at once with `CancellationError`, as on a real clock.
public final class TestClock: Clock, Sendable {
    public struct Instant: InstantProtocol, Sendable {
        /// The time since the clock was made.
        public let offset: Duration

        public init(offset: Duration = .zero) {
            self.offset = offset
        }

        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private struct Sleeper {
        let deadline: Instant
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct Inner {
        var now = Instant()
        var sleepers: [UInt64: Sleeper] = [:]
        var nextSleeper: UInt64 = 0
    }

    private let inner = Mutex(Inner())

    /// A clock at offset zero.
    public init() {}

    public var now: Instant { inner.withLock { $0.now } }
    public var minimumResolution: Duration { .zero }

    /// How many sleeps are waiting for the clock to reach their deadline.
    public var sleeperCount: Int { inner.withLock { $0.sleepers.count } }

    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        try Task.checkCancellation()
        let id = inner.withLock { inner in
            inner.nextSleeper += 1
            return inner.nextSleeper
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Outcome { case waiting, due, cancelled }
                let outcome = inner.withLock { inner -> Outcome in
                    // Checked under the lock: the cancellation handler, if it ran first, found
                    // nothing to resume, and the task is already marked cancelled.
                    if Task.isCancelled { return .cancelled }
                    if deadline <= inner.now { return .due }
                    inner.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    return .waiting
                }
                switch outcome {
                case .waiting: break
                case .due: continuation.resume()
                case .cancelled: continuation.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            let sleeper = inner.withLock { $0.sleepers.removeValue(forKey: id) }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the clock forward by `duration`, waking every sleep whose deadline is reached.
    public func advance(by duration: Duration) {
        let due = inner.withLock { inner -> [CheckedContinuation<Void, any Error>] in
            inner.now = inner.now.advanced(by: duration)
            let now = inner.now
            let due = inner.sleepers.filter { $0.value.deadline <= now }
            for id in due.keys { inner.sleepers[id] = nil }
            return due.values.sorted { $0.deadline < $1.deadline }.map(\.continuation)
        }
        for continuation in due { continuation.resume() }
    }

    /// Waits until at least `count` sleeps are waiting on the clock (work reached its delay),
    /// checking every millisecond of real time; `false` when `timeout` of real time passes first.
    public func waitForSleepers(count: Int = 1, timeout: Duration = .seconds(10)) async -> Bool {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while sleeperCount < count {
            guard ContinuousClock.now < deadline else { return false }
            try? await Task.sleep(for: .milliseconds(1))
        }
        return true
    }
}
