import TestSupport
import Testing

/// Login's simulated credential check runs 1 s here, so "in flight" is easy to hit. The
/// feature's follow-up actions and its events, in process (`LoginSettingsTests`: the binary's
/// `login.checkDelay`).
@Suite("Login: asynchronous follow-up actions", .inProcessServer { $0.loginCheckDelay = .seconds(1) })
struct LoginTests {
    /// Waits for the check to finish: `isLoading` false again.
    func settled(_ session: Session) async throws -> StoreState {
        var last = try await session.store("login")
        let done = try await eventually(timeout: .seconds(60)) {
            last = try await session.store("login")
            return last.state["isLoading"] == false
        }
        try #require(done, "the credential check never finished: \(last)")
        return last
    }

    @Test("submit with good credentials: isLoading, then succeeded after the delay")
    func success() async throws {
        let session = try await SharedServer.api().createSession()
        let (stream, _) = try await session.subscribe(query: "feature=login")
        defer { stream.close() }
        let body = try await session.dispatchOK("login", ["type": "submit", "username": "alice", "password": "correct horse"])
        #expect(body["version"] == 1)
        #expect(body["state"] == ["username": "alice", "isLoading": true, "isLoggedIn": false, "error": .null])
        #expect(body["effect"] == .null)

        let submitted = try await stream.nextEvent()
        #expect(submitted.json?["action"]?["type"] == "submit", "\(submitted)")
        #expect(submitted.json?["cause"] == "dispatch")
        let succeeded = try await stream.nextEvent(timeout: .seconds(60))
        let change = try #require(succeeded.json, "\(succeeded)")
        #expect(succeeded.event == "state")
        #expect(change["feature"] == "login")
        #expect(change["cause"] == "dispatch")
        #expect(change["action"]?["type"] == "succeeded", "\(succeeded)")
        #expect(change["version"] == 2)
        #expect(change["state"] == ["username": "alice", "isLoading": false, "isLoggedIn": true, "error": .null])
        #expect(change["effect"] == .null)
        #expect(try await session.store("login") == StoreState(version: 2, state: change["state"]!))
    }

    @Test("failed check: failed {reason} with a toast effect delivered once, never in GET state")
    func failure() async throws {
        let session = try await SharedServer.api().createSession()
        let (stream, _) = try await session.subscribe(query: "feature=login")
        defer { stream.close() }
        try await session.dispatchOK("login", ["type": "submit", "username": "bob", "password": "short"])
        let submitted = try await stream.nextEvent()
        #expect(submitted.json?["effect"] == .null)
        let failed = try await stream.nextEvent(timeout: .seconds(60))
        let change = try #require(failed.json, "\(failed)")
        #expect(change["action"]?["type"] == "failed", "\(failed)")
        #expect(change["action"]?["reason"]?.string != nil, "failed carries a reason: \(failed)")
        #expect(change["version"] == 2)
        #expect(change["state"]?["isLoading"] == false)
        #expect(change["state"]?["isLoggedIn"] == false)
        #expect(change["state"]?["username"] == "bob")
        #expect(change["state"]?["error"]?.string?.isEmpty == false, "error holds the reason: \(failed)")
        let effect = try #require(change["effect"]?.object, "the toast effect: \(failed)")
        #expect(effect["type"] == "toast")
        #expect(effect["message"]?.string?.isEmpty == false)
        #expect(Set(effect.keys) == ["type", "message"])

        // GET state never shows effects.
        let one = try await session.request("GET", "/state/login")
        #expect(one.json?["effect"] == nil, "\(one)")
        #expect(one.json?["state"] == change["state"])
        let all = try await session.request("GET", "/state")
        #expect(all.json?["features"]?["login"]?["effect"] == nil, "\(all)")
        #expect(all.json?["features"]?["login"]?.object?.keys.sorted() == ["state", "version"])

        // Delivered once: the next change has no effect, and a new subscriber's snapshot has none.
        try await session.dispatchOK("login", ["type": "submit", "username": "bob", "password": "longer password"])
        let next = try await stream.nextEvent()
        #expect(next.json?["effect"] == .null, "\(next)")
        #expect(next.json?["state"]?["isLoading"] == true)
        let (late, snapshot) = try await session.subscribe(query: "feature=login")
        late.close()
        #expect(!snapshot.data.contains("toast"), "\(snapshot)")
        let success = try await stream.nextEvent(timeout: .seconds(60))
        #expect(success.json?["action"]?["type"] == "succeeded", "\(success)")
        #expect(success.json?["state"]?["isLoggedIn"] == true, "\(success)")
    }

    @Test("an empty username fails the check")
    func emptyUsername() async throws {
        let session = try await SharedServer.api().createSession()
        try await session.dispatchOK("login", ["type": "submit", "username": "", "password": "long enough password"])
        let final = try await settled(session)
        #expect(final.state["isLoggedIn"] == false)
        #expect(final.state["error"]?.string != nil, "\(final)")
        #expect(final.version == 2)
    }

    @Test("a password of exactly 8 characters passes; 7 fail")
    func passwordLength() async throws {
        let api = try SharedServer.api()
        let eight = try await api.createSession()
        let seven = try await api.createSession()
        try await eight.dispatchOK("login", ["type": "submit", "username": "u", "password": "12345678"])
        try await seven.dispatchOK("login", ["type": "submit", "username": "u", "password": "1234567"])
        #expect(try await settled(eight).state["isLoggedIn"] == true)
        #expect(try await settled(seven).state["isLoggedIn"] == false)
    }

    @Test("submit while a check is in flight, or while logged in: 422 action_rejected")
    func submitRules() async throws {
        let session = try await SharedServer.api().createSession()
        try await session.dispatchOK("login", ["type": "submit", "username": "carol", "password": "password123"])
        let during = try await session.dispatch("login", ["type": "submit", "username": "mallory", "password": "password123"])
        expectError(during, 422, "action_rejected", "submit during the check")
        // The check's results come from the server only: a client cannot log itself in while
        // a check is in flight.
        expectError(try await session.dispatch("login", ["type": "succeeded"]), 422, "action_rejected", "client succeeded mid-check")
        expectError(
            try await session.dispatch("login", ["type": "failed", "reason": "x"]), 422, "action_rejected", "client failed mid-check")
        // The store keeps accepting dispatches while the work runs.
        try await session.dispatchOK("counter", ["type": "increment"])
        let final = try await settled(session)
        #expect(final == StoreState(version: 2, state: ["username": "carol", "isLoading": false, "isLoggedIn": true, "error": .null]))

        let loggedIn = try await session.dispatch("login", ["type": "submit", "username": "carol", "password": "password123"])
        expectError(loggedIn, 422, "action_rejected", "submit while logged in")
        expectError(try await session.dispatch("login", ["type": "succeeded"]), 422, "action_rejected", "client succeeded")
        expectError(
            try await session.dispatch("login", ["type": "failed", "reason": "x"]), 422, "action_rejected", "client failed")
        #expect(try await session.store("login") == final)

        let logout = try await session.dispatchOK("login", ["type": "logout"])
        #expect(logout["state"]?["isLoggedIn"] == false)
        #expect(logout["version"] == 3)
        // After logout, submit works again.
        try await session.dispatchOK("login", ["type": "submit", "username": "carol", "password": "password123"])
        #expect(try await settled(session).state["isLoggedIn"] == true)
    }

    /// Issue 11 item 3: a check started for one attempt must never answer a later one. alice's
    /// good credentials are being checked; the attempt is ended (reset, logout or a client
    /// rehydrate to the initial state) and mallory submits a bad password. Before the fix,
    /// alice's `succeeded` was applied to mallory's attempt: logged in as mallory.
    @Test("a check cancelled by reset, logout or rehydrate cannot log in the next attempt", arguments: ["reset", "logout", "rehydrate"])
    func staleCheckCannotLogInTheNextAttempt(_ how: String) async throws {
        let session = try await SharedServer.api().createSession()
        try await session.dispatchOK("login", ["type": "submit", "username": "alice", "password": "correct horse"])
        // The store's version once the attempt is ended: 2, or 3 when a loaded machine let
        // alice's check answer before the end (then there is no stale check, and every later
        // version is one higher).
        let ended: Int?
        switch how {
        case "reset":
            let reset = try await session.request("DELETE", "/state/login")
            #expect(reset.status == 200)
            ended = reset.json?["version"]?.int
        case "logout":
            ended = try await session.dispatchOK("login", ["type": "logout"])["version"]?.int
        default:
            let put = try await session.request("PUT", "/state/login", body: jsonBytes(["state": Examples.login]))
            #expect(put.status == 200, "\(put)")
            ended = put.json?["version"]?.int
        }
        let base = try #require(ended, "the end of the attempt answered no version")
        #expect(base == 2 || base == 3, "ended at version \(base)")
        let (stream, _) = try await session.subscribe(query: "feature=login")
        defer { stream.close() }
        try await session.dispatchOK("login", ["type": "submit", "username": "mallory", "password": "x"])
        _ = try await stream.nextEvent()  // mallory's submit
        // The next change is the answer to mallory's attempt, and it is mallory's own check's.
        let answer = try await stream.nextEvent(timeout: .seconds(60))
        #expect(answer.json?["action"]?["type"] == "failed", "\(answer)")
        #expect(answer.json?["version"]?.int == base + 2)
        let final = try await settled(session)
        #expect(final.state["isLoggedIn"] == false, "\(final)")
        #expect(final.state["username"] == "mallory")
        #expect(final.state["error"] == "The password must have at least 8 characters.")
        #expect(final.version == base + 2, "no stale result was applied: \(final)")
    }

    /// Issue 11 item 4: a client cannot log itself in by rehydrating: every field of login's
    /// state is server-owned. Only the current state or the initial one may be restored.
    @Test("PUT state/login cannot set server-owned fields: 422 invalid_state, nothing changes")
    func putCannotLogIn() async throws {
        let session = try await SharedServer.api().createSession()
        let forged: [JSON] = [
            ["username": "mallory", "isLoading": false, "isLoggedIn": true, "error": .null],
            ["username": "", "isLoading": false, "isLoggedIn": true, "error": .null],
            ["username": "mallory", "isLoading": false, "isLoggedIn": false, "error": .null],
            ["isLoggedIn": true],
        ]
        for state in forged {
            let put = try await session.request("PUT", "/state/login", body: jsonBytes(["state": state]))
            expectError(put, 422, "invalid_state", "PUT \(state)")
        }
        #expect(try await session.store("login") == StoreState(version: 0, state: Examples.login))

        // The initial state may be restored (it is what logout gives), also once logged in.
        try await session.dispatchOK("login", ["type": "submit", "username": "ada", "password": "password123"])
        let loggedIn = try await settled(session)
        #expect(loggedIn.state["isLoggedIn"] == true)
        let same = try await session.request("PUT", "/state/login", body: jsonBytes(["state": loggedIn.state]))
        #expect(same.status == 200, "the current state may be restored: \(same)")
        let other: JSON = ["username": "mallory", "isLoading": false, "isLoggedIn": true, "error": .null]
        expectError(
            try await session.request("PUT", "/state/login", body: jsonBytes(["state": other])), 422, "invalid_state",
            messageContains: "set by the server")
        let out = try await session.request("PUT", "/state/login", body: jsonBytes(["state": Examples.login]))
        #expect(out.status == 200, "\(out)")
        #expect(try await session.store("login") == StoreState(version: 4, state: Examples.login))
    }

    @Test("deleting a session while its check runs does not break the server")
    func deleteDuringCheck() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        // A second session's check, started after the first, tells when the first's delay is over.
        try await session.dispatchOK("login", ["type": "submit", "username": "dave", "password": "password123"])
        let control = try await api.createSession()
        try await control.dispatchOK("login", ["type": "submit", "username": "erin", "password": "password123"])
        #expect(try await session.delete().status == 204)
        #expect(try await settled(control).state["isLoggedIn"] == true)
        #expect(await api.isHealthy())
        expectError(try await session.request("GET", "/state/login"), 404, "session_not_found")
    }
}

/// `login.checkDelay` read by the binary and given to the login feature.
@Suite("Login settings")
struct LoginSettingsTests {
    @Test("STATE_SERVER_LOGIN_CHECK_DELAY=3600: a submitted check is still in flight after later requests, and refuses a second submit")
    func checkDelayFromTheEnvironment() async throws {
        try await withServer(environment: ["STATE_SERVER_LOGIN_CHECK_DELAY": "3600"]) { server in
            let session = try await server.api.createSession()
            try await session.dispatchOK("login", ["type": "submit", "username": "alice", "password": "correct horse"])
            try await session.dispatchOK("counter", ["type": "increment"])
            // With the default delay (0.2 s) a slow machine would see the check finished here;
            // with an hour it cannot have.
            let login = try await session.store("login")
            #expect(login == StoreState(version: 1, state: ["username": "alice", "isLoading": true, "isLoggedIn": false, "error": .null]))
            let again = try await session.dispatch("login", ["type": "submit", "username": "alice", "password": "correct horse"])
            expectError(again, 422, "action_rejected", "submit during the check")
        }
    }
}
