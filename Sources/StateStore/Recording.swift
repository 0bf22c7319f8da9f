import StateJSON

/// A user flow as data: each feature's starting state, then every change in order with the
/// state it led to. `GET /v1/sessions/{id}/recording` exports one; ``replay(with:)`` runs it
/// through today's reducers and finds the first step where they disagree — how a bug report
/// becomes a regression test (`state-server replay FILE`, `StateStoreTesting`'s
/// `assertReplays`).
///
/// The document (`format: "stateserver-recording"`, `version: 1`):
///
/// ```json
/// {"format": "stateserver-recording", "version": 1, "server": "1.0.0",
///  "features": [{"name": "counter", "stateVersion": 1, "version": 0, "state": {"count": 0}}],
///  "changes": [{"seq": 1, "feature": "counter", "version": 1, "cause": "dispatch",
///               "action": {"type": "increment"}, "state": {"count": 1}, "effect": null}]}
/// ```
///
/// A feature's `version` and `state` are where its recording starts: 0 and the initial state,
/// or, when older changes were no longer kept, the version and state before its first change.
public struct Recording: Sendable, Equatable {
    public static let format = "stateserver-recording"
    public static let currentVersion = 1

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
        public let seq: Int
        public let feature: String
        public let version: Int
        /// `dispatch`, `rehydrate`, `reset` or `travel`.
        public let cause: String
        /// The action of a dispatch (public form), else nil.
        public let action: JSONValue?
        /// The state the change led to.
        public let state: JSONValue
        public let effect: JSONValue?

        /// What replays the step (``AnyStateStore/replay(cause:payload:)``): the action of a
        /// dispatch, the state of a rehydrate or travel, nothing for a reset.
        public var payload: [UInt8]? {
            if cause == "dispatch" { return action?.bytes }
            return ChangeCauseName.setsState(cause) ? state.bytes : nil
        }

        public init(seq: Int, feature: String, version: Int, cause: String, action: JSONValue?, state: JSONValue, effect: JSONValue?) {
            self.seq = seq
            self.feature = feature
            self.version = version
            self.cause = cause
            self.action = action
            self.state = state
            self.effect = effect
        }
    }

    public let server: String
    public let features: [Start]
    public let changes: [Step]

    public init(server: String, features: [Start], changes: [Step]) {
        self.server = server
        self.features = features
        self.changes = changes
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
        /// What replaying gave: the state, or the store's refusal.
        public let actual: Result<JSONValue, StoreError>

        public var description: String {
            let head = "step \(index + 1) (seq \(step.seq)), \(step.feature) version \(step.version), \(step.cause)"
                + (step.action.map { " \(String(decoding: $0.bytes, as: UTF8.self))" } ?? "")
            switch actual {
            case .failure(let error):
                return "\(head): the recording has a state, today's reducer refused: \(error)"
            case .success(let state):
                let patch = JSONPatch.diff(from: step.state.bytes, to: state.bytes) ?? []
                let operations = (JSONCoding.parse(patch)?.arrayValue ?? []).map { "  " + String(decoding: $0.bytes, as: UTF8.self) }
                return "\(head): the state differs (recorded → replayed, as JSON Patch):\n"
                    + operations.joined(separator: "\n")
                    + "\n  recorded: \(String(decoding: step.state.bytes, as: UTF8.self))"
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
        guard case .int(let version)? = root["version"], version == Self.currentVersion else {
            throw Unreadable(description: "'version' must be \(Self.currentVersion) (this server reads that version)")
        }
        guard case .array(let features)? = root["features"], case .array(let changes)? = root["changes"] else {
            throw Unreadable(description: "'features' and 'changes' must be arrays")
        }
        if let value = root["server"], value.stringValue == nil { throw Unreadable(description: "'server' must be a string") }
        let server = root["server"]?.stringValue ?? ""
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
        for (index, item) in changes.enumerated() {
            guard case .object(let c) = item, let seq = c["seq"]?.intValue, let feature = c["feature"]?.stringValue,
                let version = c["version"]?.intValue, let cause = c["cause"]?.stringValue, let state = c["state"]
            else { throw Unreadable(description: "changes[\(index)] needs seq, feature, version, cause and state") }
            guard seq >= 1, seq <= StoreVersion.max, version >= 1, version <= StoreVersion.max else {
                throw Unreadable(description: "changes[\(index)] needs seq and version from 1 to \(StoreVersion.max)")
            }
            let action = c["action"].flatMap { $0 == .null ? nil : $0 }
            let effect = c["effect"].flatMap { $0 == .null ? nil : $0 }
            steps.append(Step(seq: seq, feature: feature, version: version, cause: cause, action: action, state: state, effect: effect))
        }
        self.init(server: server, features: starts, changes: steps)
    }

    /// The document, as JSON bytes.
    public var json: [UInt8] {
        var out = JSONObjectWriter(capacity: 4096)
        out.string("format", Self.format)
        out.int("version", Self.currentVersion)
        out.string("server", server)
        var list = JSONArrayWriter()
        for start in features {
            var item = JSONObjectWriter()
            item.string("name", start.name)
            item.int("stateVersion", start.stateVersion)
            item.int("version", start.version)
            item.raw("state", start.state.bytes)
            list.append(item.finish())
        }
        out.raw("features", list.finish())
        var steps = JSONArrayWriter(capacity: 4096)
        for step in changes {
            var item = JSONObjectWriter()
            item.int("seq", step.seq)
            item.string("feature", step.feature)
            item.int("version", step.version)
            item.string("cause", step.cause)
            item.raw("action", step.action?.bytes)
            item.raw("state", step.state.bytes)
            item.raw("effect", step.effect?.bytes)
            steps.append(item.finish())
        }
        out.raw("changes", steps.finish())
        return out.finish()
    }

    // MARK: Replay

    /// Runs every step through the reducers of `registry` (no asynchronous work starts; a
    /// follow-up the recording holds is applied as the recorded action it was), comparing each
    /// resulting state with the recorded one. Returns the first divergence, or nil when every
    /// state is the same. Throws ``Unreadable`` for a feature `registry` does not have, or a
    /// starting state it cannot restore.
    public func replay(with registry: FeatureRegistry) throws(Unreadable) -> Divergence? {
        var stores: [String: any AnyStateStore] = [:]
        for start in features {
            guard let definition = registry[start.name] else {
                throw Unreadable(description: "the recording has a feature '\(start.name)' this server does not register")
            }
            do throws(StoreError) {
                stores[start.name] = try definition.restoreStore(
                    json: start.state, stateVersion: start.stateVersion, version: start.version)
            } catch {
                throw Unreadable(description: "the starting state of \(start.name) cannot be restored: \(error)")
            }
        }
        for (index, step) in changes.enumerated() {
            guard let store = stores[step.feature] else {
                throw Unreadable(description: "changes[\(index)] is for '\(step.feature)', which the recording does not start")
            }
            do throws(StoreError) {
                try store.replay(cause: step.cause, payload: step.payload)
                let (state, version) = try store.currentJSON()
                guard let replayed = JSONCoding.parse(state) else { return Divergence(index: index, step: step, actual: .failure(
                    StoreError(.encodingFailed, "the replayed state is not JSON", currentVersion: version))) }
                if replayed != step.state || version != step.version {
                    return Divergence(index: index, step: step, actual: .success(replayed))
                }
            } catch {
                return Divergence(index: index, step: step, actual: .failure(error))
            }
        }
        return nil
    }
}

extension JSONValue {
    fileprivate var stringValue: String? { if case .string(let text) = self { text } else { nil } }
    fileprivate var intValue: Int? { if case .int(let number) = self { Int(number) } else { nil } }
    fileprivate var arrayValue: [JSONValue]? { if case .array(let items) = self { items } else { nil } }
}
