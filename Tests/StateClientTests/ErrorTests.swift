// Errors map to StateClientError with the contract's status, code and message.

import ExampleFeatures
import Foundation
import TestSupport
import StateClient
import StateStore
import Testing

/// A client-side definition of `counter` with an action the server does not know.
struct NewerCounterFeature: Feature {
    let name = "counter"
    let initialState = CounterFeature.State(count: 0)
    enum Action: Codable, Sendable { case double }
    func reduce(_ action: Action, state: CounterFeature.State, dispatch: Dispatcher<Action>) throws(ActionRejected) -> StateContainer<CounterFeature.State, Never> {
        StateContainer(CounterFeature.State(count: state.count * 2))
    }
}

/// A client-side definition of `counter` whose state has a field the server's lacks.
struct MismatchedCounterFeature: Feature {
    let name = "counter"
    struct State: Codable, Sendable { var count: Int; var label: String }
    let initialState = State(count: 0, label: "")
    typealias Action = CounterFeature.Action
    func reduce(_ action: Action, state: State, dispatch: Dispatcher<Action>) throws(ActionRejected) -> StateContainer<State, Never> {
        StateContainer(state)
    }
}

/// A feature the server does not have.
struct UnknownFeature: Feature {
    let name = "no-such-feature"
    let initialState = 0
    typealias Action = CounterFeature.Action
    func reduce(_ action: Action, state: Int, dispatch: Dispatcher<Action>) throws(ActionRejected) -> StateContainer<Int, Never> {
        StateContainer(state)
    }
}

@Suite("Errors", .timeLimit(.minutes(5)))
struct ErrorTests {
    @Test("a rule of the feature: 422 action_rejected, nothing applied")
    func actionRejected() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let credentials = try await client.createSession()
            let todos = client.store(TodosFeature(), credentials: credentials)
            let error = try await #require(throws: StateClientError.self) { try await todos.dispatch(.toggle(id: "42")) }
            #expect(error.kind == .server && error.status == 422 && error.code == .actionRejected)
            #expect(error.message.contains("42"))
            #expect(!error.isTransient)

            let settings = client.store(SettingsFeature(), credentials: credentials)
            let colour = try await #require(throws: StateClientError.self) {
                try await settings.dispatch(.setTextColor(color: "red"))
            }
            #expect(colour.code == .actionRejected)

            let counter = client.store(CounterFeature(), credentials: credentials)
            try await counter.dispatch(.set(value: Int.max))
            let overflow = try await #require(throws: StateClientError.self) { try await counter.dispatch(.increment(by: 1)) }
            #expect(overflow.code == .actionRejected)
            #expect(try await counter.state() == .init(version: 1, state: .init(count: Int.max)))
            #expect(try await todos.state().version == 0)
        }
    }

    @Test("a stale ifVersion: 412 version_conflict with the current version")
    func versionConflict() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let counter = client.store(CounterFeature(), credentials: try await client.createSession())
            try await counter.dispatch(.increment(by: 1))
            try await counter.dispatch(.increment(by: 1))
            let error = try await #require(throws: StateClientError.self) {
                try await counter.dispatch(.increment(by: 10), ifVersion: 1)
            }
            #expect(error.status == 412 && error.code == .versionConflict && error.currentVersion == 2)
            let reset = try await #require(throws: StateClientError.self) { try await counter.reset(ifVersion: 0) }
            #expect(reset.code == .versionConflict)
            #expect(try await counter.state().state.count == 2)
        }
    }

    @Test("a state that breaks a rule: 422 invalid_state")
    func invalidState() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let login = client.store(LoginFeature(), credentials: try await client.createSession())
            let error = try await #require(throws: StateClientError.self) {
                try await login.rehydrate(.init(username: "ada", isLoading: true))
            }
            #expect(error.status == 422 && error.code == .invalidState)
        }
    }

    @Test("an action the server's type does not have: 422 invalid_action")
    func invalidAction() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let counter = client.store(NewerCounterFeature(), credentials: try await client.createSession())
            let error = try await #require(throws: StateClientError.self) { try await counter.dispatch(.double) }
            #expect(error.status == 422 && error.code == .invalidAction)
        }
    }

    @Test("a state that does not decode as the client's type: a decoding error")
    func decodingError() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let counter = client.store(MismatchedCounterFeature(), credentials: try await client.createSession())
            let error = try await #require(throws: StateClientError.self) { try await counter.state() }
            #expect(error.kind == .decoding && error.underlyingError is DecodingError)
        }
    }

    @Test("unknown feature, wrong token: 404 with their codes")
    func notFound() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let credentials = try await client.createSession()
            let unknown = try await #require(throws: StateClientError.self) {
                try await client.store(UnknownFeature(), credentials: credentials).dispatch(.increment(by: 1))
            }
            #expect(unknown.status == 404 && unknown.code == .unknownFeature)

            let forged = SessionCredentials(id: credentials.id, token: "not-the-token")
            let wrongToken = try await #require(throws: StateClientError.self) {
                try await client.store(CounterFeature(), credentials: forged).state()
            }
            #expect(wrongToken.status == 404 && wrongToken.code == .sessionNotFound)
        }
    }

    @Test("no server: a transient transport error")
    func transport() async throws {
        let server = try await ServerProcess.start()
        let client = StateServerClient(baseURL: server.baseURL)
        await server.stop()
        let error = try await #require(throws: StateClientError.self) { try await client.createSession() }
        #expect(error.kind == .transport && error.status == nil && error.isTransient && error.underlyingError != nil)
    }
}
