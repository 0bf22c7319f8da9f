// The README's SwiftUI view model, minus the view: an @Observable object on the main actor
// that renders from changes() and sends actions with dispatch. (SwiftUI is not on Linux;
// Observation is.)

import ExampleFeatures
import Foundation
import TestSupport
import Observation
import StateClient
import Testing

/// The login screen's model, as the README shows it.
@MainActor @Observable
final class LoginModel {
    private(set) var state = LoginFeature().initialState
    /// `nil` until the first snapshot arrives.
    private(set) var version: Int?
    /// The message to show briefly; each effect sets it once.
    var toast: String?
    private(set) var problem: String?
    @ObservationIgnored private let store: RemoteStore<LoginFeature>

    init(store: RemoteStore<LoginFeature>) {
        self.store = store
    }

    /// Renders the store until the calling task is cancelled (SwiftUI: `.task { await model.run() }`).
    func run() async {
        do {
            for try await event in store.changes() {
                state = event.state
                version = event.version
                if case .toast(let message)? = event.effect { toast = message }
            }
        } catch {
            problem = (error as? StateClientError)?.message ?? "\(error)"
        }
    }

    func logIn(username: String, password: String) async {
        do {
            try await store.dispatch(.submit(username: username, password: password))
        } catch let error as StateClientError where error.code == .actionRejected {
            problem = error.message
        } catch {
            problem = "\(error)"
        }
    }
}

@Suite("A view model on the main actor", .timeLimit(.minutes(5)))
struct ViewModelTests {
    @Test("the model renders the stream and shows the toast")
    @MainActor
    func loginModel() async throws {
        let server = try await ServerProcess.start(environment: ["STATE_SERVER_LOGIN_CHECK_DELAY": "0.05"])
        do {
            let client = StateServerClient(baseURL: server.baseURL)
            let model = LoginModel(store: client.store(LoginFeature(), credentials: try await client.createSession()))
            let running = Task { await model.run() }
            defer { running.cancel() }
            try await waitUntil("the snapshot", timeout: .seconds(60), every: .milliseconds(10)) { model.version != nil }

            await model.logIn(username: "ada", password: "short")
            try await waitUntil("the toast", timeout: .seconds(60), every: .milliseconds(10)) { model.toast != nil }
            #expect(model.toast == "The password must have at least 8 characters.")
            #expect(model.state.error == model.toast && !model.state.isLoading)

            model.toast = nil
            await model.logIn(username: "ada", password: "long enough")
            try await waitUntil("the login", timeout: .seconds(60), every: .milliseconds(10)) { model.state.isLoggedIn }
            #expect(model.toast == nil && model.problem == nil)

            running.cancel()
            await running.value
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }
}
