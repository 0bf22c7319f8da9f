import Foundation
import StateStore

/// Maps between the feature's Swift types and their wire shapes.
///
/// Actions and effects are tagged objects on the wire (`{"type": "increment", "by": 2}`) and
/// enums with labeled associated values in Swift (`{"increment": {"by": 2}}` in synthesized
/// `Codable`); ``TaggedJSON`` converts between the two. States are plain `Codable`.
enum WireCoding {
    /// `value` (an action or effect enum) as a tagged JSON object.
    static func tagged<T: Encodable>(_ value: T) throws(StateClientError) -> JSONValue {
        let untagged: JSONValue
        do {
            let data = try JSONEncoder().encode(value)
            untagged = try JSONDecoder().decode(JSONValue.self, from: data)
        } catch {
            throw StateClientError(
                kind: .encoding, message: "\(T.self) could not be encoded as JSON", underlyingError: error)
        }
        return TaggedJSON.tag(untagged)
    }

    /// A tagged JSON object (`{"type": ...}`) decoded as the enum `T`.
    static func untagged<T: Decodable>(_ type: T.Type, from value: JSONValue, what: String) throws(StateClientError) -> T {
        guard let (name, untagged) = TaggedJSON.untag(value) else {
            throw StateClientError(
                kind: .decoding, message: "the \(what) is not a JSON object with a string \"type\": \(value.typeName)")
        }
        do {
            return try JSONDecoder().decode(T.self, from: try JSONEncoder().encode(untagged))
        } catch {
            throw StateClientError(
                kind: .decoding, message: "the \(what) of type '\(name)' does not decode as \(T.self)",
                underlyingError: error)
        }
    }

    /// `value` as JSON, for a state sent to the server.
    static func json<T: Encodable>(_ value: T) throws(StateClientError) -> JSONValue {
        do {
            return try JSONDecoder().decode(JSONValue.self, from: JSONEncoder().encode(value))
        } catch {
            throw StateClientError(kind: .encoding, message: "\(T.self) could not be encoded as JSON", underlyingError: error)
        }
    }

    /// `value` (a JSON value) decoded as `T`.
    static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue, what: String) throws(StateClientError) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: JSONEncoder().encode(value))
        } catch {
            throw StateClientError(kind: .decoding, message: "the \(what) does not decode as \(T.self)", underlyingError: error)
        }
    }

    /// A JSON body decoded as `T`.
    static func decodeBody<T: Decodable>(_ type: T.Type, from data: Data, what: String) throws(StateClientError) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch let error as DecodingError {
            throw StateClientError(kind: .decoding, message: "the \(what) does not decode as expected", underlyingError: error)
        } catch {
            throw StateClientError(kind: .invalidResponse, message: "the \(what) is not JSON", underlyingError: error)
        }
    }

    /// An optional effect from the wire (`null` or a tagged object).
    static func effect<Effect: Decodable>(_ type: Effect.Type, from value: JSONValue?) throws(StateClientError) -> Effect? {
        guard let value, value != .null else { return nil }
        return try untagged(Effect.self, from: value, what: "effect")
    }

    /// An optional action from the wire (`null` or a tagged object).
    static func action<Action: Decodable>(_ type: Action.Type, from value: JSONValue?) throws(StateClientError) -> Action? {
        guard let value, value != .null else { return nil }
        return try untagged(Action.self, from: value, what: "action")
    }
}

/// The body of a change reply: `{"feature", "version", "state", "effect"?}`.
struct ChangeBody<State: Decodable>: Decodable {
    var version: Int
    var state: State
    var effect: JSONValue?
}

/// The body of `GET .../state/{feature}`: `{"feature", "version", "state"}`.
struct StateBody<State: Decodable>: Decodable {
    var version: Int
    var state: State
}

/// The data of a `state` event: the whole `state`, or on a delta stream `baseVersion` and a
/// JSON Patch from it.
struct StateEventBody: Decodable {
    var feature: String
    var version: Int
    var cause: String
    var action: JSONValue?
    var state: JSONValue?
    var baseVersion: Int?
    var patch: JSONValue?
    var effect: JSONValue?
    var timer: FiredTimer?
}

/// The timer whose firing a change of cause `timer` is (in events and the history).
public struct FiredTimer: Decodable, Sendable, Equatable {
    /// The id the reducer gave it.
    public var id: String
    /// When it was due, and when it was scheduled: milliseconds since 1970-01-01 UTC. The
    /// change's own time says when it fired.
    public var due: Int64
    public var scheduledAt: Int64
}

/// Only the feature of a `state` event, to skip events of other features before decoding.
struct EventFeature: Decodable {
    var feature: String
}

/// The data of a `snapshot` event: `{"features": {"<name>": {"version", "state"}}}`.
struct SnapshotEventBody: Decodable {
    var features: [String: JSONValue]
}

/// The data of a `shutdown` event: `{"reason": "shutdown", "retryAfterMs": 1000}`.
struct ShutdownEventBody: Decodable {
    var retryAfterMs: Int?
}

/// The contract's error body: `{"error": {"code", "message"}}`.
struct ErrorBody: Decodable {
    struct Detail: Decodable {
        var code: String
        var message: String
    }
    var error: Detail
}
