import Foundation

/// The JSON encoders and decoders the store uses, in one place so every byte it writes has the
/// same shape (sorted keys, no escaped slashes).
public enum JSONCoding {
    public static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    /// Encodes a value to UTF-8 JSON bytes (sorted keys), with ``JSONValueEncoder``.
    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        try JSONValueEncoder.encodeToBytes(value)
    }

    /// Decodes a value from a parsed JSON document, with ``JSONValueDecoder``.
    public static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try JSONValueDecoder.decode(type, from: value)
    }

    /// Parses UTF-8 JSON bytes into a `JSONValue` with the strict ``JSONParser``; `nil` when
    /// they are not JSON.
    public static func parse(_ bytes: [UInt8]) -> JSONValue? {
        try? JSONParser.parse(bytes)
    }

    /// Parses UTF-8 JSON bytes, or says where and why they are not JSON (the failure's
    /// `description` reads `expected ':' at byte 7 (line 1, column 8)`).
    public static func parseOrFailure(_ bytes: [UInt8]) -> Result<JSONValue, JSONParser.Failure> {
        do throws(JSONParser.Failure) {
            return .success(try JSONParser.parse(bytes))
        } catch {
            return .failure(error)
        }
    }

    /// Appends `string` as a JSON string literal (with quotes) to `out`.
    public static func appendString(_ string: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most strings (keys, names, ids) need no escape: copy them in one piece.
        if !needsEscape(string.utf8.span) {
            out.append(contentsOf: string.utf8)
            out.append(UInt8(ascii: "\""))
            return
        }
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [92, 34])
            case UInt8(ascii: "\\"): out.append(contentsOf: [92, 92])
            case 0x0A: out.append(contentsOf: [92, UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [92, UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [92, UInt8(ascii: "t")])
            case 0..<0x20:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [92, UInt8(ascii: "u"), 48, 48, hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// How many bytes ``appendString(_:to:)`` writes for `string`, quotes included.
    public static func quotedCount(_ string: String) -> Int {
        var count = 2
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x0A, 0x0D, 0x09: count += 2
            case 0..<0x20: count += 6
            default: count += 1
            }
        }
        return count
    }

    /// Whether any byte must be escaped in a JSON string: a control character, `"` or `\`.
    /// A plain loop over a span (no closure, no overflow checks): strings are most of a state's
    /// bytes.
    static func needsEscape(_ bytes: Span<UInt8>) -> Bool {
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return true }
            index &+= 1
        }
        return false
    }

    /// `string` as a JSON string literal.
    public static func quoted(_ string: String) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(string.utf8.count + 2)
        appendString(string, to: &out)
        return out
    }
}

/// Builds a JSON array from elements that are already JSON bytes (objects finished by a
/// ``JSONObjectWriter``, say).
public struct JSONArrayWriter {
    public private(set) var bytes: [UInt8] = [UInt8(ascii: "[")]

    public init(capacity: Int = 128) {
        bytes.reserveCapacity(capacity)
    }

    public mutating func append(_ json: [UInt8]) {
        if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
        bytes.append(contentsOf: json)
    }

    /// The finished array.
    public consuming func finish() -> [UInt8] {
        bytes.append(UInt8(ascii: "]"))
        return bytes
    }
}

/// Builds a JSON object byte by byte from fields whose values are already JSON bytes, so an
/// encoded state is spliced into responses and events without being encoded again.
public struct JSONObjectWriter {
    public private(set) var bytes: [UInt8] = [UInt8(ascii: "{")]
    private var first = true

    public init(capacity: Int = 128) {
        bytes.reserveCapacity(capacity)
    }

    private mutating func key(_ key: String) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        JSONCoding.appendString(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    /// A field whose value is raw JSON bytes (`null` when `nil`).
    public mutating func raw(_ name: String, _ json: [UInt8]?) {
        key(name)
        if let json { bytes.append(contentsOf: json) } else { bytes.append(contentsOf: Array("null".utf8)) }
    }

    public mutating func string(_ name: String, _ value: String) {
        key(name)
        JSONCoding.appendString(value, to: &bytes)
    }

    public mutating func int(_ name: String, _ value: Int) {
        key(name)
        bytes.append(contentsOf: String(value).utf8)
    }

    /// The finished object.
    public consuming func finish() -> [UInt8] {
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }
}
