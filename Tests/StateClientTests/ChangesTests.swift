// changes(): the snapshot, then live changes (also other clients'), effects once, resuming
// with lastEventID, and stopping when the consumer stops.

import ExampleFeatures
import Foundation
import TestSupport
import StateClient
import Testing

@Suite("changes(): live events", .timeLimit(.minutes(5)))
struct ChangesTests {
    @Test("the snapshot first, then changes made by another client, typed and in order")
    func snapshotThenOtherClientsChanges() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let credentials = try await client.createSession()
            let counter = client.store(CounterFeature(), credentials: credentials)
            try await counter.dispatch(.set(value: 10))

            let recorder = EventRecorder(counter.changes())
            let first = try await recorder.wait(for: "the snapshot") { !$0.isEmpty }
            guard case .snapshot(let snapshot) = first[0] else {
                Issue.record("the first event is not a snapshot: \(first[0])")
                return
            }
            #expect(snapshot.version == 1 && snapshot.state.count == 10 && snapshot.eventID != nil)

            // Another program, with its own client, on the same session.
            let other = StateServerClient(baseURL: server.baseURL).store(CounterFeature(), credentials: credentials)
            try await other.dispatch(.increment(by: 2))
            try await other.dispatch(.decrement(by: nil))
            try await client.store(TodosFeature(), credentials: credentials).dispatch(.add(title: "not counted"))
            try await other.dispatch(.set(value: 7))

            let events = try await recorder.wait(for: "three changes") { $0.count >= 4 }
            let changes = events.dropFirst().compactMap(\.change)
            #expect(changes.map(\.version) == [2, 3, 4])
            #expect(changes.map(\.state.count) == [12, 11, 7])
            #expect(changes.map(\.action) == [.increment(by: 2), .decrement(by: nil), .set(value: 7)])
            #expect(changes.allSatisfy { $0.cause == .dispatch && $0.effect == nil })
            let ids = changes.compactMap(\.eventID)
            #expect(ids.count == 3 && ids == ids.sorted() && ids[0] > snapshot.eventID!)
            // The todos change is filtered out: a gap in the session's sequence.
            #expect(ids[2] == ids[1] + 2)
            try await recorder.stop()
            #expect(recorder.error == nil)
        }
    }

    @Test("rehydrate and reset arrive with their causes")
    func causes() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let settings = client.store(SettingsFeature(), credentials: try await client.createSession())
            let recorder = EventRecorder(settings.changes())
            try await recorder.wait(for: "the snapshot") { !$0.isEmpty }
            try await settings.rehydrate(.init(backgroundColor: "#000000", textColor: "#FFFFFF"))
            try await settings.reset()
            let events = try await recorder.wait(for: "two changes") { $0.count >= 3 }
            #expect(events.dropFirst().compactMap(\.change).map(\.cause) == [.rehydrate, .reset])
            #expect(events.dropFirst().compactMap(\.change).allSatisfy { $0.action == nil })
            try await recorder.stop()
        }
    }

    @Test("the login failure toast arrives once, typed, after the asynchronous check")
    func loginToastOnce() async throws {
        try await withServer(environment: ["STATE_SERVER_LOGIN_CHECK_DELAY": "0.05"]) { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let login = client.store(LoginFeature(), credentials: try await client.createSession())
            let recorder = EventRecorder(login.changes())
            try await recorder.wait(for: "the snapshot") { !$0.isEmpty }

            let submitted = try await login.dispatch(.submit(username: "ada", password: "short"))
            #expect(submitted.state.isLoading && submitted.effect == nil)

            let reason = "The password must have at least 8 characters."
            let events = try await recorder.wait(for: "the failed check") { $0.contains { $0.version == 2 } }
            let changes = events.compactMap(\.change)
            // The password is masked in events.
            #expect(changes.first?.action == .submit(username: "ada", password: "********"))
            #expect(changes.first?.effect == nil)
            #expect(changes.last?.action == .failed(reason: reason))
            #expect(changes.last?.effect == .toast(message: reason))
            #expect(changes.last?.state == LoginFeature.State(username: "ada", error: reason))

            // Nothing more carries the toast: a later change arrives without it.
            try await login.dispatch(.logout)
            let all = try await recorder.wait(for: "the logout") { $0.contains { $0.version == 3 } }
            #expect(all.compactMap(\.effect) == [.toast(message: reason)])
            try await recorder.stop()
        }
    }

    @Test("lastEventID resumes after a saved event: the missed changes, no snapshot")
    func resumeFromSavedID() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let counter = client.store(CounterFeature(), credentials: try await client.createSession())
            let first = EventRecorder(counter.changes())
            try await first.wait(for: "the snapshot") { !$0.isEmpty }
            try await counter.dispatch(.increment(by: 1))
            let seen = try await first.wait(for: "the first change") { $0.count >= 2 }
            try await first.stop()
            let saved = try #require(seen.last?.eventID)

            try await counter.dispatch(.increment(by: 1))
            try await counter.dispatch(.increment(by: 1))
            let resumed = EventRecorder(counter.changes(lastEventID: saved))
            let events = try await resumed.wait(for: "the missed changes") { $0.count >= 2 }
            #expect(!events.contains { $0.isSnapshot })
            #expect(events.map(\.version) == [2, 3])
            try await resumed.stop()
        }
    }

    @Test("stopping the consumer closes the connection")
    func stopsWhenConsumerStops() async throws {
        try await withServer(arguments: ["--heartbeat", "1"]) { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let counter = client.store(CounterFeature(), credentials: try await client.createSession())

            // A consumer that breaks out of its loop after the first change.
            let consumer = Task {
                var seen = 0
                for try await event in counter.changes() {
                    seen += 1
                    if event.change != nil { break }
                }
                return seen
            }
            try await waitForStreams(1, at: server.baseURL)
            try await counter.dispatch(.increment(by: 1))
            let seen = try await withDeadline(.seconds(60)) {
                try await withTaskCancellationHandler { try await consumer.value } onCancel: { consumer.cancel() }
            }
            #expect(seen == 2)
            // The server notices the closed connection at its next write (a heartbeat at most).
            try await waitForStreams(0, at: server.baseURL)

            // A consuming task that is cancelled ends its stream too.
            let recorder = EventRecorder(counter.changes())
            try await recorder.wait(for: "the snapshot") { !$0.isEmpty }
            try await waitForStreams(1, at: server.baseURL)
            try await recorder.stop()
            #expect(recorder.error == nil)
            try await waitForStreams(0, at: server.baseURL)
        }
    }

    @Test("deleting the session ends the stream with session_not_found")
    func sessionDeleted() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let credentials = try await client.createSession()
            let recorder = EventRecorder(
                client.store(CounterFeature(), credentials: credentials)
                    .changes(reconnect: ReconnectPolicy(initialDelay: .milliseconds(50))))
            try await recorder.wait(for: "the snapshot") { !$0.isEmpty }
            try await client.deleteSession(credentials)
            try await recorder.waitUntilFinished()
            let error = try #require(recorder.error as? StateClientError)
            #expect(error.code == .sessionNotFound)
        }
    }

    @Test("a timer's change arrives with cause timer, its action and which timer fired; timers() lists what is pending")
    func timerChange() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let credentials = try await client.createSession()
            let todos = client.store(TodosFeature(), credentials: credentials)
            try await todos.dispatch(.add(title: "call Ada"))
            try await todos.dispatch(.add(title: "water the plants"))
            let recorder = EventRecorder(todos.changes())
            try await recorder.wait(for: "the snapshot") { !$0.isEmpty }
            let before = Int64(Date().timeIntervalSince1970 * 1000)
            try await todos.dispatch(.remind(id: "2", after: 3_600))
            try await todos.dispatch(.remind(id: "1", after: 1))

            let events = try await recorder.wait(for: "the reminder's change") { $0.contains { event in event.change.map { $0.cause == .timer } ?? false } }
            let fired = try #require(events.compactMap(\.change).first { $0.cause == .timer })
            #expect(fired.action == .reminderDue(id: "1"))
            #expect(fired.effect == .toast(message: "Reminder: call Ada"))
            #expect(fired.state.items.map(\.reminded) == [true, false])
            let timer = try #require(fired.timer)
            #expect(timer.id == "remind-1")
            #expect(timer.due - timer.scheduledAt == 1_000 && timer.scheduledAt >= before, "\(timer)")

            let pending = try await client.timers(credentials)
            #expect(pending.map(\.id) == ["remind-2"])
            #expect(pending.first?.feature == "todos")
            #expect(pending.first?.action == .object(["type": .string("reminderDue"), "id": .string("2")]))
            let history = try await client.history(credentials, feature: "todos")
            let entry = try #require(history.changes.last)
            #expect(entry.cause == "timer" && entry.timer == timer, "\(entry)")
            try await recorder.stop()
        }
    }
}

/// Waits until the server reports `count` open event streams.
func waitForStreams(_ count: Int, at baseURL: URL, timeout: Duration = .seconds(15)) async throws {
    try await waitForStreams(where: { $0 == Double(count) }, "\(count)", at: baseURL, timeout: timeout)
}

/// Waits until the server reports at least `count` open event streams.
func waitForStreams(atLeast count: Int, at baseURL: URL, timeout: Duration = .seconds(15)) async throws {
    try await waitForStreams(where: { $0 >= Double(count) }, "at least \(count)", at: baseURL, timeout: timeout)
}

private func waitForStreams(
    where condition: (Double) -> Bool, _ what: String, at baseURL: URL, timeout: Duration
) async throws {
    var last: Double?
    try await waitUntil("\(what) open event streams", timeout: timeout, detail: { "the server has \(last.map { "\($0)" } ?? "none")" }) {
        last = try await metric("stateserver_event_streams_open", at: baseURL)
        return last.map(condition) ?? false
    }
}

/// Waits until the server has answered at least `count` event-stream requests with 200.
func waitForEventStreamRequests(atLeast count: Int, at baseURL: URL, timeout: Duration = .seconds(15)) async throws {
    let name = #"stateserver_http_requests_total{route="/v1/sessions/{id}/events",status="200"}"#
    var last: Double?
    try await waitUntil("at least \(count) event-stream requests answered", timeout: timeout, detail: { "the server answered \(last.map { "\($0)" } ?? "none")" }) {
        last = try await metric(name, at: baseURL)
        return (last ?? 0) >= Double(count)
    }
}

/// `body`'s result, or a `Timeout` after `timeout` (the body is cancelled then).
func withDeadline<T: Sendable>(_ timeout: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: timeout)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw Timeout(description: "no result within \(timeout)")
        }
        return value
    }
}
