import Foundation

/// One applied change as JSON bytes, encoded once and shared by the response to the caller
/// and by every observer.
public struct EncodedChange: Sendable {
    public let feature: String
    public let version: Int
    /// `dispatch`, `rehydrate`, `reset`, `travel`, `import` or `timer`.
    public let cause: String
    /// The action as a tagged object, for dispatches, in its public form
    /// (``Feature/publicAction(_:)``: secrets such as passwords masked); for a timer, the timer
    /// that fired, `{"id", "action", "due", "scheduledAt"}` (``PendingTimer/json(feature:)``).
    public let action: [UInt8]?
    public let state: [UInt8]
    /// The one-shot effect as a tagged object, if the change produced one.
    public let effect: [UInt8]?
    /// What the change does to its store's pending timers (nil: nothing). Storage keeps them
    /// in the same commit as the change.
    public let timers: TimerChanges?

    init<State: Encodable, Action: Encodable, Effect: Encodable>(
        feature: String, change: StoreChange<State, Action, Effect>, currentVersion: Int,
        publicAction: (Action) -> Action = { $0 }, firing: PendingTimer? = nil, timers: TimerChanges? = nil
    ) throws(StoreError) {
        self.feature = feature
        self.version = change.version
        self.cause = change.cause.name
        self.timers = timers
        do {
            state = try JSONCoding.encode(change.state)
            switch change.cause {
            case .dispatch(let action): self.action = try Self.tagged(publicAction(action))
            case .timer(let id, let action):
                let visible = try Self.tagged(publicAction(action))
                let due = firing?.due ?? 0
                let scheduledAt = firing?.scheduledAt ?? 0
                self.action = PendingTimer(id: id, action: [], publicAction: visible, due: due, scheduledAt: scheduledAt).json()
            default: self.action = nil
            }
            effect = try change.effect.map(Self.tagged)
        } catch {
            throw StoreError(
                .encodingFailed, "the change could not be encoded as JSON: \(error)",
                currentVersion: currentVersion)
        }
    }

    /// A change from its parts as journaled (a change recorded by another process).
    public init(
        feature: String, version: Int, cause: String, action: [UInt8]?, state: [UInt8], effect: [UInt8]?,
        timers: TimerChanges? = nil
    ) {
        self.timers = timers
        self.feature = feature
        self.version = version
        self.cause = cause
        self.action = action
        self.state = state
        self.effect = effect
    }

    static func tagged<T: Encodable>(_ value: T) throws -> [UInt8] {
        try JSONValueEncoder.encodeTaggedToBytes(value)
    }
}

/// A store seen through JSON, whatever its feature's types: what a server needs to host any
/// registered feature. `DefaultStateStore` conforms.
public protocol AnyStateStore: AnyObject, Sendable {
    var featureName: String { get }
    /// The current state as JSON bytes and its version, read together.
    func currentJSON() throws(StoreError) -> (state: [UInt8], version: Int)
    /// Decodes a tagged action object and applies it.
    func dispatch(json action: JSONValue, ifVersion: Int?) throws(StoreError) -> EncodedChange
    /// A client's rehydrate (`PUT`): decodes a state, asks the feature's
    /// ``Feature/clientRehydrate(_:current:)`` what of it a client may set, validates and applies
    /// it. Cancels all running work. The server's own restores use ``replay(cause:payload:)``
    /// and ``AnyFeature/restoreStore(state:stateVersion:version:onFollowUpRejected:)`` instead.
    func rehydrate(json state: JSONValue, ifVersion: Int?) throws(StoreError) -> EncodedChange
    func resetJSON(ifVersion: Int?) throws(StoreError) -> EncodedChange
    func addJSONObserver(_ observer: @escaping @Sendable (EncodedChange) -> Void) -> ObserverToken
    func removeObserver(_ token: ObserverToken)

    // MARK: Two-step changes, for owners that store a change before applying it

    func prepareDispatch(json action: JSONValue, ifVersion: Int?) throws(StoreError) -> PreparedChange
    /// A client's rehydrate, prepared (see ``rehydrate(json:ifVersion:)``).
    func prepareRehydrate(json state: JSONValue, ifVersion: Int?) throws(StoreError) -> PreparedChange
    func prepareReset(ifVersion: Int?) throws(StoreError) -> PreparedChange
    /// Time travel, prepared: `state` (the store's state at an earlier version) set again as a
    /// new change with cause `travel`, held to the rules of a client's rehydrate. Cancels all
    /// running work.
    func prepareTravel(json state: JSONValue, ifVersion: Int?) throws(StoreError) -> PreparedChange
    /// Applies a prepared change (observers are told, declared work starts when `startWork`).
    /// Returns `false`, applying nothing, when the store is no longer at the change's base
    /// version.
    @discardableResult
    func commit(_ prepared: PreparedChange, startWork: Bool) -> Bool
    /// Forgets the changes held ahead (``PreparedChange/advance()``): the next change is
    /// computed on the committed state again. After a failed commit.
    func dropAhead()
    /// Sends follow-up actions of asynchronous work through `route` instead of applying them
    /// directly. The `prepare` handed to the route throws `.workCancelled` when the work was
    /// cancelled meanwhile (drop it silently), and a prepared follow-up commits only while its
    /// work is live.
    func routeFollowUps(_ route: @escaping FollowUpRoute)
    /// Re-applies an action, state or reset through the reducer with side effects off (a
    /// recording replayed; the server's own journal uses ``applyRecorded(version:cause:action:state:effect:)``).
    func replay(cause: String, payload: [UInt8]?) throws(StoreError)
    /// ``replay(cause:payload:)``, prepared: for an owner that journals it first (a recording
    /// imported as recorded into a new session). With `enforceCeiling`, a state over the
    /// feature's ``Feature/maxStateBytes`` is refused (history already accepted is not held to
    /// today's ceiling; a recording from outside is).
    func prepareReplay(cause: String, payload: [UInt8]?, enforceCeiling: Bool) throws(StoreError) -> PreparedChange
    /// Whether a client may send `action`: the feature's ``Feature/acceptsFromClient(_:)``. An
    /// action that does not decode counts as a client's (its dispatch then says what is wrong).
    func acceptsFromClient(json action: JSONValue) -> Bool
    /// A recording's starting state set in the session it is imported into, as a change of
    /// cause `import` (cancels running work). Held to a client's rehydrate rules
    /// (``Feature/clientRehydrate(_:current:)``, ``Feature/validated(_:)``, the size ceiling);
    /// `asRecorded` (the admin's import) skips the client rule only.
    func prepareImport(json state: JSONValue, asRecorded: Bool) throws(StoreError) -> PreparedChange
    /// Applies a journaled change as recorded — its state as stored (not recomputed by the
    /// reducer), its cause, public action and effect — at `version`, which must be the store's
    /// next; observers see exactly the recorded change. Side effects are off: the process that
    /// made the change runs its work. Throws `.versionConflict` when the store is elsewhere.
    /// Returns the change as observers saw it.
    @discardableResult
    func applyRecorded(version: Int, cause: String, action: [UInt8]?, state: [UInt8], effect: [UInt8]?) throws(StoreError) -> EncodedChange
    /// The change that settles a state left waiting by work lost in a restart
    /// (``Feature/recoveryAction(for:)``), or nil.
    func prepareRecovery() throws(StoreError) -> PreparedChange?
    /// Whether declared asynchronous work is still live (started, not returned, not cancelled).
    var hasRunningWork: Bool { get }

    // MARK: Timers

    /// The pending timers, due first.
    var pendingTimers: [PendingTimer] { get }
    /// Sets the pending timers as storage kept them, replacing any the store holds.
    func restoreTimers(_ timers: [PendingTimer])
    /// Fires the pending timer `id` due at `due`, prepared (a change of cause `timer`); nil when
    /// it is no longer pending. `action` replaces its action; `refused` consumes it keeping the
    /// state (a middleware refused it).
    func prepareTimer(id: String, due: Int64, action: JSONValue?, refused: Bool) throws(StoreError) -> PreparedChange?
    /// Cancels all running work without a change (for an owner discarding the store, such as
    /// a deleted session); what it sends afterwards is dropped.
    func cancelAllWork()
}

extension DefaultStateStore: AnyStateStore {
    public var featureName: String { feature.name }

    public func currentJSON() throws(StoreError) -> (state: [UInt8], version: Int) {
        let known = published.withLock { $0 }
        if let state = known.state { return (state, known.version) }
        return try inner.withLock { (inner: inout Inner) throws(StoreError) -> ([UInt8], Int) in
            do {
                let bytes = try JSONCoding.encode(inner.state)
                let version = inner.version
                published.withLock { if $0.version == version { $0.state = bytes } }
                return (bytes, version)
            } catch {
                throw StoreError(.encodingFailed, "the state could not be encoded: \(error)", currentVersion: inner.version)
            }
        }
    }

    public func dispatch(json action: JSONValue, ifVersion: Int?) throws(StoreError) -> EncodedChange {
        try dispatch(try clientAction(action, ifVersion: ifVersion), ifVersion: ifVersion, from: nil).encoded
    }

    public func rehydrate(json state: JSONValue, ifVersion: Int?) throws(StoreError) -> EncodedChange {
        try apply(ifVersion: ifVersion, clientRehydrating(try decodeState(state))).encoded
    }

    public func resetJSON(ifVersion: Int?) throws(StoreError) -> EncodedChange {
        try apply(ifVersion: ifVersion) { _, _ in (feature.initialState, nil, .reset) }.encoded
    }

    public func prepareDispatch(json action: JSONValue, ifVersion: Int?) throws(StoreError) -> PreparedChange {
        try prepare(try clientAction(action, ifVersion: ifVersion), ifVersion: ifVersion)
    }

    public func prepareRecovery() throws(StoreError) -> PreparedChange? {
        guard let action = feature.recoveryAction(for: state) else { return nil }
        return try prepare(action, ifVersion: nil)
    }

    /// A client's action: the version precondition first (a stale `If-Match` is a conflict
    /// whatever the body), then decoding, then the feature's client rule.
    private func clientAction(_ json: JSONValue, ifVersion: Int?) throws(StoreError) -> F.Action {
        // Judged here, before decoding, only so that a stale `If-Match` is a conflict whatever
        // the body; the judgement that counts is made under the lock when the change is computed.
        let current = version
        if let ifVersion, ifVersion != current {
            throw StoreError(.versionConflict, "the store is at version \(current), not \(ifVersion)", currentVersion: current)
        }
        // The fields the decoder asked for are the case's: the others are unknown (found in
        // the one decoding, without encoding the action again). Only an action with fields.
        let asked: AskedFields? =
            if !feature.ignoresUnknownActionFields, case .object(let fields) = json, fields.count > 1 { AskedFields() } else { nil }
        let action = try Self.decodeAction(json, version: current, asking: asked)
        if let asked, let unknown = Self.unknownFields(in: json, asked: asked.names) {
            let type: String = if case .string(let name)? = json["type"] { name } else { "this action" }
            let names = unknown.map { "'\($0)'" }.joined(separator: ", ")
            throw StoreError(
                .invalidAction, "the action '\(type)' has no field\(unknown.count == 1 ? "" : "s") \(names)",
                currentVersion: current)
        }
        guard feature.acceptsFromClient(action) else {
            let type: String = if case .string(let name)? = json["type"] { name } else { "this action" }
            throw StoreError(
                .actionRejected, "the action '\(type)' is sent by the server only, not by clients", currentVersion: current)
        }
        return action
    }

    public func prepareRehydrate(json state: JSONValue, ifVersion: Int?) throws(StoreError) -> PreparedChange {
        try prepare(ifVersion: ifVersion, clientRehydrating(try decodeState(state)))
    }

    public func prepareTravel(json state: JSONValue, ifVersion: Int?) throws(StoreError) -> PreparedChange {
        try prepare(ifVersion: ifVersion, clientRehydrating(try decodeState(state), cause: .travel))
    }

    public func prepareReset(ifVersion: Int?) throws(StoreError) -> PreparedChange {
        try prepare(ifVersion: ifVersion) { _, _ in (feature.initialState, nil, .reset) }
    }

    @discardableResult
    public func commit(_ prepared: PreparedChange, startWork: Bool) -> Bool {
        prepared.apply(startWork)
    }

    public func dropAhead() {
        inner.withLock { inner in
            inner.ahead = nil
            inner.aheadVersion = 0
            inner.aheadTimers = nil
        }
    }

    public func routeFollowUps(_ route: @escaping FollowUpRoute) {
        followUpRoute.withLock { $0 = route }
    }

    public func replay(cause: String, payload: [UInt8]?) throws(StoreError) {
        commit(try prepareReplay(cause: cause, payload: payload, enforceCeiling: false), startWork: false)
    }

    public func prepareReplay(cause: String, payload: [UInt8]?, enforceCeiling: Bool) throws(StoreError) -> PreparedChange {
        let prepared: PreparedChange
        switch cause {
        case "dispatch":
            guard let payload, let json = JSONCoding.parse(payload) else {
                throw StoreError(.invalidAction, "a journaled action is not JSON", currentVersion: version)
            }
            // Journaled actions include the server's own (follow-ups): no client rule here.
            prepared = try prepare(
                try Self.decodeAction(json, version: version), ifVersion: nil, from: nil, enforceCeiling: enforceCeiling)
        case _ where ChangeCauseName.setsState(cause):
            guard let payload, let json = JSONCoding.parse(payload) else {
                throw StoreError(.invalidState, "a journaled state is not JSON", currentVersion: version)
            }
            // The journaled state is what was applied (after the client rule): restore it as is.
            let decoded = try decodeState(json)
            let replayed: ChangeCause<F.Action> = cause == "travel" ? .travel : cause == "import" ? .import : .rehydrate
            prepared = try prepare(ifVersion: nil, enforceCeiling: enforceCeiling) { _, version throws(StoreError) in
                (try validated(decoded, version: version), nil, replayed)
            }
        case "reset":
            prepared = try prepare(ifVersion: nil, enforceCeiling: enforceCeiling) { _, _ in (feature.initialState, nil, .reset) }
        case "timer":
            prepared = try prepareTimerReplay(payload, enforceCeiling: enforceCeiling)
        default:
            throw StoreError(.invalidAction, "unknown journaled cause '\(cause)'", currentVersion: version)
        }
        return prepared
    }

    public func acceptsFromClient(json action: JSONValue) -> Bool {
        guard let decoded = try? Self.decodeAction(action, version: 0) else { return true }
        return feature.acceptsFromClient(decoded)
    }

    public func prepareImport(json state: JSONValue, asRecorded: Bool) throws(StoreError) -> PreparedChange {
        let decoded = try decodeState(state)
        if asRecorded {
            return try prepare(ifVersion: nil) { _, version throws(StoreError) in
                (try validated(decoded, version: version), nil, .import)
            }
        }
        return try prepare(ifVersion: nil, clientRehydrating(decoded, cause: .import))
    }

    @discardableResult
    public func applyRecorded(
        version: Int, cause: String, action: [UInt8]?, state stateBytes: [UInt8], effect: [UInt8]?
    ) throws(StoreError) -> EncodedChange {
        let current = self.version
        guard let json = JSONCoding.parse(stateBytes) else {
            throw StoreError(.invalidState, "a journaled state is not JSON", currentVersion: current)
        }
        let decoded = try decodeState(json)
        let changeCause: ChangeCause<F.Action>
        switch cause {
        case "dispatch":
            guard let action, let actionJSON = JSONCoding.parse(action) else {
                throw StoreError(.invalidAction, "a journaled action is not JSON", currentVersion: current)
            }
            changeCause = .dispatch(try Self.decodeAction(actionJSON, version: current))
        case "timer":
            guard let action, let parts = PendingTimer.parse(action) else {
                throw StoreError(.invalidAction, "a journaled timer is not JSON", currentVersion: current)
            }
            changeCause = .timer(id: parts.id, action: try Self.decodeAction(parts.action, version: current))
        case "rehydrate": changeCause = .rehydrate
        case "travel": changeCause = .travel
        case "import": changeCause = .import
        case "reset": changeCause = .reset
        default:
            throw StoreError(.invalidAction, "unknown journaled cause '\(cause)'", currentVersion: current)
        }
        let typedEffect: F.Effect? = effect.flatMap { bytes in
            guard let value = JSONCoding.parse(bytes), let untagged = TaggedJSON.untag(value)?.untagged else { return nil }
            return try? JSONCoding.decode(F.Effect.self, from: untagged)
        }
        let encoded = EncodedChange(
            feature: feature.name, version: version, cause: cause, action: action, state: stateBytes, effect: effect)
        let (applied, cancelled) = inner.withLock { inner -> (Bool, [Task<Void, Never>]) in
            guard inner.version == version - 1 else { return (false, []) }
            let change = Change(version: version, cause: changeCause, state: decoded, effect: typedEffect)
            return (true, install(&inner, change, encoded, declared: Declarations(), startWork: false))
        }
        for task in cancelled { task.cancel() }
        guard applied else {
            throw StoreError(.versionConflict, "the store is not at version \(version - 1)", currentVersion: self.version)
        }
        return encoded
    }

    func decodeState(_ state: JSONValue) throws(StoreError) -> F.State {
        do {
            return try JSONCoding.decode(F.State.self, from: state)
        } catch {
            throw StoreError(
                .invalidState, "the state does not decode as \(feature.name)'s state: \(DecodingErrorText.describe(error))",
                currentVersion: version)
        }
    }

    /// The top-level fields of a client's action that its case does not have (sorted), or nil:
    /// those its decoder did not ask for (`asked`), except `type` and a `null` one (an optional
    /// left empty).
    static func unknownFields(in json: JSONValue, asked: Set<String>) -> [String]? {
        guard case .object(let fields) = json else { return nil }
        let unknown = fields.filter { key, value in
            if key == "type" || asked.contains(key) { return false }
            if case .null = value { return false }
            return true
        }.keys.sorted()
        return unknown.isEmpty ? nil : unknown
    }

    /// Decodes a tagged action (`{"type": "set", "value": 3}`) as the feature's `Action`, with a
    /// message naming the field at fault.
    static func decodeAction(_ json: JSONValue, version: Int, asking: AskedFields? = nil) throws(StoreError) -> F.Action {
        guard case .object(let fields) = json else {
            throw StoreError(.invalidAction, "the action must be a JSON object, not \(json.typeName)", currentVersion: version)
        }
        guard let typeValue = fields["type"] else {
            throw StoreError(.invalidAction, "the action is missing the field 'type'", currentVersion: version)
        }
        guard case .string(let type) = typeValue else {
            throw StoreError(
                .invalidAction, "the action's field 'type' must be a string, not \(typeValue.typeName)",
                currentVersion: version)
        }
        do {
            return try JSONValueDecoder.decodeTagged(F.Action.self, fields: fields, tag: type, asking: asking)
        } catch let error as DecodingError {
            throw StoreError(
                .invalidAction, DecodingErrorText.action(type: type, error, fields: fields, actionType: F.Action.self), currentVersion: version)
        } catch {
            throw StoreError(.invalidAction, "the action '\(type)' does not decode: \(error)", currentVersion: version)
        }
    }
}

/// Human sentences for `DecodingError`s, naming the field at fault.
enum DecodingErrorText {
    static func path(_ keys: [any CodingKey]) -> String {
        keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
            .replacingOccurrences(of: ".[", with: "[")
    }

    /// For an action decoded from `{type: {...fields}}`: the first path element is the type.
    /// An unknown type fails at the top level (empty path). Some decoders report a bad number
    /// (1.5 or 1e30 for an `Int`) without the field's key; then the non-integer numbers of the
    /// action are named as the suspects.
    static func action(type: String, _ error: DecodingError, fields: [String: JSONValue], actionType: Any.Type) -> String {
        func field(_ keys: [any CodingKey]) -> String { path(Array(keys.dropFirst())) }
        let context: DecodingError.Context
        var missingKey: (any CodingKey)?
        switch error {
        case .keyNotFound(let key, let c): context = c; missingKey = key
        case .typeMismatch(_, let c), .valueNotFound(_, let c), .dataCorrupted(let c): context = c
        @unknown default: return "the action '\(type)' does not decode"
        }
        // The synthesized enum decoder reports an unknown case as a type mismatch of the enum
        // itself at the top level.
        if case .typeMismatch(let expected, _) = error, context.codingPath.isEmpty, expected == actionType {
            return "unknown action type '\(type)'"
        }
        if let missingKey {
            return "the action '\(type)' is missing the field '\(field(context.codingPath + [missingKey]))'"
        }
        if context.codingPath.count <= 1 {
            let suspects = fields.filter { if case .double = $0.value { true } else { false } }.keys.sorted()
            if !suspects.isEmpty {
                let names = suspects.map { "'\($0)'" }.joined(separator: ", ")
                let fractional = suspects.allSatisfy { fields[$0].map(isFractional) ?? false }
                return "the field \(names) of action '\(type)' must be a whole number"
                    + (fractional ? "" : " that fits in 64 bits")
            }
            return "the action '\(type)' has an invalid field: \(context.debugDescription)"
        }
        // An integer field given a number with a fraction (1.5): say so, not "does not fit".
        if case .dataCorrupted = error, context.codingPath.count == 2,
            let value = fields[context.codingPath[1].stringValue], case .double = value
        {
            let field = field(context.codingPath)
            return isFractional(value)
                ? "the field '\(field)' of action '\(type)' must be a whole number"
                : "the field '\(field)' of action '\(type)' must be a whole number that fits in 64 bits"
        }
        switch error {
        case .typeMismatch(let expected, _):
            return "the field '\(field(context.codingPath))' of action '\(type)' must be \(typeName(expected))"
        case .valueNotFound(let expected, _):
            return "the field '\(field(context.codingPath))' of action '\(type)' must be \(typeName(expected)), not null"
        default:
            return "the field '\(field(context.codingPath))' of action '\(type)' is invalid: \(context.debugDescription)"
        }
    }

    /// Whether `value` is a number with a fractional part (1.5, not 2.0 or 1e30).
    static func isFractional(_ value: JSONValue) -> Bool {
        if case .double(let double) = value { return double.isFinite && double.rounded(.towardZero) != double }
        return false
    }

    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        switch error {
        case .keyNotFound(let key, let context):
            return "missing field '\(path(context.codingPath + [key]))'"
        case .typeMismatch(let expected, let context):
            return "field '\(path(context.codingPath))' must be \(typeName(expected))"
        case .valueNotFound(let expected, let context):
            return "field '\(path(context.codingPath))' must be \(typeName(expected)), not null"
        case .dataCorrupted(let context):
            return "field '\(path(context.codingPath))' is invalid: \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }

    static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "a boolean"
        case is Int.Type, is Int64.Type, is Int32.Type, is UInt.Type, is UInt64.Type: "an integer"
        case is Double.Type, is Float.Type: "a number"
        default: "of type \(type)"
        }
    }
}
