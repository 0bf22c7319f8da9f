import StateJSON
import StateStore

/// What a middleware knows of the dispatch it wraps.
public struct DispatchContext: Sendable {
    /// The session's id.
    public let session: String
    /// The feature the action is for.
    public let feature: String
    /// The store's version the action is computed on.
    public let version: Int
    /// The request's `Idempotency-Key`, if any (a repeat of a remembered key is answered from
    /// memory before any middleware runs).
    public let idempotencyKey: String?
    /// Who sent it: the `sub` of the request's JWT, or of the JWT that minted its token; nil
    /// for the owner's token.
    public var subject: String? = nil
    /// The id of the minted token the request came with; nil for the owner's token and JWTs.
    public var tokenID: String? = nil
    /// What sends the action: `dispatch` (a client) or `timer` (a timer the reducer scheduled
    /// fired: a server action, with no subject or token).
    public var cause: String = "dispatch"
}

/// Code around every client dispatch, in the shape of Redux middleware and Hummingbird's
/// `RouterMiddleware`: it gets the action (a tagged JSON object, as the client sent it) and
/// `next`, the rest of the chain ending in the reducer. It may
/// - observe: call `next(action)` and look at the change it returns (version, state, effect);
/// - transform: call `next` with another action;
/// - refuse: throw a ``StoreError`` instead of calling `next` — `.actionRejected` answers
///   `422 action_rejected` (validation), `.forbidden` answers `403 forbidden` (authorization).
///   Nothing is applied.
///
/// Middleware runs where the change is computed — on the session's owner, inside the session's
/// pipeline, one change at a time — so it cannot break one writer per store. It runs for
/// client dispatches and for the actions of timers the reducers scheduled (``DispatchContext/cause``
/// `timer`; refusing one consumes the timer and changes nothing): follow-ups of asynchronous
/// work, rehydrates, resets and travels do not go through it. It must be quick and must not block (it runs on the change path); slow
/// work belongs in a feature's asynchronous work. With several nodes on shared storage without
/// owners a change computed again after a conflict runs the chain again.
public protocol DispatchMiddleware: Sendable {
    func handle(
        _ action: JSONValue, context: DispatchContext,
        next: (JSONValue) throws(StoreError) -> PreparedChange
    ) throws(StoreError) -> PreparedChange
}

/// The middleware of a server, in registration order; each for every feature or for one.
public struct MiddlewareChain: Sendable {
    struct Entry: Sendable {
        let feature: String?
        let middleware: any DispatchMiddleware
    }

    private(set) var entries: [Entry] = []

    public init() {}

    /// Adds `middleware` after those already added: for every feature, or only `feature`'s
    /// dispatches.
    public mutating func use(_ middleware: any DispatchMiddleware, for feature: String? = nil) {
        entries.append(Entry(feature: feature, middleware: middleware))
    }

    public var isEmpty: Bool { entries.isEmpty }

    /// Adds every middleware of `other` after these, in its order.
    public mutating func append(_ other: MiddlewareChain) {
        entries += other.entries
    }

    /// Runs the middleware that apply to `context.feature`, in order, around `reducer`.
    func run(
        _ action: JSONValue, context: DispatchContext,
        reducer: (JSONValue) throws(StoreError) -> PreparedChange
    ) throws(StoreError) -> PreparedChange {
        let applicable = entries.filter { $0.feature == nil || $0.feature == context.feature }
        func step(_ index: Int, _ action: JSONValue) throws(StoreError) -> PreparedChange {
            guard index < applicable.count else { return try reducer(action) }
            return try applicable[index].middleware.handle(action, context: context) { (next) throws(StoreError) in
                try step(index + 1, next)
            }
        }
        return try step(0, action)
    }
}

/// Refuses clients' actions not on a list: `feature.type` names (`"counter.increment"`), or
/// `feature.*` for all of a feature's. Anything else a client sends is `403 forbidden` and
/// nothing is applied. A timer's action (cause `timer`) is the server's own and always passes.
/// An example of a middleware that refuses (docs/FEATURES.md, "Middleware").
public struct ActionAllowList: DispatchMiddleware {
    public let allowed: Set<String>

    public init(_ allowed: Set<String>) {
        self.allowed = allowed
    }

    public func handle(
        _ action: JSONValue, context: DispatchContext,
        next: (JSONValue) throws(StoreError) -> PreparedChange
    ) throws(StoreError) -> PreparedChange {
        guard context.cause == "dispatch" else { return try next(action) }
        let type: String
        if case .object(let fields) = action, case .string(let name)? = fields["type"] {
            type = name
        } else {
            type = ""
        }
        guard allowed.contains("\(context.feature).\(type)") || allowed.contains("\(context.feature).*") else {
            throw StoreError(
                .forbidden, "the action '\(type)' of \(context.feature) is not allowed on this server", currentVersion: context.version)
        }
        return try next(action)
    }
}
