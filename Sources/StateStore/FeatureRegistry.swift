import Foundation

/// A feature with its types erased: what a server needs to list features and create stores.
public struct AnyFeature: Sendable {
    public let name: String
    /// The initial state as JSON bytes.
    public let initialStateJSON: [UInt8]
    private let make: @Sendable (_ timers: TimerPolicy, _ onFollowUpRejected: @escaping @Sendable (StoreError) -> Void) -> any AnyStateStore

    /// The version of the feature's state shape (see ``Feature/stateVersion``).
    public let stateVersion: Int
    /// The most bytes the state may take as JSON (see ``Feature/maxStateBytes``).
    public let maxStateBytes: Int
    private let restoreBody: @Sendable (
        _ state: JSONValue?, _ stateVersion: Int, _ version: Int, _ timers: TimerPolicy,
        _ onFollowUpRejected: @escaping @Sendable (StoreError) -> Void
    ) throws(StoreError) -> any AnyStateStore

    /// The feature's `Codable` types, for deriving its schemas (`nil` effect: `Never`).
    public let stateType: any (Codable & Sendable).Type
    public let actionType: any (Codable & Sendable).Type
    public let effectType: (any (Codable & Sendable).Type)?
    private let refine: @Sendable (inout FeatureSchema) -> Void
    private let accepts: @Sendable (Any) -> Bool?
    private let migrateBody: @Sendable (JSONValue, Int) throws(ActionRejected) -> JSONValue

    public init<F: Feature>(_ feature: F) throws {
        name = feature.name
        stateType = F.State.self
        actionType = F.Action.self
        effectType = F.Effect.self == Never.self ? nil : F.Effect.self
        refine = { feature.refineSchema(&$0) }
        accepts = { ($0 as? F.Action).map(feature.acceptsFromClient) }
        migrateBody = { (state, version) throws(ActionRejected) in try feature.migrate(state, from: version) }
        initialStateJSON = try JSONCoding.encode(feature.initialState)
        stateVersion = feature.stateVersion
        maxStateBytes = feature.maxStateBytes
        make = { timers, onRejected in DefaultStateStore(feature: feature, timers: timers, onFollowUpRejected: onRejected) }
        restoreBody = { saved, savedVersion, version, timers, onRejected throws(StoreError) in
            guard StoreVersion.isValid(version) else {
                throw StoreError(
                    .invalidState, "a store's version must be from 0 to \(StoreVersion.max), not \(version)",
                    currentVersion: 0)
            }
            guard var json = saved else {
                return DefaultStateStore(feature: feature, version: version, timers: timers, onFollowUpRejected: onRejected)
            }
            if savedVersion != feature.stateVersion {
                do throws(ActionRejected) {
                    json = try feature.migrate(json, from: savedVersion)
                } catch {
                    throw StoreError(.invalidState, error.message, currentVersion: version)
                }
            }
            let state: F.State
            do {
                state = try JSONCoding.decode(F.State.self, from: json)
            } catch {
                throw StoreError(
                    .invalidState,
                    "the saved state of \(feature.name) does not decode: \(DecodingErrorText.describe(error))",
                    currentVersion: version)
            }
            return DefaultStateStore(
                feature: feature, state: state, version: version, timers: timers, onFollowUpRejected: onRejected)
        }
    }

    /// `state`, saved at `stateVersion`, in today's shape (``Feature/migrate(_:from:)``); as it
    /// is when `stateVersion` is today's.
    public func migrated(_ state: JSONValue, from stateVersion: Int) throws(ActionRejected) -> JSONValue {
        stateVersion == self.stateVersion ? state : try migrateBody(state, stateVersion)
    }

    /// Applies the feature's ``Feature/refineSchema(_:)`` to its derived schemas.
    public func refineSchema(_ schema: inout FeatureSchema) {
        refine(&schema)
    }

    /// Whether a client may send `action` (``Feature/acceptsFromClient(_:)``); `nil` when it is
    /// not a value of the feature's action type.
    public func acceptsFromClient(_ action: Any) -> Bool? {
        accepts(action)
    }

    /// A store at `version` with a saved state (migrated from `stateVersion` if it is older),
    /// or at the initial state when `state` is nil. Throws `.invalidState` when the saved state
    /// neither decodes nor migrates.
    public func restoreStore(
        state: [UInt8]?, stateVersion: Int, version: Int, timers: TimerPolicy = .standard,
        onFollowUpRejected: @escaping @Sendable (StoreError) -> Void = { _ in }
    ) throws(StoreError) -> any AnyStateStore {
        guard let state else { return try restoreBody(nil, stateVersion, version, timers, onFollowUpRejected) }
        guard let json = JSONCoding.parse(state) else {
            throw StoreError(.invalidState, "the saved state of \(name) is not JSON", currentVersion: version)
        }
        return try restoreBody(json, stateVersion, version, timers, onFollowUpRejected)
    }

    /// ``restoreStore(state:stateVersion:version:onFollowUpRejected:)`` from a state already
    /// parsed (a journal's patches applied to it), without encoding and parsing it again.
    public func restoreStore(
        json: JSONValue, stateVersion: Int, version: Int, timers: TimerPolicy = .standard,
        onFollowUpRejected: @escaping @Sendable (StoreError) -> Void = { _ in }
    ) throws(StoreError) -> any AnyStateStore {
        try restoreBody(json, stateVersion, version, timers, onFollowUpRejected)
    }

    /// A new store at the initial state, version 0, holding its timers to `timers`.
    public func makeStore(
        timers: TimerPolicy = .standard, onFollowUpRejected: @escaping @Sendable (StoreError) -> Void = { _ in }
    ) -> any AnyStateStore {
        make(timers, onFollowUpRejected)
    }
}

/// The registered features, by name, in registration order.
public struct FeatureRegistry: Sendable {
    public private(set) var features: [AnyFeature] = []
    private var byName: [String: Int] = [:]

    public init() {}

    /// A registry of `features`, in their order (each registered as by ``register(_:)``).
    public init(_ features: [any Feature]) throws {
        for feature in features {
            try register(feature)
        }
    }

    /// Registers a feature. Names must be unique and URL-safe (`[A-Za-z0-9_-]+`).
    public mutating func register<F: Feature>(_ feature: F) throws {
        let name = feature.name
        guard !name.isEmpty, name.utf8.allSatisfy(Self.isNameByte) else {
            throw RegistryError(message: "feature name '\(name)' must be non-empty and use only A-Z a-z 0-9 _ -")
        }
        guard byName[name] == nil else {
            throw RegistryError(message: "feature '\(name)' is registered twice")
        }
        byName[name] = features.count
        features.append(try AnyFeature(feature))
    }

    public subscript(name: String) -> AnyFeature? {
        byName[name].map { features[$0] }
    }

    public var names: [String] { features.map(\.name) }

    private static func isNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
            true
        default: false
        }
    }
}

public struct RegistryError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public var description: String { message }

    public init(message: String) {
        self.message = message
    }
}
