import StateStore

/// A login form with a simulated credential check: the example of asynchronous work.
///
/// Wire shape:
/// - state: `{"username": "", "isLoading": false, "isLoggedIn": false, "error": null}`
/// - actions: `{"type": "submit", "username": "ada", "password": "..."}`, `{"type": "logout"}`,
///   and the check's results `{"type": "succeeded"}` and `{"type": "failed", "reason": "..."}`
/// - effect: `{"type": "toast", "message": "..."}` when a check fails
///
/// `submit` does not decide anything itself: it sets `isLoading` and *declares* the check with
/// `dispatch.run(id:)`. The store runs the check after the change, outside the store; after
/// `checkDelay` on `clock` the check sends `succeeded` (a non-blank username and a password of
/// at least 8 characters) or `failed`. Clients cannot send those results (`acceptsFromClient`),
/// and the reducer accepts them only while a check is in flight.
///
/// A check answers only the attempt it was started for: `logout` cancels it
/// (`dispatch.cancel(id:)`), and so do a reset and a rehydrate of the store; whatever a
/// cancelled check sends is dropped by the store, so it can never log in a later attempt.
///
/// The whole state is server-owned: a client may not set `isLoggedIn`, `username`, `isLoading`
/// or `error` by rehydrating (see ``clientRehydrate(_:current:)``).
public struct LoginFeature: Feature {
    public let name = "login"
    public let initialState = State()

    /// How long the simulated credential check takes.
    public let checkDelay: Duration
    /// The clock the check waits on (a test clock in tests, so they need not wait).
    public let clock: any Clock<Duration>

    /// The fewest characters a password may have.
    public static let minimumPasswordLength = 8

    /// The identity of the credential check, so `logout` can cancel it.
    enum Work: Hashable, Sendable {
        case credentialCheck
    }

    public init(checkDelay: Duration = .milliseconds(200), clock: any Clock<Duration> = ContinuousClock()) {
        self.checkDelay = checkDelay
        self.clock = clock
    }

    public struct State: Codable, Sendable, Equatable {
        public var username: String
        /// A credential check is in flight.
        public var isLoading: Bool
        public var isLoggedIn: Bool
        /// Why the last check failed; `null` on the wire when there is none.
        public var error: String?

        public init(username: String = "", isLoading: Bool = false, isLoggedIn: Bool = false, error: String? = nil) {
            self.username = username
            self.isLoading = isLoading
            self.isLoggedIn = isLoggedIn
            self.error = error
        }

        // The synthesized encoder omits a nil `error`; the wire shape has `"error": null`.
        // (The synthesized decoder, kept, accepts `error` missing or null.)
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(username, forKey: .username)
            try container.encode(isLoading, forKey: .isLoading)
            try container.encode(isLoggedIn, forKey: .isLoggedIn)
            try container.encode(error, forKey: .error)
        }
    }

    public enum Action: Codable, Sendable, Equatable {
        /// Starts a credential check. Rejected while a check is in flight or once logged in.
        case submit(username: String, password: String)
        /// The check accepted the credentials (sent by the check, not by clients).
        case succeeded
        /// The check refused the credentials (sent by the check, not by clients).
        case failed(reason: String)
        /// Returns to the initial state.
        case logout
    }

    public enum Effect: Codable, Sendable, Equatable {
        /// A message to show briefly.
        case toast(message: String)
    }

    /// The prose of `/openapi.json` for the login form (its schemas are derived from the types;
    /// which actions clients may send comes from ``acceptsFromClient(_:)``).
    public func refineSchema(_ schema: inout FeatureSchema) {
        schema.state.describe("State of the example feature `login`. `isLoading` is true while a credential check runs.")
        schema.state[property: "error"].describe("Why the last check failed, or `null`.")
        schema[effect: "toast"].describe("Effect of the example feature `login`: a message to show once (sent when a check fails).")
        schema[effect: "toast"]["example"] = ["type": "toast", "message": "The password must have at least 8 characters."]
        schema.actionDescription = "An action of the example feature `login`: a tagged object whose `type` names the case."
        schema[action: "submit"].describe(
            "Sets `username` and `isLoading`, then a simulated check (about 200 ms) dispatches `succeeded` or `failed`. "
                + "Rejected while a check runs or once logged in. Events show the password as `********`.")
        schema[action: "succeeded"].describe(
            "Sent by the credential check only (a client sending it gets `422 action_rejected`): logged in.")
        schema[action: "failed"].describe(
            "Sent by the credential check only (a client sending it gets `422 action_rejected`), with effect `toast`.")
        schema[action: "logout"].describe("Back to the initial state.")
        schema.dispatchExample = ("login: submit", ["type": "submit", "username": "ada", "password": "correct horse"])
    }

    /// Events and journals show `submit` with the password masked: it never reaches the state,
    /// so replaying the masked action gives the same state.
    public func publicAction(_ action: Action) -> Action {
        if case .submit(let username, _) = action { return .submit(username: username, password: "********") }
        return action
    }

    /// `succeeded` and `failed` are the check's results: only the server's own work sends them.
    public func acceptsFromClient(_ action: Action) -> Bool {
        switch action {
        case .succeeded, .failed: false
        case .submit, .logout: true
        }
    }

    /// A check that was running when the server stopped never reports back: fail it, so the
    /// user sees a toast and can try again instead of waiting forever.
    public func recoveryAction(for state: State) -> Action? {
        state.isLoading ? .failed(reason: "The server restarted during the check; please try again.") : nil
    }

    /// A restored state cannot be in the middle of a check: no check would ever finish it.
    public func validated(_ state: State) throws(ActionRejected) -> State {
        guard !state.isLoading else {
            throw ActionRejected("isLoading must be false: a credential check cannot be restored")
        }
        return state
    }

    /// Every field is server-owned (`isLoggedIn` and `username` by the check, `isLoading` and
    /// `error` by the check in flight), so a client may restore only a state it could reach
    /// without the server's word: the current state unchanged, or the initial, logged-out one
    /// (what `logout` gives). Anything else is refused.
    public func clientRehydrate(_ proposed: State, current: State) throws(ActionRejected) -> State {
        guard proposed == current || proposed == initialState else {
            throw ActionRejected(
                "its state is set by the server (isLoggedIn, username, isLoading, error): a client may restore "
                    + "only the current state or the initial one; use submit and logout")
        }
        return proposed
    }

    public func reduce(
        _ action: Action, state: State, dispatch: Dispatcher<Action>
    ) throws(ActionRejected) -> StateContainer<State, Effect> {
        var state = state
        switch action {
        case .submit(let username, let password):
            guard !state.isLoggedIn else {
                throw ActionRejected("already logged in: log out before submitting again")
            }
            guard !state.isLoading else {
                throw ActionRejected("a credential check is already in progress")
            }
            state.username = username
            state.isLoading = true
            state.error = nil
            let (delay, clock) = (checkDelay, clock)
            dispatch.run(id: Work.credentialCheck) { send in
                // Cancelled (logout, reset, rehydrate): nothing to report, and the store would
                // drop a report anyway.
                do { try await clock.sleep(for: delay) } catch { return }
                if let reason = Self.checkCredentials(username: username, password: password) {
                    await send(.failed(reason: reason))
                } else {
                    await send(.succeeded)
                }
            }
            return StateContainer(state)

        case .succeeded:
            guard state.isLoading else {
                throw ActionRejected("no credential check is in progress")
            }
            state.isLoading = false
            state.isLoggedIn = true
            return StateContainer(state)

        case .failed(let reason):
            guard state.isLoading else {
                throw ActionRejected("no credential check is in progress")
            }
            state.isLoading = false
            state.error = reason
            return StateContainer(state, effect: .toast(message: reason))

        case .logout:
            // A check still running answers an attempt that no longer exists.
            dispatch.cancel(id: Work.credentialCheck)
            return StateContainer(initialState)
        }
    }

    /// The simulated check: why the credentials are refused, or `nil` when they are accepted.
    static func checkCredentials(username: String, password: String) -> String? {
        if username.allSatisfy(\.isWhitespace) {
            return "Enter a username."
        }
        if password.count < minimumPasswordLength {
            return "The password must have at least \(minimumPasswordLength) characters."
        }
        return nil
    }
}
