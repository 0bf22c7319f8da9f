import Foundation
import StateClient
import StateStore
import TestSupport
import Synchronization
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A wait that ran out.
struct Timeout: Error, CustomStringConvertible {
    var description: String
}

/// Consumes a store's `changes()` on a task of its own and records what arrives, so a test can
/// wait for a condition with a deadline instead of blocking on the sequence.
final class EventRecorder<F: Feature>: Sendable {
    typealias Event = RemoteStore<F>.Event

    private struct State {
        var events: [Event] = []
        var finished = false
        var error: (any Error)?
    }

    /// The recorded state, in a box of its own so the consuming task can hold it.
    private final class Box: Sendable {
        let state = Mutex(State())
    }

    private let box = Box()
    private let task: Task<Void, Never>

    init(_ events: AsyncThrowingStream<Event, any Error>) {
        task = Task { [box] in
            do {
                for try await event in events {
                    box.state.withLock { $0.events.append(event) }
                }
            } catch {
                box.state.withLock { $0.error = error }
            }
            box.state.withLock { $0.finished = true }
        }
    }

    var events: [Event] { box.state.withLock { $0.events } }
    var finished: Bool { box.state.withLock { $0.finished } }
    var error: (any Error)? { box.state.withLock { $0.error } }

    /// The events, once `condition` holds for them; throws after `timeout`, or when the stream
    /// ended before. The default is long: at the suite's start every test of the process shares
    /// Swift's cooperative pool (two threads on two cores), and a test can wait 15 s for turns.
    @discardableResult
    func wait(
        for what: String, timeout: Duration = .seconds(60), detail: () -> String = { "" },
        _ condition: ([Event]) -> Bool
    ) async throws -> [Event] {
        let found = try await poll(timeout: timeout, every: .milliseconds(10)) { () throws -> [Event]? in
            let (events, finished, error) = box.state.withLock { ($0.events, $0.finished, $0.error) }
            if condition(events) { return events }
            if finished {
                throw Timeout(description: "the stream ended (\(error.map { "\($0)" } ?? "no error")) before \(what); got \(events.count) events")
            }
            return nil
        }
        guard let found else {
            let events = box.state.withLock { $0.events }
            throw Timeout(description: "no \(what) within \(timeout); got \(events.count) events: \(events.map(Self.summary)) \(detail())")
        }
        return found
    }

    /// Waits until the stream has ended (with or without an error).
    func waitUntilFinished(timeout: Duration = .seconds(60)) async throws {
        try await waitUntil("the stream to end", timeout: timeout, every: .milliseconds(10)) { finished }
    }

    /// Stops consuming (cancels the consuming task) and waits until the stream has ended.
    func stop(timeout: Duration = .seconds(60)) async throws {
        task.cancel()
        try await waitUntilFinished(timeout: timeout)
    }

    static func summary(_ event: Event) -> String {
        switch event {
        case .snapshot(let snapshot): "snapshot(v\(snapshot.version), id \(snapshot.eventID ?? -1))"
        case .change(let change): "change(v\(change.version), id \(change.eventID ?? -1), \(change.cause))"
        }
    }
}

extension RemoteStore.Event {
    var isSnapshot: Bool {
        if case .snapshot = self { return true }
        return false
    }

    var change: RemoteStore.Change? {
        if case .change(let change) = self { return change }
        return nil
    }
}

/// The value of a metric in the server's `/metrics`: `name` alone, or with its labels as
/// written (`name{route="/x",status="304"}`); nil when the server does not show it.
func metric(_ name: String, at baseURL: URL) async throws -> Double? {
    let (data, _) = try await URLSession.shared.data(from: baseURL.appendingPathComponent("metrics"))
    for line in String(decoding: data, as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
        guard let space = line.lastIndex(of: " ") else { continue }
        if line[..<space] == name { return Double(line[line.index(after: space)...]) }
    }
    return nil
}
