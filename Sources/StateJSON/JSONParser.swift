/// A strict JSON parser (RFC 8259) producing ``JSONValue``.
///
/// Strict where Foundation is lenient: no trailing commas, no comments, no NaN, no leading
/// zeros, no control characters in strings, valid UTF-8 and escapes only, nothing after the
/// value. Nesting is limited (default 512 levels) so hostile input cannot exhaust the stack,
/// and numbers must be finite.
public struct JSONParser {
    /// Where and why the input is not JSON.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// The byte offset of the problem, from 0.
        public let offset: Int
        public let reason: String
        /// The line of the problem, from 1 (lines end at `\n`).
        public let line: Int
        /// The column of the problem within its line, from 1, counted in bytes.
        public let column: Int
        /// `expected ':' at byte 7 (line 1, column 8)`.
        public var description: String { "\(reason) at byte \(offset) (line \(line), column \(column))" }

        init(offset: Int, reason: String, in bytes: [UInt8]) {
            self.offset = offset
            self.reason = reason
            var line = 1
            var lineStart = 0
            for index in 0..<min(offset, bytes.count) where bytes[index] == 0x0A {
                line += 1
                lineStart = index + 1
            }
            self.line = line
            self.column = offset - lineStart + 1
        }
    }

    private let bytes: [UInt8]
    private var index = 0
    private let maxDepth: Int

    public static func parse(_ bytes: [UInt8], maxDepth: Int = 512) throws(Failure) -> JSONValue {
        var parser = JSONParser(bytes: bytes, maxDepth: maxDepth)
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw parser.fail("unexpected data after the JSON value") }
        return value
    }

    private init(bytes: [UInt8], maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    private func fail(_ reason: String) -> Failure { Failure(offset: index, reason: reason, in: bytes) }

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func value(depth: Int) throws(Failure) -> JSONValue {
        guard let byte = current else { throw fail("unexpected end of input") }
        switch byte {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw fail("unexpected character")
        }
    }

    private mutating func literal(_ word: String) throws(Failure) {
        for expected in word.utf8 {
            guard index < bytes.count else { throw fail("unexpected end of input") }
            guard bytes[index] == expected else { throw fail("invalid literal") }
            index += 1
        }
    }

    private mutating func object(depth: Int) throws(Failure) -> JSONValue {
        guard depth <= maxDepth else { throw fail("nesting deeper than \(maxDepth) levels") }
        index += 1
        var fields: [String: JSONValue] = [:]
        skipWhitespace()
        if current == UInt8(ascii: "}") {
            index += 1
            return .object(fields)
        }
        while true {
            skipWhitespace()
            guard current == UInt8(ascii: "\"") else { throw fail("expected a string key") }
            let key = try string()
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw fail("expected ':'") }
            index += 1
            skipWhitespace()
            fields[key] = try value(depth: depth)
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"):
                index += 1
                return .object(fields)
            default: throw fail("expected ',' or '}'")
            }
        }
    }

    private mutating func array(depth: Int) throws(Failure) -> JSONValue {
        guard depth <= maxDepth else { throw fail("nesting deeper than \(maxDepth) levels") }
        index += 1
        var items: [JSONValue] = []
        skipWhitespace()
        if current == UInt8(ascii: "]") {
            index += 1
            return .array(items)
        }
        while true {
            skipWhitespace()
            items.append(try value(depth: depth))
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"):
                index += 1
                return .array(items)
            default: throw fail("expected ',' or ']'")
            }
        }
    }

    private mutating func string() throws(Failure) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes.
        var nonASCII: UInt8 = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                // `String(validating:)` is generic in the standard library (unspecialized, with
                // metadata lookups: about a thousand instructions a string). Decoding is
                // specialized here; it repairs invalid UTF-8, so a string with non-ASCII bytes
                // is valid exactly when decoding left its bytes as they were.
                let slice = bytes[start..<index]
                let text = String(decoding: slice, as: UTF8.self)
                guard nonASCII & 0x80 == 0 || text.utf8.elementsEqual(slice) else {
                    throw fail("invalid UTF-8 in a string")
                }
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw fail("control character in a string") }
            nonASCII |= byte
            index += 1
        }
        var out = Array(bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: out, as: UTF8.self) else { throw fail("invalid UTF-8 in a string") }
                index += 1
                return text
            case UInt8(ascii: "\\"):
                index += 1
                guard let escape = current else { throw fail("unexpected end of input") }
                index += 1
                switch escape {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard current == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u") else {
                            throw fail("unpaired surrogate")
                        }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw fail("unpaired surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw fail("unpaired surrogate")
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw fail("invalid escape") }
                    out.append(contentsOf: Array(String(Character(unicode)).utf8))
                default: throw fail("invalid escape")
                }
            default:
                if byte < 0x20 { throw fail("control character in a string") }
                out.append(byte)
                index += 1
            }
        }
        throw fail("unterminated string")
    }

    private mutating func hex4() throws(Failure) -> UInt32 {
        guard index + 4 <= bytes.count else { throw fail("unexpected end of input") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw fail("invalid \\u escape")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    private mutating func digits() -> Int {
        let start = index
        while let byte = current, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { index += 1 }
        return index - start
    }

    private mutating func number() throws(Failure) -> JSONValue {
        let start = index
        if current == UInt8(ascii: "-") { index += 1 }
        guard let first = current, first >= UInt8(ascii: "0"), first <= UInt8(ascii: "9") else {
            throw fail("invalid number")
        }
        if first == UInt8(ascii: "0") {
            index += 1
        } else {
            _ = digits()
        }
        var integral = true
        if current == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { throw fail("invalid number") }
            integral = false
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            index += 1
            if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { throw fail("invalid number") }
            integral = false
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if integral, let value = Int64(text) { return .int(value) }
        // A fraction or exponent whose value as written is a whole number that fits (`1e16`,
        // `2.50e1`) is an integer; anything else is a double, never rounded into an integer
        // (`1.9999999999999999` stays a double even though it rounds to 2.0).
        if !integral, let value = Self.exactInteger(text) { return .int(value) }
        guard let value = Double(text), value.isFinite else { throw fail("number out of range") }
        return .double(value)
    }

    /// The value of a JSON number literal if it is exactly a whole number in Int64, else nil.
    /// `-0.0` stays a double (its sign would be lost).
    static func exactInteger(_ text: String) -> Int64? {
        var utf8 = Substring(text).utf8[...]
        let negative = utf8.first == UInt8(ascii: "-")
        if negative { utf8 = utf8.dropFirst() }
        var mantissa: [UInt8] = []
        var scale = 0
        var seenPoint = false
        while let byte = utf8.first, byte != UInt8(ascii: "e"), byte != UInt8(ascii: "E") {
            utf8 = utf8.dropFirst()
            if byte == UInt8(ascii: ".") {
                seenPoint = true
            } else {
                mantissa.append(byte)
                if seenPoint { scale -= 1 }
            }
        }
        if !utf8.isEmpty {
            utf8 = utf8.dropFirst()
            let exponentNegative = utf8.first == UInt8(ascii: "-")
            if utf8.first == UInt8(ascii: "-") || utf8.first == UInt8(ascii: "+") { utf8 = utf8.dropFirst() }
            var exponent = 0
            for byte in utf8 {
                // Beyond 10^6 nothing non-zero is both whole and in range; clamp instead of overflowing.
                exponent = min(exponent * 10 + Int(byte - UInt8(ascii: "0")), 1_000_000)
            }
            scale += exponentNegative ? -exponent : exponent
        }
        while let first = mantissa.first, first == UInt8(ascii: "0") { mantissa.removeFirst() }
        if mantissa.isEmpty { return negative ? nil : 0 }
        while let last = mantissa.last, last == UInt8(ascii: "0") {
            mantissa.removeLast()
            scale += 1
        }
        guard scale >= 0, mantissa.count + scale <= 19 else { return nil }
        let digits = String(decoding: mantissa, as: UTF8.self) + String(repeating: "0", count: scale)
        return Int64((negative ? "-" : "") + digits)
    }
}
