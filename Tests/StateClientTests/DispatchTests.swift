// A Swift program using only StateClient (and the shared feature types): sessions, typed
// dispatch, state, rehydrate, reset, idempotency, against the real server binary.

import ExampleFeatures
import Foundation
import TestSupport
import StateClient
import Testing

@Suite("Sessions, dispatch and state over HTTP", .timeLimit(.minutes(5)))
struct DispatchTests {
    @Test("create a session, dispatch typed counter actions, get typed states back")
    func counter() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let credentials = try await client.createSession()
            #expect(!credentials.id.isEmpty && !credentials.token.isEmpty)
            let counter = client.store(CounterFeature(), credentials: credentials)

            let initial = try await counter.state()
            #expect(initial.version == 0 && initial.state == CounterFeature.State(count: 0))

            let first = try await counter.dispatch(.increment(by: 2))
            #expect(first.version == 1 && first.state.count == 2 && first.effect == nil)
            #expect(first.cause == .dispatch && first.action == .increment(by: 2) && !first.isReplayed)
            let second = try await counter.dispatch(.increment(by: nil))
            #expect(second.version == 2 && second.state.count == 3)
            let third = try await counter.dispatch(.decrement(by: 5))
            #expect(third.version == 3 && third.state.count == -2)
            let fourth = try await counter.dispatch(.set(value: 40))
            #expect(fourth.version == 4 && fourth.state.count == 40)

            let current = try await counter.state()
            #expect(current.version == 4 && current.state.count == 40)
            // Unchanged: the server answers 304 and the remembered state is returned.
            let notModified = #"stateserver_http_requests_total{route="/v1/sessions/{id}/state/{feature}",status="304"}"#
            let before = try await metric(notModified, at: server.baseURL) ?? 0
            let again = try await counter.state()
            #expect(again == current)
            #expect(try await metric(notModified, at: server.baseURL) == before + 1)

            // Changed by another client: the new state, not the remembered one.
            let other = StateServerClient(baseURL: server.baseURL).store(CounterFeature(), credentials: credentials)
            try await other.dispatch(.increment(by: 1))
            #expect(try await counter.state() == .init(version: 5, state: .init(count: 41)))
        }
    }

    @Test("typed todos: add, toggle, remove, clearCompleted")
    func todos() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let credentials = try await client.createSession()
            let todos = client.store(TodosFeature(), credentials: credentials)

            let milk = try await todos.dispatch(.add(title: "  Milk  "))
            #expect(milk.state.items == [TodosFeature.Item(id: "1", title: "Milk", done: false)])
            _ = try await todos.dispatch(.add(title: "Bread"))
            let toggled = try await todos.dispatch(.toggle(id: "1"))
            #expect(toggled.state.items.map(\.done) == [true, false])
            let cleared = try await todos.dispatch(.clearCompleted)
            #expect(cleared.state.items.map(\.title) == ["Bread"])
            let removed = try await todos.dispatch(.remove(id: "2"))
            #expect(removed.state.items.isEmpty && removed.state.nextId == 3 && removed.version == 5)

            // Two stores of one session are independent.
            let counter = client.store(CounterFeature(), credentials: credentials)
            #expect(try await counter.state().version == 0)
        }
    }

    @Test("rehydrate and reset return typed states and raise the version")
    func rehydrateAndReset() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let credentials = try await client.createSession()
            let settings = client.store(SettingsFeature(), credentials: credentials)

            let restored = try await settings.rehydrate(.init(backgroundColor: "#00ff00", textColor: "#123abc"))
            #expect(restored.version == 1 && restored.cause == .rehydrate)
            #expect(restored.state == .init(backgroundColor: "#00FF00", textColor: "#123ABC"))
            let reset = try await settings.reset(ifVersion: 1)
            #expect(reset.version == 2 && reset.cause == .reset && reset.state == SettingsFeature().initialState)
            #expect(try await settings.state().version == 2)
        }
    }

    @Test("a repeated idempotency key applies once and is marked replayed")
    func idempotency() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let counter = client.store(CounterFeature(), credentials: try await client.createSession())
            let first = try await counter.dispatch(.increment(by: 5), idempotencyKey: "pay-42")
            let repeated = try await counter.dispatch(.increment(by: 5), idempotencyKey: "pay-42")
            #expect(!first.isReplayed && repeated.isReplayed)
            #expect(repeated.version == first.version && repeated.state == first.state)
            #expect(try await counter.state().state.count == 5)
        }
    }

    @Test("ifVersion applies when the version matches")
    func ifVersionMatches() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let counter = client.store(CounterFeature(), credentials: try await client.createSession())
            let change = try await counter.dispatch(.increment(by: 1), ifVersion: 0)
            #expect(change.version == 1)
        }
    }

    @Test("credentials survive a round trip through Codable; the token stays out of descriptions")
    func credentialsCodable() throws {
        let credentials = SessionCredentials(id: "abc", token: "secret-token")
        let decoded = try JSONDecoder().decode(SessionCredentials.self, from: JSONEncoder().encode(credentials))
        #expect(decoded == credentials)
        #expect(!"\(credentials)".contains("secret-token"))
    }

    @Test("the server's features are listed")
    func features() async throws {
        try await withServer { server in
            let features = try await StateServerClient(baseURL: server.baseURL).features()
            #expect(features.map(\.name) == ["counter", "todos", "settings", "login"])
        }
    }

    @Test("a deleted session is gone")
    func deleteSession() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let credentials = try await client.createSession()
            let counter = client.store(CounterFeature(), credentials: credentials)
            try await counter.dispatch(.increment(by: 1))
            try await client.deleteSession(credentials)
            let error = try await #require(throws: StateClientError.self) { try await counter.state() }
            #expect(error.status == 404 && error.code == .sessionNotFound)
        }
    }
}
