import Foundation

/// Encodes `Encodable` values to ``JSONValue`` (and so to bytes) without Foundation's
/// `JSONEncoder`: the store encodes every change, so this is on the hot path.
///
/// Output matches `JSONCoding.encoder()` in meaning: sorted keys, `nil` optionals omitted
/// (`encodeIfPresent`), `Data` as base64, `URL` as its absolute string, `Decimal` as a number,
/// `Date` as its `Codable` form (seconds since 2001, like `JSONEncoder`'s default). Non-finite
/// floating-point numbers throw `EncodingError.invalidValue`.
public enum JSONValueEncoder {
    public static func encode<T: Encodable>(_ value: T) throws -> JSONValue {
        try box(value, codingPath: [])
    }

    /// The same bytes as `encode(value).bytes`, written straight from what the containers
    /// collected (no intermediate dictionaries).
    public static func encodeToBytes<T: Encodable>(_ value: T) throws -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        EncodedStorage.write(try node(value, codingPath: []), to: &out)
        return out
    }

    /// The same bytes as `TaggedJSON.tag(encode(value)).bytes`: an enum case's synthesized
    /// `{"case": {...fields}}` written as `{"type": "case", ...fields}`.
    public static func encodeTaggedToBytes<T: Encodable>(_ value: T) throws -> [UInt8] {
        let encoded = try node(value, codingPath: [])
        guard let (type, fields) = EncodedStorage.taggedCase(encoded) else {
            return TaggedJSON.tag(EncodedStorage.resolve(encoded)).bytes
        }
        var out: [UInt8] = []
        out.reserveCapacity(64)
        // The case's fields with `type` written among them in its sorted place (and in place
        // of a field called `type`), without changing or copying them.
        EncodedStorage.writeObject(fields, tag: type, to: &out)
        return out
    }

    static func box<T: Encodable>(_ value: T, codingPath: [any CodingKey]) throws -> JSONValue {
        EncodedStorage.resolve(try node(value, codingPath: codingPath))
    }

    /// What `value` encodes to, kept as containers until written or resolved.
    static func node<T: Encodable>(_ value: T, codingPath: [any CodingKey]) throws -> EncodedStorage.Node {
        // Compare metatypes first (a pointer comparison): a dynamic cast of every value costs
        // runtime type lookups on the hot path.
        if T.self == Data.self, let data = value as? Data { return .value(.string(data.base64EncodedString())) }
        if T.self == URL.self, let url = value as? URL { return .value(.string(url.absoluteString)) }
        if T.self == Decimal.self, let decimal = value as? Decimal {
            if let int = Int64(exactly: NSDecimalNumber(decimal: decimal).doubleValue), Decimal(int) == decimal {
                return .value(.int(int))
            }
            return .value(.double(NSDecimalNumber(decimal: decimal).doubleValue))
        }
        let encoder = ValueEncoder(codingPath: codingPath)
        try value.encode(to: encoder)
        return encoder.storage.node ?? .object(ObjectBox())
    }

    static func number(_ value: Double, _ codingPath: [any CodingKey]) throws -> JSONValue {
        guard value.isFinite else {
            throw EncodingError.invalidValue(
                value, .init(codingPath: codingPath, debugDescription: "Unable to encode \(value) directly in JSON."))
        }
        return .double(value)
    }
}

/// A growing JSON value shared by an encoder and the containers it hands out.
final class EncodedStorage {
    enum Node {
        case value(JSONValue)
        case object(ObjectBox)
        case array(ArrayBox)
    }

    var node: Node?

    var value: JSONValue? {
        guard let node else { return nil }
        return Self.resolve(node)
    }

    static func resolve(_ node: Node) -> JSONValue {
        switch node {
        case .value(let value): value
        case .object(let box):
            .object(Dictionary(uniqueKeysWithValues: zip(box.keys, box.nodes.lazy.map(resolve))))
        case .array(let box): .array(box.items.map(resolve))
        }
    }

    /// An enum case as synthesized `Codable` writes it: an object with one field whose value is
    /// an object (its associated values). The case's name and those fields.
    static func taggedCase(_ node: Node) -> (type: String, fields: ObjectBox)? {
        guard case .object(let outer) = node, outer.keys.count == 1, case .object(let inner) = outer.nodes[0] else {
            return nil
        }
        return (outer.keys[0], inner)
    }

    /// An object's bytes, as ``write(_:to:)`` writes them; with `tag`, the object with the field
    /// `"type": tag` set (the bytes of `TaggedJSON.tag` of its case).
    static func writeObject(_ box: ObjectBox, tag: String?, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        var first = true
        var tag = tag
        for index in box.sortedIndices() {
            let key = box.keys[index]
            if let type = tag, !(key < "type") {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                out.append(contentsOf: #""type":"#.utf8)
                JSONCoding.appendString(type, to: &out)
                tag = nil
                if key == "type" { continue }
            }
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            JSONCoding.appendString(key, to: &out)
            out.append(UInt8(ascii: ":"))
            write(box.nodes[index], to: &out)
        }
        if let type = tag {
            if !first { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #""type":"#.utf8)
            JSONCoding.appendString(type, to: &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    /// Compact JSON with sorted keys: the bytes `resolve(node).bytes` gives.
    static func write(_ node: Node, to out: inout [UInt8]) {
        switch node {
        case .value(let value): value.write(to: &out)
        case .object(let box): writeObject(box, tag: nil, to: &out)
        case .array(let box):
            out.append(UInt8(ascii: "["))
            for (index, item) in box.items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                write(item, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        }
    }
}

/// An object's fields in the order they were first set. A key set again keeps its place and
/// its first spelling and takes the new value, as a dictionary would (keys compare as `String`s).
final class ObjectBox {
    private(set) var keys: [String] = []
    private(set) var nodes: [EncodedStorage.Node] = []
    /// Positions by key, made once an object has many fields (small ones are searched).
    private var positions: [String: Int]?

    private static let searchLimit = 12

    func set(_ key: String, _ node: EncodedStorage.Node) {
        if let index = position(of: key) {
            nodes[index] = node
            return
        }
        keys.append(key)
        nodes.append(node)
        if positions != nil {
            positions?[key] = keys.count - 1
        } else if keys.count > Self.searchLimit {
            positions = Dictionary(uniqueKeysWithValues: zip(keys, keys.indices))
        }
    }

    private func position(of key: String) -> Int? {
        if let positions { return positions[key] }
        return keys.firstIndex(of: key)
    }

    /// Field positions in the order of their keys (`String` order, as `keys.sorted()`).
    func sortedIndices() -> [Int] {
        keys.count < 2 ? Array(keys.indices) : keys.indices.sorted { keys[$0] < keys[$1] }
    }

}

final class ArrayBox {
    var items: [EncodedStorage.Node] = []
}

struct ValueEncoder: Encoder {
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    let storage = EncodedStorage()

    init(codingPath: [any CodingKey]) {
        self.codingPath = codingPath
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        let box: ObjectBox
        if case .object(let existing)? = storage.node {
            box = existing
        } else {
            box = ObjectBox()
            storage.node = .object(box)
        }
        return KeyedEncodingContainer(KeyedEncoder<Key>(box: box, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let box: ArrayBox
        if case .array(let existing)? = storage.node {
            box = existing
        } else {
            box = ArrayBox()
            storage.node = .array(box)
        }
        return UnkeyedEncoder(box: box, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleEncoder(storage: storage, codingPath: codingPath)
    }
}

private func encodeNode<T: Encodable>(_ value: T, codingPath: [any CodingKey]) throws -> EncodedStorage.Node {
    try JSONValueEncoder.node(value, codingPath: codingPath)
}

struct KeyedEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let box: ObjectBox
    let codingPath: [any CodingKey]

    mutating func encodeNil(forKey key: Key) throws { box.set(key.stringValue, .value(.null)) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { box.set(key.stringValue, .value(.bool(value))) }
    mutating func encode(_ value: String, forKey key: Key) throws { box.set(key.stringValue, .value(.string(value))) }
    mutating func encode(_ value: Double, forKey key: Key) throws {
        box.set(key.stringValue, .value(try JSONValueEncoder.number(value, codingPath + [key])))
    }
    mutating func encode(_ value: Float, forKey key: Key) throws {
        box.set(key.stringValue, .value(try JSONValueEncoder.number(Double(value), codingPath + [key])))
    }
    mutating func encode(_ value: Int, forKey key: Key) throws { box.set(key.stringValue, .value(.int(Int64(value)))) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { box.set(key.stringValue, .value(.int(Int64(value)))) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { box.set(key.stringValue, .value(.int(Int64(value)))) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { box.set(key.stringValue, .value(.int(Int64(value)))) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { box.set(key.stringValue, .value(.int(value))) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { box.set(key.stringValue, .value(unsigned(UInt64(value)))) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { box.set(key.stringValue, .value(.int(Int64(value)))) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { box.set(key.stringValue, .value(.int(Int64(value)))) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { box.set(key.stringValue, .value(.int(Int64(value)))) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { box.set(key.stringValue, .value(unsigned(value))) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        box.set(key.stringValue, try encodeNode(value, codingPath: codingPath + [key]))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let nested = ObjectBox()
        box.set(key.stringValue, .object(nested))
        return KeyedEncodingContainer(KeyedEncoder<NestedKey>(box: nested, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested = ArrayBox()
        box.set(key.stringValue, .array(nested))
        return UnkeyedEncoder(box: nested, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> any Encoder { superEncoder(key: "super") }
    mutating func superEncoder(forKey key: Key) -> any Encoder { superEncoder(key: key.stringValue) }

    private func superEncoder(key: String) -> any Encoder {
        let encoder = DeferredEncoder(codingPath: codingPath)
        encoder.onFinish = { [box] node in box.set(key, node) }
        return encoder
    }
}

struct UnkeyedEncoder: UnkeyedEncodingContainer {
    let box: ArrayBox
    let codingPath: [any CodingKey]
    var count: Int { box.items.count }

    private var indexKey: any CodingKey { IndexKey(box.items.count) }

    mutating func encodeNil() throws { box.items.append(.value(.null)) }
    mutating func encode(_ value: Bool) throws { box.items.append(.value(.bool(value))) }
    mutating func encode(_ value: String) throws { box.items.append(.value(.string(value))) }
    mutating func encode(_ value: Double) throws { box.items.append(.value(try JSONValueEncoder.number(value, codingPath + [indexKey]))) }
    mutating func encode(_ value: Float) throws { box.items.append(.value(try JSONValueEncoder.number(Double(value), codingPath + [indexKey]))) }
    mutating func encode(_ value: Int) throws { box.items.append(.value(.int(Int64(value)))) }
    mutating func encode(_ value: Int8) throws { box.items.append(.value(.int(Int64(value)))) }
    mutating func encode(_ value: Int16) throws { box.items.append(.value(.int(Int64(value)))) }
    mutating func encode(_ value: Int32) throws { box.items.append(.value(.int(Int64(value)))) }
    mutating func encode(_ value: Int64) throws { box.items.append(.value(.int(value))) }
    mutating func encode(_ value: UInt) throws { box.items.append(.value(unsigned(UInt64(value)))) }
    mutating func encode(_ value: UInt8) throws { box.items.append(.value(.int(Int64(value)))) }
    mutating func encode(_ value: UInt16) throws { box.items.append(.value(.int(Int64(value)))) }
    mutating func encode(_ value: UInt32) throws { box.items.append(.value(.int(Int64(value)))) }
    mutating func encode(_ value: UInt64) throws { box.items.append(.value(unsigned(value))) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        box.items.append(try encodeNode(value, codingPath: codingPath + [indexKey]))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let nested = ObjectBox()
        let path = codingPath + [indexKey]
        box.items.append(.object(nested))
        return KeyedEncodingContainer(KeyedEncoder<NestedKey>(box: nested, codingPath: path))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let nested = ArrayBox()
        let path = codingPath + [indexKey]
        box.items.append(.array(nested))
        return UnkeyedEncoder(box: nested, codingPath: path)
    }

    mutating func superEncoder() -> any Encoder {
        let index = box.items.count
        box.items.append(.value(.null))
        let encoder = DeferredEncoder(codingPath: codingPath + [IndexKey(index)])
        encoder.onFinish = { [box] node in box.items[index] = node }
        return encoder
    }
}

struct SingleEncoder: SingleValueEncodingContainer {
    let storage: EncodedStorage
    let codingPath: [any CodingKey]

    private func set(_ value: JSONValue) { storage.node = .value(value) }

    mutating func encodeNil() throws { set(.null) }
    mutating func encode(_ value: Bool) throws { set(.bool(value)) }
    mutating func encode(_ value: String) throws { set(.string(value)) }
    mutating func encode(_ value: Double) throws { set(try JSONValueEncoder.number(value, codingPath)) }
    mutating func encode(_ value: Float) throws { set(try JSONValueEncoder.number(Double(value), codingPath)) }
    mutating func encode(_ value: Int) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: Int8) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: Int16) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: Int32) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: Int64) throws { set(.int(value)) }
    mutating func encode(_ value: UInt) throws { set(unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt8) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: UInt16) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: UInt32) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: UInt64) throws { set(unsigned(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws { storage.node = try encodeNode(value, codingPath: codingPath) }
}

/// An encoder whose result is stored by a parent when it is released (for `superEncoder`).
final class DeferredEncoder: Encoder {
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    let inner: ValueEncoder
    var onFinish: ((EncodedStorage.Node) -> Void)?

    init(codingPath: [any CodingKey]) {
        self.codingPath = codingPath
        inner = ValueEncoder(codingPath: codingPath)
    }

    deinit {
        if let node = inner.storage.node { onFinish?(node) }
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> { inner.container(keyedBy: type) }
    func unkeyedContainer() -> any UnkeyedEncodingContainer { inner.unkeyedContainer() }
    func singleValueContainer() -> any SingleValueEncodingContainer { inner.singleValueContainer() }
}

private func unsigned(_ value: UInt64) -> JSONValue {
    value <= UInt64(Int64.max) ? .int(Int64(value)) : .double(Double(value))
}

struct IndexKey: CodingKey {
    let intValue: Int?
    let stringValue: String
    init(_ index: Int) {
        intValue = index
        stringValue = "Index \(index)"
    }
    init?(intValue: Int) { self.init(intValue) }
    init?(stringValue: String) { return nil }
}
