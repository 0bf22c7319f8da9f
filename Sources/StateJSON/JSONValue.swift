/// A JSON document as a Swift value.
///
/// The server uses it for request bodies whose shape it checks before handing parts to a
/// feature's own `Codable` types (for example the `action` of a dispatch).
public enum JSONValue: Sendable, Equatable, Codable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// Numbers compare by value, as RFC 6902's `test` does: `.int(2) == .double(2.0)`. The parser
    /// keeps a fraction that rounds to a whole number (`1.9999999999999999`) or to zero (`1e-400`)
    /// as a double, which is written `2` or `0` and parsed back as an integer: the same number.
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.int(let a), .int(let b)): a == b
        case (.double(let a), .double(let b)): a == b
        case (.int(let a), .double(let b)), (.double(let b), .int(let a)): Int64(exactly: b) == a
        case (.string(let a), .string(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)): a == b
        default: false
        }
    }

    /// The value of `key` when this is an object.
    public subscript(key: String) -> JSONValue? {
        if case .object(let fields) = self { return fields[key] }
        return nil
    }

    /// The JSON type's name, for error messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .int, .double: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

extension JSONValue {
    /// The value as compact UTF-8 JSON with sorted keys (the same shape `JSONCoding.encoder()`
    /// writes), without a Foundation round trip.
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(to: &out)
        return out
    }

    public func write(to out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: [110, 117, 108, 108])
        case .bool(let value): out.append(contentsOf: value ? Array("true".utf8) : Array("false".utf8))
        case .int(let value): out.append(contentsOf: String(value).utf8)
        case .double(let value):
            // Swift's shortest round-trip form ("0.1", "1e+30") is valid JSON; non-finite
            // numbers cannot come from JSONParser.
            // As JSONEncoder writes them: "1" rather than "1.0".
            var text = value.isFinite ? "\(value)" : "null"
            // Negative zero keeps its ".0": "-0" would parse back as the integer 0, signless.
            if text.hasSuffix(".0"), text != "-0.0" { text.removeLast(2) }
            out.append(contentsOf: Array(text.utf8))
        case .string(let value): JSONCoding.appendString(value, to: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                item.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let fields):
            out.append(UInt8(ascii: "{"))
            for (index, key) in fields.keys.sorted().enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONCoding.appendString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                fields[key]?.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }
}
