/// A feature with its types erased: what a server needs to list features and create stores.
public struct AnyFeature: Sendable {
    public let name: String
    /// The initial state as JSON bytes.
    public let initialStateJSON: [UInt8]
    private let make: @Sendable (_ onFollowUpRejected: @escaping @Sendable (StoreError) -> Void) -> any AnyStateStore

    public init<F: Feature>(_ feature: F) throws {
        name = feature.name
        initialStateJSON = try JSONCoding.encode(feature.initialState)
        make = { onRejected in DefaultStateStore(feature: feature, onFollowUpRejected: onRejected) }
    }

    /// A new store at the initial state, version 0.
    public func makeStore(
        onFollowUpRejected: @escaping @Sendable (StoreError) -> Void = { _ in }
    ) -> any AnyStateStore {
        make(onFollowUpRejected)
    }
}

/// The registered features, by name, in registration order.
public struct FeatureRegistry: Sendable {
    public private(set) var features: [AnyFeature] = []
    private var byName: [String: Int] = [:]

    public init() {}

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
}
