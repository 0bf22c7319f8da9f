/// A JSON value whose objects keep their keys in order, for documents people read and edit (the
/// OpenAPI description): parsed from a file and written back with the same key order, numbers
/// kept as their literal text.
///
/// Reading a missing key or index gives `.null`; assigning `.null` through the subscript
/// removes the key (use ``setNull(_:)`` for an explicit `null`). A new key is appended.
public enum OrderedJSON: Sendable, Hashable {
    case null
    case bool(Bool)
    /// A number as its JSON literal (`1`, `-0.5`, `1e3`).
    case number(String)
    case string(String)
    case array([OrderedJSON])
    case object([(key: String, value: OrderedJSON)])

    public static func == (lhs: OrderedJSON, rhs: OrderedJSON) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.number(let a), .number(let b)): a == b
        case (.string(let a), .string(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)):
            a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let value): hasher.combine(value)
        case .number(let value): hasher.combine(value)
        case .string(let value): hasher.combine(value)
        case .array(let value): hasher.combine(value)
        case .object(let fields):
            for field in fields {
                hasher.combine(field.key)
                hasher.combine(field.value)
            }
        }
    }

    /// The value of `key` in an object (`.null` when absent or not an object). Setting a value
    /// replaces it in place or appends it; setting `.null` removes the key. Setting a key on a
    /// value that is not an object makes it an empty object first.
    public subscript(key: String) -> OrderedJSON {
        get {
            guard case .object(let fields) = self else { return .null }
            return fields.first { $0.key == key }?.value ?? .null
        }
        set {
            var fields: [(key: String, value: OrderedJSON)] = []
            if case .object(let existing) = self { fields = existing }
            if let index = fields.firstIndex(where: { $0.key == key }) {
                if newValue == .null { fields.remove(at: index) } else { fields[index].value = newValue }
            } else if newValue != .null {
                fields.append((key, newValue))
            }
            self = .object(fields)
        }
    }

    /// The element at `index` of an array (`.null` when out of range or not an array).
    public subscript(index: Int) -> OrderedJSON {
        guard case .array(let elements) = self, elements.indices.contains(index) else { return .null }
        return elements[index]
    }

    /// Sets `key` to an explicit `null`.
    public mutating func setNull(_ key: String) {
        self[key] = .string("")
        guard case .object(var fields) = self, let index = fields.firstIndex(where: { $0.key == key }) else { return }
        fields[index].value = .null
        self = .object(fields)
    }

    /// Sets `key`, placing a new key right after `anchor` (when present) rather than at the end.
    public mutating func set(_ key: String, _ value: OrderedJSON, after anchor: String) {
        guard case .object(var fields) = self, !fields.contains(where: { $0.key == key }),
            let index = fields.firstIndex(where: { $0.key == anchor })
        else {
            self[key] = value
            return
        }
        fields.insert((key, value), at: index + 1)
        self = .object(fields)
    }

    /// Inserts `key` before `anchor` (at the end when `anchor` is absent); replaces it in place
    /// when it is already there.
    public mutating func insert(_ key: String, _ value: OrderedJSON, before anchor: String) {
        guard case .object(var fields) = self, !fields.contains(where: { $0.key == key }),
            let index = fields.firstIndex(where: { $0.key == anchor })
        else {
            self[key] = value
            return
        }
        fields.insert((key, value), at: index)
        self = .object(fields)
    }

    /// The keys of an object, in order (empty for anything else).
    public var keys: [String] {
        guard case .object(let fields) = self else { return [] }
        return fields.map(\.key)
    }

    /// The elements of an array (empty for anything else).
    public var elements: [OrderedJSON] {
        guard case .array(let elements) = self else { return [] }
        return elements
    }

    /// The string, when this is one.
    public var stringValue: String? {
        guard case .string(let value) = self else { return nil }
        return value
    }

    /// Sets `description`, right after `type` or `const` when the key is new.
    public mutating func describe(_ text: String) {
        let anchor = keys.contains("type") ? "type" : keys.contains("const") ? "const" : "$ref"
        set("description", .string(text), after: anchor)
    }

    /// The schema of `property` (an object schema's `properties[property]`).
    public subscript(property name: String) -> OrderedJSON {
        get { self["properties"][name] }
        set { self["properties"][name] = newValue }
    }

    /// Marks `property` required (an object schema's `required`), keeping the order of the list.
    public mutating func require(_ property: String) {
        var required = self["required"].elements
        guard !required.contains(.string(property)) else { return }
        required.append(.string(property))
        if keys.contains("required") {
            self["required"] = .array(required)
        } else {
            set("required", .array(required), after: keys.contains("description") ? "description" : "type")
        }
    }

    /// Every value in this tree, depth first, with `body` free to change it.
    public mutating func transform(_ body: (inout OrderedJSON) -> Void) {
        body(&self)
        switch self {
        case .array(var elements):
            for index in elements.indices { elements[index].transform(body) }
            self = .array(elements)
        case .object(var fields):
            for index in fields.indices { fields[index].value.transform(body) }
            self = .object(fields)
        default: break
        }
    }
}

// MARK: - Literals

extension OrderedJSON: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral, ExpressibleByFloatLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .number(String(value)) }
    public init(floatLiteral value: Double) { self = .number(String(value)) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: OrderedJSON...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, OrderedJSON)...) { self = .object(elements.map { ($0.0, $0.1) }) }
    public init(nilLiteral: ()) { self = .null }
}

// MARK: - JSONValue

extension OrderedJSON {
    /// `value` with its object keys sorted (the order ``JSONCoding`` writes).
    public init(_ value: JSONValue) {
        switch value {
        case .null: self = .null
        case .bool(let value): self = .bool(value)
        case .int(let value): self = .number(String(value))
        case .double(let value):
            self = .number(Int64(exactly: value).map { String($0) } ?? String(value))
        case .string(let value): self = .string(value)
        case .array(let values): self = .array(values.map(OrderedJSON.init))
        case .object(let fields):
            self = .object(fields.keys.sorted().map { ($0, OrderedJSON(fields[$0]!)) })
        }
    }

    /// This value as a ``JSONValue`` (key order is lost); `nil` when a number does not parse.
    public var jsonValue: JSONValue? {
        switch self {
        case .null: return .null
        case .bool(let value): return .bool(value)
        case .number(let text):
            if let int = Int64(text) { return .int(int) }
            return Double(text).map(JSONValue.double)
        case .string(let value): return .string(value)
        case .array(let values):
            var out: [JSONValue] = []
            for value in values {
                guard let converted = value.jsonValue else { return nil }
                out.append(converted)
            }
            return .array(out)
        case .object(let fields):
            var out: [String: JSONValue] = [:]
            for field in fields {
                guard let converted = field.value.jsonValue else { return nil }
                out[field.key] = converted
            }
            return .object(out)
        }
    }
}

// MARK: - Parsing and writing

extension OrderedJSON {
    /// Parses UTF-8 JSON keeping the order of object keys; checked by ``JSONParser`` first, so
    /// anything it refuses is refused here too.
    public static func parse(_ bytes: [UInt8]) throws(JSONParser.Failure) -> OrderedJSON {
        _ = try JSONParser.parse(bytes)
        var reader = Reader(bytes: bytes)
        return reader.value()
    }

    /// The document indented by two spaces, `": "` after keys, one element per line, non-ASCII
    /// text as it is (the layout of Python's `json.dumps(indent=2, ensure_ascii=False)`), with a
    /// final newline.
    public func pretty() -> [UInt8] {
        var out: [UInt8] = []
        write(to: &out, indent: 0)
        out.append(0x0A)
        return out
    }

    private func write(to out: inout [UInt8], indent: Int) {
        func newline(_ level: Int) {
            out.append(0x0A)
            out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: level * 2))
        }
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case .number(let text): out.append(contentsOf: text.utf8)
        case .string(let text): JSONCoding.appendString(text, to: &out)
        case .array(let elements):
            guard !elements.isEmpty else { return out.append(contentsOf: "[]".utf8) }
            out.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                newline(indent + 1)
                element.write(to: &out, indent: indent + 1)
            }
            newline(indent)
            out.append(UInt8(ascii: "]"))
        case .object(let fields):
            guard !fields.isEmpty else { return out.append(contentsOf: "{}".utf8) }
            out.append(UInt8(ascii: "{"))
            for (index, field) in fields.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                newline(indent + 1)
                JSONCoding.appendString(field.key, to: &out)
                out.append(contentsOf: ": ".utf8)
                field.value.write(to: &out, indent: indent + 1)
            }
            newline(indent)
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Reads a document ``JSONParser`` has already accepted, so it need not report errors.
    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        mutating func skipWhitespace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func value() -> OrderedJSON {
            skipWhitespace()
            guard index < bytes.count else { return .null }
            switch bytes[index] {
            case UInt8(ascii: "{"):
                index += 1
                var fields: [(key: String, value: OrderedJSON)] = []
                skipWhitespace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                    index += 1
                    return .object(fields)
                }
                while index < bytes.count {
                    skipWhitespace()
                    let key = string()
                    skipWhitespace()
                    index += 1  // :
                    fields.append((key, value()))
                    skipWhitespace()
                    let separator = index < bytes.count ? bytes[index] : UInt8(ascii: "}")
                    index += 1
                    if separator == UInt8(ascii: "}") { break }
                }
                return .object(fields)
            case UInt8(ascii: "["):
                index += 1
                var elements: [OrderedJSON] = []
                skipWhitespace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                    index += 1
                    return .array(elements)
                }
                while index < bytes.count {
                    elements.append(value())
                    skipWhitespace()
                    let separator = index < bytes.count ? bytes[index] : UInt8(ascii: "]")
                    index += 1
                    if separator == UInt8(ascii: "]") { break }
                }
                return .array(elements)
            case UInt8(ascii: "\""):
                return .string(string())
            case UInt8(ascii: "t"):
                index += 4
                return .bool(true)
            case UInt8(ascii: "f"):
                index += 5
                return .bool(false)
            case UInt8(ascii: "n"):
                index += 4
                return .null
            default:
                let start = index
                while index < bytes.count, !Set(",]} \t\r\n".utf8).contains(bytes[index]) { index += 1 }
                return .number(String(decoding: bytes[start..<index], as: UTF8.self))
            }
        }

        /// A string literal at `index` (its escapes decoded by the strict parser).
        mutating func string() -> String {
            let start = index
            index += 1
            while index < bytes.count, bytes[index] != UInt8(ascii: "\"") {
                index += bytes[index] == UInt8(ascii: "\\") ? 2 : 1
            }
            index += 1
            let literal = Array(bytes[start..<min(index, bytes.count)])
            if !literal.contains(UInt8(ascii: "\\")) {
                return String(decoding: literal.dropFirst().dropLast(), as: UTF8.self)
            }
            if case .string(let text)? = try? JSONParser.parse(literal) { return text }
            return ""
        }
    }
}
