import Foundation

// One way to wait for a condition in every suite: `poll` is the primitive; `eventually` (a Bool)
// and `waitUntil` (throws a `WaitTimeout` naming what it waited for) are built on it. Timeouts
// are scaled by `scaledForSanitizers`; a deadline is taken as it is. The defaults are long
// because they are only a safety net: at the start of `swift test` every test of the process
// shares Swift's cooperative pool (two threads on two cores), and a test can wait 15 s for its
// turns. The functions run on their caller's actor (`nonisolated(nonsending)`), so a condition
// may read main-actor state.

/// Calls `attempt` every `interval` until it returns a value, which is returned; nil once
/// `deadline` has passed without one. `attempt` runs at least once, the last time at or after
/// the deadline; an error it throws (or cancellation) ends the wait.
nonisolated(nonsending) package func poll<T>(
    until deadline: ContinuousClock.Instant, every interval: Duration = .milliseconds(50),
    _ attempt: () async throws -> T?
) async throws -> T? {
    while true {
        if let value = try await attempt() { return value }
        if ContinuousClock.now >= deadline { return nil }
        try await Task.sleep(for: interval)
    }
}

/// `poll(until:)` for at most `timeout` (scaled for sanitizers) from now.
nonisolated(nonsending) package func poll<T>(
    timeout: Duration = .seconds(30), every interval: Duration = .milliseconds(50),
    _ attempt: () async throws -> T?
) async throws -> T? {
    try await poll(until: ContinuousClock.now + timeout.scaledForSanitizers, every: interval, attempt)
}

/// Polls until `condition` holds (true) or `timeout` passes (false).
nonisolated(nonsending) package func eventually(
    timeout: Duration = .seconds(30), every interval: Duration = .milliseconds(50),
    _ condition: () async throws -> Bool
) async throws -> Bool {
    try await poll(timeout: timeout, every: interval) { try await condition() ? true : nil } ?? false
}

/// Polls until `condition` holds (true) or `deadline` passes (false).
nonisolated(nonsending) package func eventually(
    until deadline: ContinuousClock.Instant, every interval: Duration = .milliseconds(50),
    _ condition: () async throws -> Bool
) async throws -> Bool {
    try await poll(until: deadline, every: interval) { try await condition() ? true : nil } ?? false
}

/// A wait that ran out: says what was awaited, for how long, and `detail`.
package struct WaitTimeout: Error, CustomStringConvertible {
    package let description: String

    package init(_ description: String) { self.description = description }
}

/// Polls until `condition` holds; throws a `WaitTimeout` naming `what` (and `detail()`, read
/// when the time is up) once `timeout` has passed.
nonisolated(nonsending) package func waitUntil(
    _ what: String, timeout: Duration = .seconds(30), every interval: Duration = .milliseconds(50),
    detail: () async throws -> String = { "" }, _ condition: () async throws -> Bool
) async throws {
    guard try await eventually(timeout: timeout, every: interval, condition) else {
        throw WaitTimeout(timeoutMessage(what, "within \(timeout)", try await detail()))
    }
}

/// Polls until `condition` holds; throws a `WaitTimeout` naming `what` once `deadline` has passed.
nonisolated(nonsending) package func waitUntil(
    _ what: String, until deadline: ContinuousClock.Instant, every interval: Duration = .milliseconds(50),
    detail: () async throws -> String = { "" }, _ condition: () async throws -> Bool
) async throws {
    guard try await eventually(until: deadline, every: interval, condition) else {
        throw WaitTimeout(timeoutMessage(what, "by the deadline", try await detail()))
    }
}

private func timeoutMessage(_ what: String, _ when: String, _ detail: String) -> String {
    "timed out waiting for \(what) (\(when))" + (detail.isEmpty ? "" : ": \(detail)")
}
