import Synchronization

/// Collects values (typically observed changes) and lets a test wait, with a bound, until
/// enough of them arrived. Thread-safe.
///
/// Hand `append(_:)` to an observer or to a feature's asynchronous work, then wait for the
/// values instead of sleeping:
///
/// ```swift
/// let versions = Recorder<Int>()
/// let token = store.addObserver { versions.append($0.version) }
/// try store.dispatch(.increment(by: 1))
/// #expect(await versions.wait(forCount: 1))
/// #expect(versions.values == [1])
/// store.removeObserver(token)
/// ```
public final class Recorder<Element: Sendable>: Sendable {
    private struct Inner {
        var values: [Element] = []
        var waiters: [UInt64: (count: Int, continuation: CheckedContinuation<Bool, Never>)] = [:]
        var expired: Set<UInt64> = []
        var nextWaiter: UInt64 = 0
    }

    private let inner = Mutex(Inner())

    /// An empty recorder.
    public init() {}

    /// Every value appended so far, in order.
    public var values: [Element] { inner.withLock { $0.values } }
    /// How many values were appended so far.
    public var count: Int { inner.withLock { $0.values.count } }

    /// Records `value` and wakes the waiters it satisfies.
    public func append(_ value: Element) {
        let ready = inner.withLock { inner in
            inner.values.append(value)
            let count = inner.values.count
            let ready = inner.waiters.filter { $0.value.count <= count }
            for id in ready.keys { inner.waiters[id] = nil }
            return ready.values.map(\.continuation)
        }
        for continuation in ready { continuation.resume(returning: true) }
    }

    /// Waits until at least `count` values have arrived. Returns `false` if `timeout` passes
    /// first. Returns at once when they are already there.
    public func wait(forCount count: Int, timeout: Duration = .seconds(10)) async -> Bool {
        let id = inner.withLock { inner in
            inner.nextWaiter += 1
            return inner.nextWaiter
        }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            guard !Task.isCancelled else { return }
            self?.expire(id)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { continuation in
            let answer: Bool? = inner.withLock { inner in
                if inner.values.count >= count { return true }
                if inner.expired.contains(id) { return false }
                inner.waiters[id] = (count, continuation)
                return nil
            }
            if let answer { continuation.resume(returning: answer) }
        }
    }

    private func expire(_ id: UInt64) {
        let waiter = inner.withLock { inner in
            let waiter = inner.waiters.removeValue(forKey: id)
            if waiter == nil { inner.expired.insert(id) }
            return waiter
        }
        waiter?.continuation.resume(returning: false)
    }
}
