// JSONValueEncoder.encodeTaggedToBytes writes a case as its tagged object without copying it, and
// JSONValueDecoder.decodeTagged reads a tagged object as its untagged form without building it:
// every answer (value or error) must be the one decoding TaggedJSON.untag's copy gives.

import Foundation
import StateJSON
import Testing

private enum Move: Codable, Equatable {
    case clear
    case step(by: Int)
    case go(to: Point, fast: Bool?)
    case named(type: String?)  // a field called `type` is the tag's, never the case's
    case zoom(x: Int, zeta: Int, a: Bool)  // fields both sides of `type` in sorted order
}

private struct Point: Codable, Equatable {
    var x: Int
    var y: [Int]
}

/// An action decoded by hand from a single value: sees the untagged form as a whole.
private struct Whole: Decodable, Equatable {
    let value: JSONValue
    init(from decoder: any Decoder) throws {
        value = try decoder.singleValueContainer().decode(JSONValue.self)
    }
}

/// An action whose decoder reads the untagged form's only key itself.
private struct KeyCounter: Decodable, Equatable {
    let keys: [String]
    let hasCase: Bool
    struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        keys = container.allKeys.map(\.stringValue).sorted()
        hasCase = container.contains(Key(stringValue: "type"))
    }
}

@Suite("Tagged decoding and encoding")
struct TaggedDecodingTests {
    @Test("a case is written with its type among its fields in sorted order: the bytes of tagging the untagged encoding")
    func encodingIsTheTaggedForm() throws {
        let values: [Move] = [
            .clear, .step(by: -3), .go(to: Point(x: 1, y: [2, 3]), fast: nil), .go(to: Point(x: 0, y: []), fast: true),
            .named(type: "shadow"), .named(type: nil), .zoom(x: 1, zeta: 2, a: false),
        ]
        for value in values {
            let untagged = try #require(JSONCoding.parse(try JSONCoding.encode(value)))
            let bytes = try JSONValueEncoder.encodeTaggedToBytes(value)
            #expect(String(decoding: bytes, as: UTF8.self) == String(decoding: TaggedJSON.tag(untagged).bytes, as: UTF8.self))
        }
    }

    static let cases = [
        #"{"type":"clear"}"#, #"{"type":"clear","extra":1}"#, #"{"type":"step","by":3}"#, #"{"type":"step","by":1.5}"#,
        #"{"type":"step"}"#, #"{"type":"step","by":"3"}"#, #"{"type":"step","by":null}"#,
        #"{"type":"go","to":{"x":1,"y":[2,3]}}"#, #"{"type":"go","to":{"x":1,"y":[2,"a"]},"fast":true}"#,
        #"{"type":"go","to":{"x":1}}"#, #"{"type":"named"}"#, #"{"type":"zoom","x":1,"zeta":2,"a":true}"#, #"{"type":"unknown"}"#, #"{"type":""}"#,
    ]

    /// The value, or the error's kind and coding path, of one way of decoding.
    static func outcome<T: Decodable & Equatable>(_ decode: () throws -> T) -> String {
        do {
            return "value \(try decode())"
        } catch let error as DecodingError {
            switch error {
            case .keyNotFound(let key, let context):
                return "keyNotFound \(key.stringValue) at \(context.codingPath.map(\.stringValue))"
            case .typeMismatch(let type, let context): return "typeMismatch \(type) at \(context.codingPath.map(\.stringValue))"
            case .valueNotFound(let type, let context): return "valueNotFound \(type) at \(context.codingPath.map(\.stringValue))"
            case .dataCorrupted(let context): return "dataCorrupted at \(context.codingPath.map(\.stringValue))"
            @unknown default: return "other"
            }
        } catch {
            return "error \(error)"
        }
    }

    static func both<T: Decodable & Equatable>(_ type: T.Type, _ text: String) throws -> (tagged: String, untagged: String) {
        guard case .object(let fields) = json(text), case .string(let tag)? = fields["type"] else {
            throw CocoaError(.coderInvalidValue)
        }
        let untagged = try #require(TaggedJSON.untag(json(text))).untagged
        return (
            outcome { try JSONValueDecoder.decodeTagged(type, fields: fields, tag: tag) },
            outcome { try JSONValueDecoder.decode(type, from: untagged) }
        )
    }

    @Test("a synthesized enum decodes as from the untagged copy: values, and errors at the same coding path", arguments: cases)
    func synthesizedEnum(text: String) throws {
        let (tagged, untagged) = try Self.both(Move.self, text)
        #expect(tagged == untagged)
    }

    @Test("the tag is not one of the case's fields, even a case with a field called type")
    func typeIsNotAField() throws {
        let fields: [String: JSONValue] = ["type": .string("named")]
        #expect(try JSONValueDecoder.decodeTagged(Move.self, fields: fields, tag: "named") == .named(type: nil))
        #expect(try JSONValueDecoder.decodeTagged(Move.self, fields: ["type": .string("step"), "by": .int(2)], tag: "step") == .step(by: 2))
    }

    @Test("the fields a synthesized decoder asks for are its case's: present or not, optional or not")
    func askedFields() throws {
        func asked(_ text: String) throws -> Set<String> {
            guard case .object(let fields) = json(text), case .string(let tag)? = fields["type"] else { return [] }
            let log = AskedFields()
            _ = try? JSONValueDecoder.decodeTagged(Move.self, fields: fields, tag: tag, asking: log)
            return log.names.subtracting(["type"])
        }
        #expect(try asked(#"{"type":"step","by":3,"extra":1}"#) == ["by"])
        #expect(try asked(#"{"type":"go","to":{"x":1,"y":[]}}"#) == ["to", "fast"])
        #expect(try asked(#"{"type":"zoom","x":1,"zeta":2,"a":true,"b":0}"#) == ["x", "zeta", "a"])
        #expect(try asked(#"{"type":"clear","by":3}"#) == [])
    }

    @Test("decoders that read the whole value or its keys see the untagged form", arguments: cases)
    func handWrittenDecoders(text: String) throws {
        guard case .object(let fields) = json(text), case .string(let tag)? = fields["type"] else { return }
        let untagged = try #require(TaggedJSON.untag(json(text))).untagged
        // Values compared, not their descriptions (a dictionary's order is not its value).
        #expect(try JSONValueDecoder.decodeTagged(Whole.self, fields: fields, tag: tag) == JSONValueDecoder.decode(Whole.self, from: untagged))
        let keys = try Self.both(KeyCounter.self, text)
        #expect(keys.tagged == keys.untagged)
    }
}
