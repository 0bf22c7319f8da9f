import ExampleFeatures
import StateStore
import StateStoreTesting
import Testing

@Suite("login")
struct LoginTests {
    /// Short enough to keep tests fast; results are awaited by observing, not by sleeping.
    static let delay = Duration.milliseconds(10)

    @Test func aGoodPasswordLogsIn() async {
        let store = TestStore(LoginFeature(checkDelay: Self.delay))
        store.send(.submit(username: "ada", password: "correct horse")) {
            $0.username = "ada"
            $0.isLoading = true
        }
        await store.receive(.succeeded) {
            $0.isLoading = false
            $0.isLoggedIn = true
        }
        store.send(.logout) { $0 = LoginFeature.State() }
        store.finish()
    }

    @Test func aShortPasswordFailsWithAToast() async {
        let store = TestStore(LoginFeature(checkDelay: Self.delay))
        let reason = "The password must have at least 8 characters."
        store.send(.submit(username: "ada", password: "1234567")) {
            $0.username = "ada"
            $0.isLoading = true
        }
        await store.receive(.failed(reason: reason), effect: .toast(message: reason)) {
            $0.isLoading = false
            $0.error = reason
        }
        // The toast came once: the next change has no effect, and a new submit clears the error.
        store.send(.submit(username: "ada", password: "12345678")) {
            $0.isLoading = true
            $0.error = nil
        }
        await store.receive(.succeeded) {
            $0.isLoading = false
            $0.isLoggedIn = true
        }
        store.finish()
    }

    @Test(arguments: ["", "   ", "\n\t"])
    func aBlankUsernameFails(username: String) async {
        let store = TestStore(LoginFeature(checkDelay: Self.delay))
        let reason = "Enter a username."
        store.send(.submit(username: username, password: "long enough")) {
            $0.username = username
            $0.isLoading = true
        }
        await store.receive(.failed(reason: reason), effect: .toast(message: reason)) {
            $0.isLoading = false
            $0.error = reason
        }
        store.finish()
    }

    @Test func thePasswordLengthCountsCharacters() async {
        let store = TestStore(LoginFeature(checkDelay: Self.delay))
        store.send(.submit(username: "ada", password: "ééééééé🙂")) {
            $0.username = "ada"
            $0.isLoading = true
        }
        await store.receive(.succeeded) {
            $0.isLoading = false
            $0.isLoggedIn = true
        }
        store.finish()
    }

    @Test func submitIsRejectedWhileACheckIsInFlightOrOnceLoggedIn() async {
        let store = TestStore(LoginFeature(checkDelay: Self.delay))
        store.send(.submit(username: "ada", password: "password1")) {
            $0.username = "ada"
            $0.isLoading = true
        }
        #expect(
            store.sendRejected(.submit(username: "eve", password: "password2"))
                == "a credential check is already in progress")
        await store.receive(.succeeded) {
            $0.isLoading = false
            $0.isLoggedIn = true
        }
        #expect(
            store.sendRejected(.submit(username: "eve", password: "password2"))
                == "already logged in: log out before submitting again")
        store.finish()
    }

    @Test func aClientCannotSendTheChecksResults() {
        let store = TestStore(LoginFeature(checkDelay: Self.delay))
        #expect(store.sendRejected(.succeeded) == "no credential check is in progress")
        #expect(store.sendRejected(.failed(reason: "x")) == "no credential check is in progress")
        store.sendRejected(json: #"{"type":"succeeded"}"#)
        store.sendRejected(json: #"{"type":"failed","reason":"nope"}"#)
        store.finish()
    }

    // No `finish()`: the rejected follow-up is what this test expects.
    @Test func aResultArrivingAfterLogoutIsRejected() async {
        let store = TestStore(LoginFeature(checkDelay: Self.delay))
        store.send(.submit(username: "ada", password: "password1")) {
            $0.username = "ada"
            $0.isLoading = true
        }
        store.send(.logout) { $0 = LoginFeature.State() }
        #expect(await store.rejectedFollowUps.wait(forCount: 1))
        #expect(store.rejectedFollowUps.values.first?.kind == .actionRejected)
        #expect(store.state == LoginFeature.State())
    }

    @Test func theWireShape() async throws {
        let store = TestStore(LoginFeature(checkDelay: Self.delay))
        let encoded = Recorder<EncodedChange>()
        _ = store.store.addJSONObserver { encoded.append($0) }
        #expect(
            text(try store.store.currentJSON().state)
                == #"{"error":null,"isLoading":false,"isLoggedIn":false,"username":""}"#)

        let submitted = store.send(json: #"{"type":"submit","username":"ada","password":"short"}"#) {
            $0.username = "ada"
            $0.isLoading = true
        }
        #expect(text(submitted?.state) == #"{"error":null,"isLoading":true,"isLoggedIn":false,"username":"ada"}"#)
        #expect(submitted?.effect == nil)

        let reason = "The password must have at least 8 characters."
        await store.receive(.failed(reason: reason), effect: .toast(message: reason)) {
            $0.isLoading = false
            $0.error = reason
        }
        try #require(await encoded.wait(forCount: 2))
        let failed = encoded.values[1]
        #expect(text(failed.action) == #"{"reason":"\#(reason)","type":"failed"}"#)
        #expect(text(failed.effect) == #"{"message":"\#(reason)","type":"toast"}"#)
        #expect(text(failed.state) == #"{"error":"\#(reason)","isLoading":false,"isLoggedIn":false,"username":"ada"}"#)

        let loggedOut = store.send(json: #"{"type":"logout"}"#) { $0 = LoginFeature.State() }
        #expect(loggedOut?.effect == nil)
        #expect(text(loggedOut?.state) == #"{"error":null,"isLoading":false,"isLoggedIn":false,"username":""}"#)
        // Each effect was delivered once, with its change.
        #expect(encoded.values.map { $0.effect != nil } == [false, true, false])
        store.finish()
    }

    @Test(arguments: [
        #"{"username":"ada","isLoading":false,"isLoggedIn":true,"error":null}"#,
        #"{"username":"ada","isLoading":false,"isLoggedIn":true}"#,
    ])
    func aStateWithoutAnErrorDecodes(state: String) throws {
        let store = DefaultStateStore(feature: LoginFeature())
        let change = try store.rehydrate(json: json(state), ifVersion: nil)
        #expect(store.state == LoginFeature.State(username: "ada", isLoggedIn: true))
        #expect(text(change.state) == #"{"error":null,"isLoading":false,"isLoggedIn":true,"username":"ada"}"#)
    }

    @Test func aStateWithAnErrorRoundTrips() throws {
        let store = DefaultStateStore(feature: LoginFeature())
        let state = #"{"error":"Nope.","isLoading":false,"isLoggedIn":false,"username":"eve"}"#
        let change = try store.rehydrate(json: json(state), ifVersion: nil)
        #expect(store.state.error == "Nope.")
        #expect(text(change.state) == state)
    }

    @Test func aSideEffectFreeStoreNeverCompletesTheCheck() async throws {
        // Replaying history: the recorded follow-up arrives as its own action instead.
        let replay = DefaultStateStore(feature: LoginFeature(checkDelay: .zero), runsSideEffects: false)
        try replay.dispatch(.submit(username: "ada", password: "password1"))
        try replay.dispatch(.succeeded)
        #expect(replay.state == LoginFeature.State(username: "ada", isLoggedIn: true))
        #expect(replay.version == 2)
    }
}
