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
            let text: String
            if value == 0, value.sign == .minus {
                // Negative zero keeps its ".0": "-0" would parse back as the integer 0, signless.
                text = "-0.0"
            } else if let whole = Int64(exactly: value) {
                // A whole number as its exact digits: "1" as JSONEncoder writes 1.0, and
                // 920368547758078976 rather than the shortest "9.20368547758079e+17", which
                // parses back as the integer 920368547758079000, another number.
                text = String(whole)
            } else {
                // Swift's shortest round-trip form ("0.1", "1e+30") is valid JSON; non-finite
                // numbers cannot come from JSONParser.
                text = value.isFinite ? "\(value)" : "null"
            }
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

// MARK: Measuring without writing

extension JSONValue {
    /// How many bytes ``bytes`` would have, when at most `maxBytes` and nested at most
    /// `maxDepth` levels deep (containers: `[[1]]` is 2); nil past either. It counts without
    /// writing and stops at the first bound it passes, so it costs at most `maxBytes` even for
    /// a value whose parts are shared many times over (a JSON Patch `copy` shares, it does not
    /// duplicate).
    public func encodedCount(atMost maxBytes: Int, maxDepth: Int = JSONPatch.defaultMaxDepth) -> Int? {
        if case .fits(let bytes) = measure(maxBytes: maxBytes, maxDepth: maxDepth) { return bytes }
        return nil
    }

    enum Measurement: Equatable {
        case fits(Int)
        case tooLarge
        case tooDeep
    }

    /// ``encodedCount(atMost:maxDepth:)``, saying which bound was passed first.
    func measure(maxBytes: Int, maxDepth: Int) -> Measurement {
        var counter = Counter(maxBytes: maxBytes)
        guard counter.visit(self, depthLeft: maxDepth) else { return counter.passed }
        return .fits(counter.bytes)
    }

    private struct Counter {
        let maxBytes: Int
        var bytes = 0
        var passed = Measurement.tooLarge

        init(maxBytes: Int) {
            self.maxBytes = maxBytes
        }

        /// Adds `count` bytes; false once past the bound.
        mutating func add(_ count: Int) -> Bool {
            let (sum, overflow) = bytes.addingReportingOverflow(count)
            bytes = sum
            return !overflow && sum <= maxBytes
        }

        mutating func visit(_ value: JSONValue, depthLeft: Int) -> Bool {
            switch value {
            case .null, .bool, .int, .double:
                guard depthLeft >= 0 else {
                    passed = .tooDeep
                    return false
                }
                switch value {
                case .null: return add(4)
                case .bool(let flag): return add(flag ? 4 : 5)
                case .int(let number): return add(number < 0 ? number.magnitudeDigits + 1 : number.magnitudeDigits)
                default:
                    var text: [UInt8] = []
                    value.write(to: &text)
                    return add(text.count)
                }
            case .string(let text):
                guard depthLeft >= 0 else {
                    passed = .tooDeep
                    return false
                }
                return add(JSONCoding.quotedCount(text))
            case .array(let items):
                guard depthLeft >= 1 else {
                    passed = .tooDeep
                    return false
                }
                guard add(items.isEmpty ? 2 : 1 + items.count) else { return false }
                for item in items {
                    guard visit(item, depthLeft: depthLeft - 1) else { return false }
                }
                return true
            case .object(let fields):
                guard depthLeft >= 1 else {
                    passed = .tooDeep
                    return false
                }
                guard add(fields.isEmpty ? 2 : 1 + fields.count) else { return false }
                for (key, field) in fields {
                    guard add(JSONCoding.quotedCount(key) + 1), visit(field, depthLeft: depthLeft - 1) else { return false }
                }
                return true
            }
        }
    }
}

extension Int64 {
    /// The decimal digits of the magnitude (`-120` has 3).
    fileprivate var magnitudeDigits: Int {
        var rest = magnitude
        var digits = 1
        while rest >= 10 {
            rest /= 10
            digits += 1
        }
        return digits
    }
}
