import StateJSON

/// A user flow as data: each feature's starting state, then every change in order with the
/// state it led to. `GET /v1/sessions/{id}/recording` exports one; ``replay(with:)`` runs it
/// through today's reducers and finds the first step where they disagree — how a bug report
/// becomes a regression test (`state-server replay FILE`, `StateStoreTesting`'s
/// `assertReplays`).
///
/// The document (`format: "stateserver-recording"`, `version: 2`):
///
/// ```json
/// {"format": "stateserver-recording", "version": 2, "server": "1.0.0",
///  "features": [{"name": "counter", "stateVersion": 1, "version": 0, "state": {"count": 0}}],
///  "changes": [{"seq": 1, "feature": "counter", "version": 1, "cause": "dispatch",
///               "action": {"type": "increment"}, "patch": [{"op": "replace", "path": "/count", "value": 1}],
///               "effect": null}],
///  "complete": true}
/// ```
///
/// A feature's `version` and `state` are where its recording starts: 0 and the initial state,
/// or, when older changes were no longer kept, the version and state before its first change.
/// Each change carries the state it led to either as `patch`, an RFC 6902 JSON Patch from the
/// feature's previous state in the recording (its starting state, or its previous change's
/// state), or whole as `state` (where a patch would not be smaller). `complete` is `false` when
/// the export stopped early (its size cap): the changes are then the first ones, in order.
/// Version 1 documents (every change with `state`, no `complete`) are still read.
///
/// Patches are applied one step at a time, holding only each feature's latest state: a small
/// document cannot make a reader hold a large state per step.
public struct Recording: Sendable, Equatable {
    public static let format = "stateserver-recording"
    public static let currentVersion = 2
    /// The document versions this server reads.
    public static let readableVersions: ClosedRange<Int> = 1...2

    public struct Start: Sendable, Equatable {
        public let name: String
        public let stateVersion: Int
        public let version: Int
        public let state: JSONValue

        public init(name: String, stateVersion: Int, version: Int, state: JSONValue) {
            self.name = name
            self.stateVersion = stateVersion
            self.version = version
            self.state = state
        }
    }

    public struct Step: Sendable, Equatable {
        /// How a step carries the state it led to.
        public enum Content: Sendable, Equatable {
            /// The state, whole.
            case state(JSONValue)
            /// An RFC 6902 patch from the feature's previous state in the recording.
            case patch(JSONValue)
        }

        public let seq: Int
        public let feature: String
        public let version: Int
        /// `dispatch`, `rehydrate`, `reset`, `travel` or `import`.
        public let cause: String
        /// The action of a dispatch (public form), else nil.
        public let action: JSONValue?
        /// The state the change led to, whole or as a patch.
        public let content: Content
        public let effect: JSONValue?

        /// The state the step led to, from the feature's state before it.
        public func state(after previous: JSONValue) throws(JSONPatch.Failure) -> JSONValue {
            switch content {
            case .state(let state): return state
            case .patch(let patch):
                var document = previous
                try JSONPatch.apply(patch, to: &document)
                return document
            }
        }

        /// What replays the step (``AnyStateStore/replay(cause:payload:)``), given the state it
        /// led to: the action of a dispatch, the state of a rehydrate, travel or import, nothing
        /// for a reset.
        public func payload(state: JSONValue) -> [UInt8]? {
            if cause == "dispatch" || cause == "timer" { return action?.bytes }
            return ChangeCauseName.setsState(cause) ? state.bytes : nil
        }

        public init(
            seq: Int, feature: String, version: Int, cause: String, action: JSONValue?, content: Content, effect: JSONValue?
        ) {
            self.seq = seq
            self.feature = feature
            self.version = version
            self.cause = cause
            self.action = action
            self.content = content
            self.effect = effect
        }

        /// A step with its state whole.
        public init(seq: Int, feature: String, version: Int, cause: String, action: JSONValue?, state: JSONValue, effect: JSONValue?) {
            self.init(seq: seq, feature: feature, version: version, cause: cause, action: action, content: .state(state), effect: effect)
        }
    }

    public let server: String
    public let features: [Start]
    public let changes: [Step]
    /// `false` when the export stopped before the session's last change (its size cap).
    public let complete: Bool

    public init(server: String, features: [Start], changes: [Step], complete: Bool = true) {
        self.server = server
        self.features = features
        self.changes = changes
        self.complete = complete
    }

    /// A recording that cannot be read: not JSON, another format, a field missing or mistyped.
    public struct Unreadable: Error, Sendable, CustomStringConvertible {
        public let description: String

        public init(description: String) {
            self.description = description
        }
    }

    /// Where today's reducers part from the recording.
    public struct Divergence: Error, Sendable, CustomStringConvertible {
        /// The step's index in ``Recording/changes`` (0-based), and the step.
        public let index: Int
        public let step: Step
        /// The state the recording says the step led to.
        public let recorded: JSONValue
        /// What replaying gave: the state, or the store's refusal.
        public let actual: Result<JSONValue, StoreError>

        public var description: String {
            let head = "step \(index + 1) (seq \(step.seq)), \(step.feature) version \(step.version), \(step.cause)"
                + (step.action.map { " \(String(decoding: $0.bytes, as: UTF8.self))" } ?? "")
            switch actual {
            case .failure(let error):
                return "\(head): the recording has a state, today's reducer refused: \(error)"
            case .success(let state):
                let patch = JSONPatch.diff(from: recorded.bytes, to: state.bytes) ?? []
                let operations = (JSONCoding.parse(patch)?.arrayValue ?? []).map { "  " + String(decoding: $0.bytes, as: UTF8.self) }
                return "\(head): the state differs (recorded → replayed, as JSON Patch):\n"
                    + operations.joined(separator: "\n")
                    + "\n  recorded: \(String(decoding: recorded.bytes, as: UTF8.self))"
                    + "\n  replayed: \(String(decoding: state.bytes, as: UTF8.self))"
            }
        }
    }

    // MARK: JSON

    public init(json: [UInt8]) throws(Unreadable) {
        guard case .object(let root)? = JSONCoding.parse(json) else { throw Unreadable(description: "the recording is not a JSON object") }
        guard root["format"] == .string(Self.format) else {
            throw Unreadable(description: "'format' must be \"\(Self.format)\"")
        }
        guard case .int(let documentVersion)? = root["version"], Self.readableVersions.contains(Int(documentVersion)) else {
            throw Unreadable(description: "'version' must be 1 or 2 (the versions this server reads)")
        }
        guard case .array(let features)? = root["features"], case .array(let changes)? = root["changes"] else {
            throw Unreadable(description: "'features' and 'changes' must be arrays")
        }
        if let value = root["server"], value.stringValue == nil { throw Unreadable(description: "'server' must be a string") }
        let server = root["server"]?.stringValue ?? ""
        var complete = true
        if let value = root["complete"] {
            guard case .bool(let flag) = value else { throw Unreadable(description: "'complete' must be true or false") }
            complete = flag
        }
        var starts: [Start] = []
        for (index, item) in features.enumerated() {
            guard case .object(let f) = item, let name = f["name"]?.stringValue, let stateVersion = f["stateVersion"]?.intValue,
                let version = f["version"]?.intValue, StoreVersion.isValid(version), let state = f["state"]
            else {
                throw Unreadable(
                    description: "features[\(index)] needs name, stateVersion, version (from 0 to \(StoreVersion.max)) and state")
            }
            starts.append(Start(name: name, stateVersion: stateVersion, version: version, state: state))
        }
        var steps: [Step] = []
        steps.reserveCapacity(changes.count)
        for (index, item) in changes.enumerated() {
            guard case .object(let c) = item, let seq = c["seq"]?.intValue, let feature = c["feature"]?.stringValue,
                let version = c["version"]?.intValue, let cause = c["cause"]?.stringValue
            else { throw Unreadable(description: "changes[\(index)] needs seq, feature, version, cause, and state or patch") }
            guard seq >= 1, seq <= StoreVersion.max, version >= 1, version <= StoreVersion.max else {
                throw Unreadable(description: "changes[\(index)] needs seq and version from 1 to \(StoreVersion.max)")
            }
            let content: Step.Content
            switch (c["state"], c["patch"]) {
            case (let state?, nil): content = .state(state)
            case (nil, let patch?) where documentVersion >= 2:
                guard case .array = patch else { throw Unreadable(description: "changes[\(index)].patch must be an array (RFC 6902)") }
                content = .patch(patch)
            default:
                throw Unreadable(description: "changes[\(index)] needs one of state and patch")
            }
            var action = c["action"].flatMap { $0 == .null ? nil : $0 }
            // A timer's change keeps its timer with its action, as the journal does.
            if cause == "timer", let fired = action, case .object(var timer)? = c["timer"] {
                timer["action"] = fired
                action = .object(timer)
            }
            let effect = c["effect"].flatMap { $0 == .null ? nil : $0 }
            steps.append(Step(seq: seq, feature: feature, version: version, cause: cause, action: action, content: content, effect: effect))
        }
        self.init(server: server, features: starts, changes: steps, complete: complete)
    }

    /// The document, as JSON bytes (the current version).
    public var json: [UInt8] {
        var out = Self.head(server: server, features: features)
        for (index, step) in changes.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            let (key, bytes) = switch step.content {
                case .state(let state): ("state", state.bytes)
                case .patch(let patch): ("patch", patch.bytes)
                }
            out += Self.step(
                seq: step.seq, feature: step.feature, version: step.version, cause: step.cause, action: step.action?.bytes,
                key: key, content: bytes, effect: step.effect?.bytes)
        }
        return out + Self.tail(complete: complete)
    }

    // MARK: Writing a document in pieces (an export streams it)

    /// The document up to its first change: `{"format", "version", "server", "features", "changes": [`.
    public static func head(server: String, features: [Start]) -> [UInt8] {
        var list = JSONArrayWriter()
        for start in features {
            var item = JSONObjectWriter()
            item.string("name", start.name)
            item.int("stateVersion", start.stateVersion)
            item.int("version", start.version)
            item.raw("state", start.state.bytes)
            list.append(item.finish())
        }
        var out = JSONObjectWriter(capacity: 4096)
        out.string("format", format)
        out.int("version", currentVersion)
        out.string("server", server)
        out.raw("features", list.finish())
        out.raw("changes", [UInt8(ascii: "[")])
        // The object stays open: the changes, then ``tail(complete:)``, close it.
        return out.bytes
    }

    /// One change, from its parts as JSON bytes; `key` is `state` or `patch`.
    public static func step(
        seq: Int, feature: String, version: Int, cause: String, action: [UInt8]?, key: String, content: [UInt8],
        effect: [UInt8]?
    ) -> [UInt8] {
        ChangeJSON.object(
            seq: seq, feature: feature, version: version, cause: cause, action: action,
            content: key == "patch" ? .patch(content) : .state(content), effect: effect)
    }

    /// The document after its last change: `], "complete": ...}`.
    public static func tail(complete: Bool) -> [UInt8] {
        Array("],\"complete\":\(complete)}".utf8)
    }

    /// Every step with the state it led to, in order: patches are applied to the feature's
    /// previous state, one step at a time. Throws ``Unreadable`` for a step of a feature the
    /// recording does not start, a patch that does not apply (``JSONPatch/apply(_:to:maxDepth:maxCopiedBytes:)``
    /// bounds each), or a state larger than its feature's entry in `maxStateBytes`: a patch can
    /// only add its own size and its bounded copies to a state, but a document of many steps
    /// could add them up.
    public func forEachState(
        maxStateBytes: [String: Int] = [:], _ body: (Int, Step, JSONValue) throws(Unreadable) -> Void
    ) throws(Unreadable) {
        var current: [String: JSONValue] = [:]
        for start in features { current[start.name] = start.state }
        for (index, step) in changes.enumerated() {
            guard let previous = current[step.feature] else {
                throw Unreadable(description: "changes[\(index)] is for '\(step.feature)', which the recording does not start")
            }
            let state: JSONValue
            do throws(JSONPatch.Failure) {
                state = try step.state(after: previous)
            } catch {
                throw Unreadable(description: "changes[\(index)].patch does not apply to the state before it: \(error)")
            }
            if let limit = maxStateBytes[step.feature], state.encodedCount(atMost: limit) == nil {
                throw Unreadable(
                    description: "changes[\(index)] leads to a state of \(step.feature) larger than its limit of \(limit) bytes")
            }
            current[step.feature] = state
            try body(index, step, state)
        }
    }

    /// The state each step led to, in order (every state held at once: for tests and small
    /// recordings).
    public func states() throws(Unreadable) -> [JSONValue] {
        var states: [JSONValue] = []
        try forEachState { _, _, state throws(Unreadable) in states.append(state) }
        return states
    }

    // MARK: Replay

    /// Runs every step through the reducers of `registry` (no asynchronous work starts; a
    /// follow-up the recording holds is applied as the recorded action it was), comparing each
    /// resulting state with the recorded one. Returns the first divergence, or nil when every
    /// state is the same. Throws ``Unreadable`` for a feature `registry` does not have, a
    /// starting state it cannot restore, or a state larger than its feature's
    /// ``Feature/maxStateBytes`` (one the server would not import).
    public func replay(with registry: FeatureRegistry) throws(Unreadable) -> Divergence? {
        try upgraded(with: registry).replayAsIs(with: registry)
    }

    /// The recording in the state shapes of `registry`'s features: a feature recorded at an
    /// older ``Feature/stateVersion`` gets its starting state and the state of each of its steps
    /// migrated (``Feature/migrate(_:from:)``; its patches, which apply to the old shape, become
    /// whole states). Replaying and importing upgrade first, so a recording made before a
    /// feature's state changed shape still replays. Throws ``Unreadable`` when a state has no
    /// way to today's shape (a recording of a newer server, or a migration that refuses).
    public func upgraded(with registry: FeatureRegistry) throws(Unreadable) -> Recording {
        var older: [String: (definition: AnyFeature, from: Int)] = [:]
        for start in features {
            if let definition = registry[start.name], definition.stateVersion != start.stateVersion {
                older[start.name] = (definition, start.stateVersion)
            }
        }
        guard !older.isEmpty else { return self }
        func migrate(_ state: JSONValue, _ name: String, _ what: String) throws(Unreadable) -> JSONValue {
            guard let (definition, from) = older[name] else { return state }
            do throws(ActionRejected) {
                return try definition.migrated(state, from: from)
            } catch {
                throw Unreadable(description: "\(what) of \(name) (state version \(from)) cannot be brought to state version \(definition.stateVersion): \(error.message)")
            }
        }
        var starts: [Start] = []
        for start in features {
            guard let (definition, _) = older[start.name] else {
                starts.append(start)
                continue
            }
            starts.append(Start(
                name: start.name, stateVersion: definition.stateVersion, version: start.version,
                state: try migrate(start.state, start.name, "the starting state")))
        }
        var steps: [Step] = []
        steps.reserveCapacity(changes.count)
        try forEachState { index, step, state throws(Unreadable) in
            guard older[step.feature] != nil else {
                steps.append(step)
                return
            }
            steps.append(Step(
                seq: step.seq, feature: step.feature, version: step.version, cause: step.cause, action: step.action,
                state: try migrate(state, step.feature, "changes[\(index)]"), effect: step.effect))
        }
        return Recording(server: server, features: starts, changes: steps, complete: complete)
    }

    private func replayAsIs(with registry: FeatureRegistry) throws(Unreadable) -> Divergence? {
        var stores: [String: any AnyStateStore] = [:]
        var maxStateBytes: [String: Int] = [:]
        for start in features {
            guard let definition = registry[start.name] else {
                throw Unreadable(description: "the recording has a feature '\(start.name)' this server does not register")
            }
            maxStateBytes[start.name] = definition.maxStateBytes
            do throws(StoreError) {
                stores[start.name] = try definition.restoreStore(
                    json: start.state, stateVersion: start.stateVersion, version: start.version)
            } catch {
                throw Unreadable(description: "the starting state of \(start.name) cannot be restored: \(error)")
            }
        }
        var divergence: Divergence?
        try forEachState(maxStateBytes: maxStateBytes) { index, step, recorded throws(Unreadable) in
            guard divergence == nil, let store = stores[step.feature] else { return }
            do throws(StoreError) {
                try store.replay(cause: step.cause, payload: step.payload(state: recorded))
                let (state, version) = try store.currentJSON()
                guard let replayed = JSONCoding.parse(state) else {
                    divergence = Divergence(index: index, step: step, recorded: recorded, actual: .failure(
                        StoreError(.encodingFailed, "the replayed state is not JSON", currentVersion: version)))
                    return
                }
                if replayed != recorded || version != step.version {
                    divergence = Divergence(index: index, step: step, recorded: recorded, actual: .success(replayed))
                }
            } catch {
                divergence = Divergence(index: index, step: step, recorded: recorded, actual: .failure(error))
            }
        }
        return divergence
    }
}

extension JSONValue {
    fileprivate var stringValue: String? { if case .string(let text) = self { text } else { nil } }
    fileprivate var intValue: Int? { if case .int(let number) = self { Int(number) } else { nil } }
    fileprivate var arrayValue: [JSONValue]? { if case .array(let items) = self { items } else { nil } }
}
