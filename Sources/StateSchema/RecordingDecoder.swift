/// A `Decoder` that decodes nothing: it runs a type's `init(from:)` and records what it asks
/// for (each key, its type, whether it is read with `decodeIfPresent`, arrays, single values),
/// answering with sample values so that decoding goes on. Nested `Decodable` types are derived
/// by the ``Derivation`` and answered with a sample of their own.
struct RecordingDecoder: Decoder {
    let derivation: Derivation
    let node: Node
    /// Where this container is inside the type being derived (keys and `[]`), for hints.
    let path: String
    /// For the type's own top container: which enum case `allKeys` answers.
    let choice: Int?
    /// For the type's own single value: the string it answers (a raw value being tried).
    var rawString: String? = nil

    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        if node.kind == .none { node.kind = .keyed }
        return KeyedDecodingContainer(RecordingKeyedContainer<Key>(derivation: derivation, node: node, path: path, choice: choice))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        if node.kind == .none { node.kind = .unkeyed }
        return RecordingUnkeyedContainer(derivation: derivation, node: node, path: path)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        if node.kind == .none { node.kind = .single }
        return RecordingSingleValueContainer(derivation: derivation, node: node, rawString: rawString)
    }
}

/// The decoder could not answer: no sample value of a type (it is recursive, or its
/// `init(from:)` refused every sample).
struct NoSample: Error, CustomStringConvertible {
    let type: Any.Type
    var description: String { "no value of \(String(reflecting: type)) could be made" }
}

/// Keys no `CodingKeys` enum accepts: a key type that takes both is a dictionary's.
enum DictionaryProbe {
    static let key = "0"
    static let other = "1"
}

struct RecordingKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let derivation: Derivation
    let node: Node
    let path: String
    let choice: Int?

    var codingPath: [any CodingKey] { [] }

    var allKeys: [Key] {
        if let key = Key(stringValue: DictionaryProbe.key), Key(stringValue: DictionaryProbe.other) != nil {
            node.kind = .dictionary
            return [key]
        }
        guard let names = TypeReflection.caseNames(of: Key.self), !names.isEmpty else { return [] }
        node.caseNames = names
        let index = min(max(choice ?? 0, 0), names.count - 1)
        node.chosenCase = index
        return Key(stringValue: names[index]).map { [$0] } ?? []
    }

    func contains(_ key: Key) -> Bool { true }

    func decodeNil(forKey key: Key) throws -> Bool {
        node.markNullable(key.stringValue)
        return false
    }

    private func value<T: Decodable>(_ type: T.Type, _ key: Key) throws -> T {
        let shape = derivation.shape(of: type)
        node.add(key.stringValue, shape, optional: false)
        guard let sample = derivation.sample(of: type) as? T else { throw NoSample(type: type) }
        return sample
    }

    private func optional<T: Decodable>(_ type: T.Type, _ key: Key) -> T? {
        node.add(key.stringValue, derivation.shape(of: type), optional: true)
        return nil
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try value(type, key) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try value(type, key) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try value(type, key) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try value(type, key) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try value(type, key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try value(type, key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try value(type, key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try value(type, key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try value(type, key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try value(type, key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try value(type, key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try value(type, key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try value(type, key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try value(type, key) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try value(type, key) }

    func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? { optional(type, key) }
    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? { optional(type, key) }
    func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? { optional(type, key) }
    func decodeIfPresent(_ type: Float.Type, forKey key: Key) throws -> Float? { optional(type, key) }
    func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? { optional(type, key) }
    func decodeIfPresent(_ type: Int8.Type, forKey key: Key) throws -> Int8? { optional(type, key) }
    func decodeIfPresent(_ type: Int16.Type, forKey key: Key) throws -> Int16? { optional(type, key) }
    func decodeIfPresent(_ type: Int32.Type, forKey key: Key) throws -> Int32? { optional(type, key) }
    func decodeIfPresent(_ type: Int64.Type, forKey key: Key) throws -> Int64? { optional(type, key) }
    func decodeIfPresent(_ type: UInt.Type, forKey key: Key) throws -> UInt? { optional(type, key) }
    func decodeIfPresent(_ type: UInt8.Type, forKey key: Key) throws -> UInt8? { optional(type, key) }
    func decodeIfPresent(_ type: UInt16.Type, forKey key: Key) throws -> UInt16? { optional(type, key) }
    func decodeIfPresent(_ type: UInt32.Type, forKey key: Key) throws -> UInt32? { optional(type, key) }
    func decodeIfPresent(_ type: UInt64.Type, forKey key: Key) throws -> UInt64? { optional(type, key) }
    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? { optional(type, key) }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type, forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        let child = Node()
        child.kind = .keyed
        node.add(key.stringValue, .node(child), optional: false)
        return KeyedDecodingContainer(
            RecordingKeyedContainer<NestedKey>(derivation: derivation, node: child, path: path + "/" + key.stringValue, choice: nil))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        let child = Node()
        child.kind = .unkeyed
        node.add(key.stringValue, .node(child), optional: false)
        return RecordingUnkeyedContainer(derivation: derivation, node: child, path: path + "/" + key.stringValue)
    }

    func superDecoder() throws -> any Decoder {
        let child = Node()
        node.add("super", .node(child), optional: false)
        return RecordingDecoder(derivation: derivation, node: child, path: path + "/super", choice: nil)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        let child = Node()
        node.add(key.stringValue, .node(child), optional: false)
        return RecordingDecoder(derivation: derivation, node: child, path: path + "/" + key.stringValue, choice: nil)
    }
}

/// Answers one element, then says it is at the end; with a hint for its path (the element has
/// no sample yet: a recursive type) it is empty at once and the hint is its element.
struct RecordingUnkeyedContainer: UnkeyedDecodingContainer {
    let derivation: Derivation
    let node: Node
    let path: String
    private(set) var currentIndex = 0

    init(derivation: Derivation, node: Node, path: String) {
        self.derivation = derivation
        self.node = node
        self.path = path
        if let hint = derivation.emptyArrayHint(at: path) {
            node.elements = [hint]
            currentIndex = 1
        }
    }

    var codingPath: [any CodingKey] { [] }
    var count: Int? { nil }
    var isAtEnd: Bool { currentIndex > 0 }

    mutating func decodeNil() throws -> Bool {
        node.nullable = true
        return false
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try element(type) }
    mutating func decode(_ type: String.Type) throws -> String { try element(type) }
    mutating func decode(_ type: Double.Type) throws -> Double { try element(type) }
    mutating func decode(_ type: Float.Type) throws -> Float { try element(type) }
    mutating func decode(_ type: Int.Type) throws -> Int { try element(type) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try element(type) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try element(type) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try element(type) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try element(type) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try element(type) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try element(type) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try element(type) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try element(type) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try element(type) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try element(type) }

    private mutating func element<T: Decodable>(_ type: T.Type) throws -> T {
        let shape = derivation.shape(of: type)
        node.elements.append(shape)
        currentIndex += 1
        guard let sample = derivation.sample(of: type) as? T else {
            derivation.hintEmptyArray(at: path, element: shape)
            throw NoSample(type: type)
        }
        return sample
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        let child = Node()
        child.kind = .keyed
        node.elements.append(.node(child))
        currentIndex += 1
        return KeyedDecodingContainer(
            RecordingKeyedContainer<NestedKey>(derivation: derivation, node: child, path: path + "/[]", choice: nil))
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let child = Node()
        child.kind = .unkeyed
        node.elements.append(.node(child))
        currentIndex += 1
        return RecordingUnkeyedContainer(derivation: derivation, node: child, path: path + "/[]")
    }

    mutating func superDecoder() throws -> any Decoder {
        let child = Node()
        node.elements.append(.node(child))
        currentIndex += 1
        return RecordingDecoder(derivation: derivation, node: child, path: path + "/[]", choice: nil)
    }
}

struct RecordingSingleValueContainer: SingleValueDecodingContainer {
    let derivation: Derivation
    let node: Node
    let rawString: String?

    var codingPath: [any CodingKey] { [] }

    func decodeNil() -> Bool {
        node.nullable = true
        return false
    }

    private func value<T: Decodable>(_ type: T.Type) throws -> T {
        node.single = derivation.shape(of: type)
        if let rawString, let string = rawString as? T { return string }
        guard let sample = derivation.sample(of: type) as? T else { throw NoSample(type: type) }
        return sample
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try value(type) }
    func decode(_ type: Bool.Type) throws -> Bool { try value(type) }
    func decode(_ type: String.Type) throws -> String { try value(type) }
    func decode(_ type: Double.Type) throws -> Double { try value(type) }
    func decode(_ type: Float.Type) throws -> Float { try value(type) }
    func decode(_ type: Int.Type) throws -> Int { try value(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try value(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try value(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try value(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try value(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try value(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try value(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try value(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try value(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try value(type) }
}
