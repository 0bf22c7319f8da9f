import StatePersistence
import StateStore

/// What one credential may do on one session: a scope (observe ⊂ dispatch ⊂ admin), the
/// features it reaches, the action types it may dispatch, and until when.
///
/// The session's owner token holds ``owner`` (everything, forever). A token minted with
/// `POST /v1/sessions/{id}/tokens` holds what it was minted with, never more than the token that
/// minted it (``covers(_:)``). A JWT from the app's backend holds what its claims say.
public struct Grant: Sendable, Equatable {
    public enum Scope: Int, Sendable, Comparable, CaseIterable {
        /// Read states, history and the recording, and stream events.
        case observe = 1
        /// Also dispatch actions.
        case dispatch = 2
        /// Also set (rehydrate), reset and travel states, mint, list and revoke tokens, delete
        /// the session.
        case admin = 3

        public init?(name: String) {
            guard let scope = Self.allCases.first(where: { $0.name == name }) else { return nil }
            self = scope
        }

        public var name: String {
            switch self {
            case .observe: "observe"
            case .dispatch: "dispatch"
            case .admin: "admin"
            }
        }

        public static func < (a: Scope, b: Scope) -> Bool { a.rawValue < b.rawValue }
    }

    public var scope: Scope
    /// The features it reaches; nil: every feature.
    public var features: Set<String>?
    /// Per feature, the action types it may dispatch; a feature not named here: any type.
    public var actions: [String: Set<String>]
    /// Milliseconds since 1970 after which it is refused; nil: never.
    public var expiresAt: Int64?
    /// The minted token's id (nil: the owner token, a JWT, the server's admin).
    public var tokenID: String?
    /// The id of the minted token that minted this one (nil: minted by the owner token or a JWT).
    public var parent: String?
    /// Who holds it: a JWT's `sub`, or (a minted token) its minter's subject. For the audit
    /// log and presence.
    public var subject: String?

    public init(
        scope: Scope, features: Set<String>? = nil, actions: [String: Set<String>] = [:], expiresAt: Int64? = nil,
        tokenID: String? = nil, parent: String? = nil, subject: String? = nil
    ) {
        self.scope = scope
        self.features = features
        self.actions = actions
        self.expiresAt = expiresAt
        self.tokenID = tokenID
        self.parent = parent
        self.subject = subject
    }

    /// The session owner's token: everything, forever.
    public static let owner = Grant(scope: .admin)

    /// Whether it reaches the whole session: every feature, every action type. What spans the
    /// session (deleting it, listing every token) needs such a grant, besides scope `admin`.
    public var spansSession: Bool {
        features == nil && actions.isEmpty
    }

    public func reaches(feature: String) -> Bool {
        features?.contains(feature) ?? true
    }

    /// Whether it may dispatch an action of `type` to `feature` (scope aside).
    public func allows(action type: String, in feature: String) -> Bool {
        guard reaches(feature: feature) else { return false }
        guard let types = actions[feature] else { return true }
        return types.contains(type)
    }

    public func isExpired(at now: Int64) -> Bool {
        guard let expiresAt else { return false }
        return now >= expiresAt
    }

    /// Whether `other` is no wider than this one: scope, features, action types and expiry.
    public func covers(_ other: Grant) -> Bool {
        widening(other) == nil
    }

    /// Why `other` is wider than this one, for a `403`; nil when it is not (``covers(_:)``).
    public func widening(_ other: Grant) -> String? {
        if other.scope > scope { return "scope '\(other.scope.name)' is wider than this token's '\(scope.name)'" }
        if let features {
            guard let theirs = other.features else {
                return "this token reaches only the features \(Self.list(features)); name some of them in 'features'"
            }
            if let outside = theirs.subtracting(features).sorted().first {
                return "this token does not reach the feature '\(outside)'"
            }
        }
        for (feature, mine) in actions.sorted(by: { $0.key < $1.key }) where other.reaches(feature: feature) {
            guard let theirs = other.actions[feature] else {
                return "this token may dispatch only \(Self.list(mine)) to '\(feature)'; limit 'actions.\(feature)' to those"
            }
            if let outside = theirs.subtracting(mine).sorted().first {
                return "this token may not dispatch '\(outside)' to '\(feature)'"
            }
        }
        if let expiresAt {
            guard let theirs = other.expiresAt, theirs <= expiresAt else {
                return "this token expires at \(expiresAt / 1000) (seconds since 1970); a token it mints cannot outlive it"
            }
        }
        return nil
    }

    public static func list(_ names: Set<String>) -> String {
        names.sorted().map { "'\($0)'" }.joined(separator: ", ")
    }

    // MARK: Stored form

    /// The JSON storage keeps (``StoredGrant/grant``): scope, features, actions, parent, subject.
    public var json: JSONValue {
        var fields: [String: JSONValue] = ["scope": .string(scope.name)]
        fields["features"] = features.map { .array($0.sorted().map(JSONValue.string)) } ?? .null
        fields["actions"] = .object(actions.mapValues { .array($0.sorted().map(JSONValue.string)) })
        if let parent { fields["parent"] = .string(parent) }
        if let subject { fields["subject"] = .string(subject) }
        return .object(fields)
    }

    /// A stored token's grant; nil when the stored JSON is not one (written by a later server).
    public init?(stored: StoredGrant) {
        guard case .object(let fields)? = try? JSONParser.parse(stored.grant),
            case .string(let name)? = fields["scope"], let scope = Scope(name: name)
        else { return nil }
        self.init(scope: scope, expiresAt: stored.expiresAt, tokenID: stored.id)
        if case .array(let names)? = fields["features"] {
            features = Set(names.compactMap { if case .string(let name) = $0 { name } else { nil } })
        }
        if case .object(let byFeature)? = fields["actions"] {
            for (feature, value) in byFeature {
                guard case .array(let types) = value else { continue }
                actions[feature] = Set(types.compactMap { if case .string(let type) = $0 { type } else { nil } })
            }
        }
        if case .string(let parent)? = fields["parent"] { self.parent = parent }
        if case .string(let subject)? = fields["subject"] { self.subject = subject }
    }
}
