import Foundation

/// Decodes `Decodable` values from a ``JSONValue`` without going back to bytes and through
/// Foundation's `JSONDecoder` (the store decodes every action).
///
/// Accepts what `JSONDecoder` accepts in meaning: integers must fit the target type exactly
/// (`1.5` or `1e30` for an `Int` is `dataCorrupted` at that field), `Data` from base64, `URL`
/// from a string, `Decimal` and floating-point numbers from any number. Errors carry the coding
/// path of the field at fault.
public enum JSONValueDecoder {
    public static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try unbox(value, as: type, codingPath: [])
    }

    /// Decodes a tagged object (`{"type": T, ...fields}`, an action or effect on the wire) as
    /// `decode(type, from: TaggedJSON.untag(value).untagged)` would, without building the
    /// untagged copy: the decoder reads `fields` as `{T: {...fields without "type"}}`.
    ///
    /// With `asking`, the case's fields the decoder asked for (read, looked for, or all of them
    /// when it listed the keys) are noted there: a field it never asked for is one the case
    /// does not have, known without encoding the value again.
    public static func decodeTagged<T: Decodable>(
        _ type: T.Type, fields: [String: JSONValue], tag: String, asking: AskedFields? = nil
    ) throws -> T {
        try T(from: ValueDecoder(value: .object(fields), codingPath: [], shape: .tagged(tag, asking)))
    }

    static func unbox<T: Decodable>(_ value: JSONValue, as type: T.Type, codingPath: [any CodingKey]) throws -> T {
        if type == Data.self {
            guard case .string(let text) = value, let data = Data(base64Encoded: text), let typed = data as? T else {
                throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "Expected base64 data."))
            }
            return typed
        }
        if type == URL.self {
            guard case .string(let text) = value, let url = URL(string: text), let typed = url as? T else {
                throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "Expected a URL."))
            }
            return typed
        }
        if type == Decimal.self {
            let decimal: Decimal
            switch value {
            case .int(let int): decimal = Decimal(int)
            case .double(let double): decimal = Decimal(double)
            default: throw mismatch(type, value, codingPath)
            }
            if let typed = decimal as? T { return typed }
            throw mismatch(type, value, codingPath)
        }
        return try T(from: ValueDecoder(value: value, codingPath: codingPath))
    }

    static func mismatch(_ type: Any.Type, _ value: JSONValue, _ codingPath: [any CodingKey]) -> DecodingError {
        if case .null = value {
            return .valueNotFound(type, .init(codingPath: codingPath, debugDescription: "Expected \(type) but found null."))
        }
        return .typeMismatch(type, .init(codingPath: codingPath, debugDescription: "Expected \(type) but found \(value.typeName)."))
    }

    static func integer<T: FixedWidthInteger>(_ value: JSONValue, _ type: T.Type, _ codingPath: [any CodingKey]) throws -> T {
        switch value {
        case .int(let int):
            if let exact = T(exactly: int) { return exact }
        case .double(let double):
            // The parser makes every literal that is a whole number in Int64 as written an
            // `.int`, so a double here is not one: `1.5`, `1.9999999999999999` (which rounds
            // to 2.0), or out of Int64's range. Only zero is let through (`-0.0`).
            if double == 0, let exact = T(exactly: 0) { return exact }
            if double.isFinite, abs(double) < 9_223_372_036_854_775_808 {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: codingPath, debugDescription: "The number must be a whole number (it is not one as written)."))
            }
        default:
            throw mismatch(type, value, codingPath)
        }
        throw DecodingError.dataCorrupted(
            .init(codingPath: codingPath, debugDescription: "The number does not fit in \(type)."))
    }

    static func double(_ value: JSONValue, _ codingPath: [any CodingKey]) throws -> Double {
        switch value {
        case .int(let int): return Double(int)
        case .double(let double): return double
        default: throw mismatch(Double.self, value, codingPath)
        }
    }
}

/// How a keyed container reads its object's fields: as they are, or a tagged object
/// (`{"type": T, ...fields}`) read as its untagged form `{T: {...fields without "type"}}`
/// (``JSONValueDecoder/decodeTagged(_:fields:tag:)``).
enum FieldShape {
    case plain
    /// The untagged form's outer object: one field, `T`; the fields asked for are noted in the
    /// ``AskedFields`` given.
    case tagged(String, AskedFields?)
    /// The untagged form's inner object: the fields without `type`.
    case taggedFields(AskedFields?)

    /// `fields` read in this shape: the value of the field `name`.
    func value(_ name: String, in fields: [String: JSONValue]) -> JSONValue? {
        switch self {
        case .plain: return fields[name]
        case .taggedFields(let asked):
            asked?.note(name)
            return name == "type" ? nil : fields[name]
        case .tagged(let tag, _): return name == tag ? .object(fields.filter { $0.key != "type" }) : nil
        }
    }
}

/// The fields of a tagged object's case a decoder asked for
/// (``JSONValueDecoder/decodeTagged(_:fields:tag:asking:)``).
public final class AskedFields {
    public private(set) var names: Set<String> = []

    public init() {}

    func note(_ name: String) { names.insert(name) }
}

struct ValueDecoder: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var shape = FieldShape.plain
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// The value as read (a tagged object's untagged form).
    private var shaped: JSONValue {
        guard case .tagged(let tag, _) = shape, case .object(let fields) = value else { return value }
        return .object([tag: shape.value(tag, in: fields) ?? .null])
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let fields) = value else {
            throw JSONValueDecoder.mismatch([String: JSONValue].self, value, codingPath)
        }
        return KeyedDecodingContainer(KeyedDecoder<Key>(fields: fields, codingPath: codingPath, shape: shape))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let items) = shaped else {
            throw JSONValueDecoder.mismatch([JSONValue].self, shaped, codingPath)
        }
        return UnkeyedDecoder(items: items, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleDecoder(value: shaped, codingPath: codingPath)
    }
}

struct KeyedDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let fields: [String: JSONValue]
    let codingPath: [any CodingKey]
    var shape = FieldShape.plain

    var allKeys: [Key] {
        switch shape {
        case .plain: fields.keys.compactMap { Key(stringValue: $0) }
        case .taggedFields(let asked):
            fields.keys.compactMap { name in
                // Listing the keys is asking for every one of them.
                asked?.note(name)
                return name == "type" ? nil : Key(stringValue: name)
            }
        case .tagged(let tag, _): Key(stringValue: tag).map { [$0] } ?? []
        }
    }

    func contains(_ key: Key) -> Bool {
        if case .plain = shape { return fields[key.stringValue] != nil }
        return shape.value(key.stringValue, in: fields) != nil
    }

    private func value(_ key: Key) throws -> JSONValue {
        let found: JSONValue? = if case .plain = shape { fields[key.stringValue] } else { shape.value(key.stringValue, in: fields) }
        guard let value = found else {
            throw DecodingError.keyNotFound(
                key, .init(codingPath: codingPath, debugDescription: "No value for key \(key.stringValue)."))
        }
        return value
    }

    func decodeNil(forKey key: Key) throws -> Bool {
        if case .null = try value(key) { return true }
        return false
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool {
        let v = try value(key)
        guard case .bool(let b) = v else { throw JSONValueDecoder.mismatch(type, v, codingPath + [key]) }
        return b
    }

    func decode(_ type: String.Type, forKey key: Key) throws -> String {
        let v = try value(key)
        guard case .string(let s) = v else { throw JSONValueDecoder.mismatch(type, v, codingPath + [key]) }
        return s
    }

    func decode(_ type: Double.Type, forKey key: Key) throws -> Double {
        try JSONValueDecoder.double(try value(key), codingPath + [key])
    }

    func decode(_ type: Float.Type, forKey key: Key) throws -> Float {
        Float(try JSONValueDecoder.double(try value(key), codingPath + [key]))
    }

    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try JSONValueDecoder.integer(try value(key), type, codingPath + [key]) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try JSONValueDecoder.integer(try value(key), type, codingPath + [key]) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try JSONValueDecoder.integer(try value(key), type, codingPath + [key]) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try JSONValueDecoder.integer(try value(key), type, codingPath + [key]) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try JSONValueDecoder.integer(try value(key), type, codingPath + [key]) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try JSONValueDecoder.integer(try value(key), type, codingPath + [key]) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try JSONValueDecoder.integer(try value(key), type, codingPath + [key]) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try JSONValueDecoder.integer(try value(key), type, codingPath + [key]) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try JSONValueDecoder.integer(try value(key), type, codingPath + [key]) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try JSONValueDecoder.integer(try value(key), type, codingPath + [key]) }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try JSONValueDecoder.unbox(try value(key), as: type, codingPath: codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        if case .tagged(let tag, let asked) = shape, key.stringValue == tag {
            // The case's fields: the tagged object itself, its `type` hidden (no copy made).
            return KeyedDecodingContainer(
                KeyedDecoder<NestedKey>(fields: fields, codingPath: codingPath + [key], shape: .taggedFields(asked)))
        }
        return try ValueDecoder(value: try value(key), codingPath: codingPath + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ValueDecoder(value: try value(key), codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        ValueDecoder(value: shape.value("super", in: fields) ?? .null, codingPath: codingPath)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        ValueDecoder(value: shape.value(key.stringValue, in: fields) ?? .null, codingPath: codingPath + [key])
    }
}

struct UnkeyedDecoder: UnkeyedDecodingContainer {
    let items: [JSONValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(items: [JSONValue], codingPath: [any CodingKey]) {
        self.items = items
        self.codingPath = codingPath
    }

    var count: Int? { items.count }
    var isAtEnd: Bool { currentIndex >= items.count }

    private var path: [any CodingKey] { codingPath + [IndexKey(currentIndex)] }

    private mutating func next(_ type: Any.Type) throws -> JSONValue {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                type, .init(codingPath: path, debugDescription: "Unkeyed container is at end."))
        }
        defer { currentIndex += 1 }
        return items[currentIndex]
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(Any?.self, .init(codingPath: path, debugDescription: "Unkeyed container is at end."))
        }
        if case .null = items[currentIndex] {
            currentIndex += 1
            return true
        }
        return false
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool {
        let p = path
        let v = try next(type)
        guard case .bool(let b) = v else { throw JSONValueDecoder.mismatch(type, v, p) }
        return b
    }

    mutating func decode(_ type: String.Type) throws -> String {
        let p = path
        let v = try next(type)
        guard case .string(let s) = v else { throw JSONValueDecoder.mismatch(type, v, p) }
        return s
    }

    mutating func decode(_ type: Double.Type) throws -> Double {
        let p = path
        return try JSONValueDecoder.double(try next(type), p)
    }

    mutating func decode(_ type: Float.Type) throws -> Float {
        let p = path
        return Float(try JSONValueDecoder.double(try next(type), p))
    }

    mutating func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }

    private mutating func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        let p = path
        return try JSONValueDecoder.integer(try next(type), type, p)
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let p = path
        return try JSONValueDecoder.unbox(try next(type), as: type, codingPath: p)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        let p = path
        return try ValueDecoder(value: try next(type), codingPath: p).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let p = path
        return try ValueDecoder(value: try next([JSONValue].self), codingPath: p).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        let p = path
        return ValueDecoder(value: try next(JSONValue.self), codingPath: p)
    }
}

struct SingleDecoder: SingleValueDecodingContainer {
    let value: JSONValue
    let codingPath: [any CodingKey]

    func decodeNil() -> Bool {
        if case .null = value { return true }
        return false
    }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .bool(let b) = value else { throw JSONValueDecoder.mismatch(type, value, codingPath) }
        return b
    }

    func decode(_ type: String.Type) throws -> String {
        guard case .string(let s) = value else { throw JSONValueDecoder.mismatch(type, value, codingPath) }
        return s
    }

    func decode(_ type: Double.Type) throws -> Double { try JSONValueDecoder.double(value, codingPath) }
    func decode(_ type: Float.Type) throws -> Float { Float(try JSONValueDecoder.double(value, codingPath)) }
    func decode(_ type: Int.Type) throws -> Int { try JSONValueDecoder.integer(value, type, codingPath) }
    func decode(_ type: Int8.Type) throws -> Int8 { try JSONValueDecoder.integer(value, type, codingPath) }
    func decode(_ type: Int16.Type) throws -> Int16 { try JSONValueDecoder.integer(value, type, codingPath) }
    func decode(_ type: Int32.Type) throws -> Int32 { try JSONValueDecoder.integer(value, type, codingPath) }
    func decode(_ type: Int64.Type) throws -> Int64 { try JSONValueDecoder.integer(value, type, codingPath) }
    func decode(_ type: UInt.Type) throws -> UInt { try JSONValueDecoder.integer(value, type, codingPath) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try JSONValueDecoder.integer(value, type, codingPath) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try JSONValueDecoder.integer(value, type, codingPath) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try JSONValueDecoder.integer(value, type, codingPath) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try JSONValueDecoder.integer(value, type, codingPath) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try JSONValueDecoder.unbox(value, as: type, codingPath: codingPath)
    }
}
