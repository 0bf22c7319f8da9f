import Foundation
import StateStore
import Testing

/// The store's own JSON encoder and decoder agree with Foundation's on meaning.
@Suite("JSONValue encoder and decoder")
struct CodingTests {
    struct Inner: Codable, Equatable {
        var label: String
        var weights: [Double]
    }

    enum Shape: Codable, Equatable {
        case circle(radius: Double)
        case square(side: Int, label: String?)
        case empty
    }

    struct Everything: Codable, Equatable {
        var int: Int
        var int8: Int8
        var uint64: UInt64
        var double: Double
        var float: Float
        var bool: Bool
        var string: String
        var optionalPresent: String?
        var optionalAbsent: Int?
        var array: [Int]
        var nested: [Inner]
        var dictionary: [String: Int]
        var shapes: [Shape]
        var data: Data
        var url: URL
        var date: Date
    }

    static let sample = Everything(
        int: -42, int8: 7, uint64: 18_000_000_000, double: 0.1, float: 2.5, bool: true,
        string: "quote \" backslash \\ newline \n tab \t unicode é 😀 slash /",
        optionalPresent: "here", optionalAbsent: nil, array: [1, 2, 3],
        nested: [Inner(label: "a", weights: [1.5, 2, -0.25])], dictionary: ["b": 2, "a": 1],
        shapes: [.circle(radius: 1.5), .square(side: 2, label: nil), .empty],
        data: Data([0, 1, 2, 255]), url: URL(string: "https://example.com/x?y=1")!,
        date: Date(timeIntervalSinceReferenceDate: 1000.5))

    @Test func encodingMeansWhatFoundationMeans() throws {
        let ours = try JSONCoding.encode(Self.sample)
        let foundation = try JSONCoding.encoder().encode(Self.sample)
        // Same document: both parse to the same value.
        #expect(try JSONParser.parse(ours) == JSONParser.parse(Array(foundation)))
        // And Foundation decodes ours back to the same value.
        #expect(try JSONDecoder().decode(Everything.self, from: Data(ours)) == Self.sample)
    }

    /// Writes keys in an order, some twice (the last value wins, as in a dictionary), with more
    /// keys than the encoder searches linearly.
    struct Scrambled: Encodable {
        let keys: [String]
        struct Key: CodingKey {
            let stringValue: String
            init(stringValue: String) { self.stringValue = stringValue }
            var intValue: Int? { nil }
            init?(intValue: Int) { nil }
        }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            for (index, key) in keys.enumerated() { try container.encode(index, forKey: Key(stringValue: key)) }
            var nested = container.nestedContainer(keyedBy: Key.self, forKey: Key(stringValue: "nested"))
            try nested.encode("x", forKey: Key(stringValue: "b"))
            try nested.encode("y", forKey: Key(stringValue: "a"))
            try nested.encode("z", forKey: Key(stringValue: "b"))
            let superEncoder = container.superEncoder(forKey: Key(stringValue: "super"))
            var single = superEncoder.singleValueContainer()
            try single.encode([3, 2, 1])
        }
    }

    /// A case whose payload is written as a value, not a nested container, and one whose
    /// payload has its own `type` field.
    enum Odd: Encodable {
        case valuePayload
        case typed
        case notACase
        enum Key: String, CodingKey { case valuePayload, typed, type, a, b }
        func encode(to encoder: any Encoder) throws {
            switch self {
            case .valuePayload:
                var container = encoder.container(keyedBy: Key.self)
                try container.encode(JSONValue.object(["a": .int(1)]), forKey: .valuePayload)
            case .typed:
                var container = encoder.container(keyedBy: Key.self)
                var nested = container.nestedContainer(keyedBy: Key.self, forKey: .typed)
                try nested.encode("inner", forKey: .type)
                try nested.encode(2, forKey: .b)
            case .notACase:
                var container = encoder.container(keyedBy: Key.self)
                try container.encode(1, forKey: .a)
                try container.encode(2, forKey: .b)
            }
        }
    }

    /// The bytes written straight from the encoder's containers are those of the `JSONValue`
    /// it resolves to, tagged or not.
    @Test func directBytesMatchTheValue() throws {
        let many = (0..<20).map { "k\($0)" }
        func check<T: Encodable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws {
            let reference = try JSONValueEncoder.encode(value)
            #expect(try JSONValueEncoder.encodeToBytes(value) == reference.bytes, sourceLocation: sourceLocation)
            let tagged = TaggedJSON.tag(reference)
            #expect(try JSONValueEncoder.encodeTaggedToBytes(value) == tagged.bytes, sourceLocation: sourceLocation)
        }
        try check(Self.sample)
        for shape in Self.sample.shapes { try check(shape) }
        try check(Scrambled(keys: ["b", "a", "c", "a"]))
        try check(Scrambled(keys: many.reversed() + ["k3", "k15", "zz", "k0"]))
        try check(Odd.valuePayload)
        try check(Odd.typed)
        try check(Odd.notACase)
        try check(42)
        try check(["x", "y"])
        #expect(try JSONValueEncoder.encodeTaggedToBytes(Odd.typed) == Array(#"{"b":2,"type":"typed"}"#.utf8))
    }

    @Test func decodingRoundTrips() throws {
        let json = try JSONParser.parse(Array(JSONCoding.encoder().encode(Self.sample)))
        #expect(try JSONCoding.decode(Everything.self, from: json) == Self.sample)
    }

    @Test func keysAreSortedAndOptionalsOmitted() throws {
        struct Small: Codable { var b = 1; var a: Int? = nil; var c = "x" }
        #expect(try JSONCoding.encode(Small()) == Array(#"{"b":1,"c":"x"}"#.utf8))
    }

    @Test func nonFiniteNumbersDoNotEncode() {
        #expect(throws: EncodingError.self) { try JSONCoding.encode(["x": Double.nan]) }
        #expect(throws: EncodingError.self) { try JSONCoding.encode([Double.infinity]) }
    }

    @Test func numbersMustFitTheirTypeExactly() throws {
        struct Holder: Codable { var value: Int8 }
        for text in [#"{"value":1.5}"#, #"{"value":128}"#, #"{"value":1e30}"#] {
            let json = try JSONParser.parse(Array(text.utf8))
            do {
                _ = try JSONCoding.decode(Holder.self, from: json)
                Issue.record("\(text) decoded")
            } catch DecodingError.dataCorrupted(let context) {
                #expect(context.codingPath.map(\.stringValue) == ["value"], "\(text)")
            }
        }
        let exact = try JSONParser.parse(Array(#"{"value":-128}"#.utf8))
        #expect(try JSONCoding.decode(Holder.self, from: exact).value == -128)
    }

    @Test func errorsNameTheField() throws {
        let missing = try JSONParser.parse(Array(#"{"nested":[{"label":"a"}]}"#.utf8))
        struct Outer: Codable { var nested: [Inner] }
        do {
            _ = try JSONCoding.decode(Outer.self, from: missing)
            Issue.record("decoded")
        } catch DecodingError.keyNotFound(let key, let context) {
            #expect(key.stringValue == "weights")
            #expect(context.codingPath.map(\.stringValue) == ["nested", "Index 0"])
        }
        let mistyped = try JSONParser.parse(Array(#"{"nested":[{"label":3,"weights":[]}]}"#.utf8))
        do {
            _ = try JSONCoding.decode(Outer.self, from: mistyped)
            Issue.record("decoded")
        } catch DecodingError.typeMismatch(_, let context) {
            #expect(context.codingPath.map(\.stringValue) == ["nested", "Index 0", "label"])
        }
        let null = try JSONParser.parse(Array(#"{"nested":null}"#.utf8))
        #expect(throws: DecodingError.self) { try JSONCoding.decode(Outer.self, from: null) }
    }

    @Test func parserIsStrict() {
        for bad in ["{\"a\":1,}", "[1,]", "01", "1.", ".5", "+1", "NaN", "[1] x", "\"\u{01}\"", "\"\\x\"", "\"\\ud800\"", "1e999", "{'a':1}", "tru"] {
            #expect(throws: JSONParser.Failure.self, "\(bad)") { try JSONParser.parse(Array(bad.utf8)) }
        }
        #expect(throws: JSONParser.Failure.self) { try JSONParser.parse([0x22, 0xFF, 0x22]) }
        let deep = Array(repeating: UInt8(ascii: "["), count: 100_000)
        #expect(throws: JSONParser.Failure.self) { try JSONParser.parse(deep) }
    }

    /// Strings without escapes are decoded on a fast path: every malformed UTF-8 form is still
    /// refused, including those whose repair would have the same length (a truncated 4-byte
    /// sequence becomes one 3-byte U+FFFD), and raw multi-byte text is kept as sent.
    @Test func parserChecksUTF8InStrings() throws {
        let malformed: [[UInt8]] = [
            [0xFF], [0xC3], [0xC0, 0xAF], [0xE0, 0x80, 0x80], [0xED, 0xA0, 0x80], [0xF0, 0x9F, 0x98],
            [0xF4, 0x90, 0x80, 0x80], [0x80], [0x61, 0xEF, 0xBF], [0xEF, 0xBF, 0xBD, 0xFF],
        ]
        for bytes in malformed {
            #expect(throws: JSONParser.Failure.self, "\(bytes)") { try JSONParser.parse([0x22] + bytes + [0x22]) }
            #expect(throws: JSONParser.Failure.self, "key \(bytes)") { try JSONParser.parse([0x7B, 0x22] + bytes + Array(#"":1}"#.utf8)) }
        }
        let text = "é😀 ü \u{FFFD} 中文"
        #expect(try JSONParser.parse(Array("\"\(text)\"".utf8)) == .string(text))
        #expect(try JSONParser.parse(Array("{\"\(text)\":\"ascii\"}".utf8))[text] == .string("ascii"))
    }

    @Test func parserAcceptsValidJSON() throws {
        // -2.5e3 is a whole number as written: an integer (issue 11 item 6).
        let value = try JSONParser.parse(Array(#" {"a": [1, -2.5e3, true, false, null, "\u00e9\ud83d\ude00\n"], "b": {}} "#.utf8))
        #expect(value["a"] == .array([.int(1), .int(-2500), .bool(true), .bool(false), .null, .string("é😀\n")]))
        #expect(value["b"] == .object([:]))
    }
}
