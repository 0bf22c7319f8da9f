import StateStore

/// What a type's `init(from:)` asked for, as the recording decoder saw it.
indirect enum Shape {
    /// A finished schema (a number, a string, a Foundation type).
    case schema(OrderedJSON)
    /// A keyed container with these keys: a struct.
    case object([Field])
    /// A keyed container whose keys are any strings: a `[String: Value]`.
    case dictionary(Shape)
    /// An unkeyed container: an array, a set.
    case array(Shape)
    /// `null` or the shape.
    case nullable(Shape)
    /// A struct or enum with a component of its own.
    case named(ObjectIdentifier)
    /// An enum with synthesized `Codable`: `{"case": {fields}}`, one case per value.
    case cases([EnumCase])
    /// Any JSON: what could not be derived (the reason is in the warnings).
    case any
    /// A container still being recorded (only while a type's `init(from:)` runs).
    case node(Node)
}

struct Field {
    var name: String
    var shape: Shape
    /// Read with `decodeIfPresent`: may be absent or `null`.
    var optional: Bool
    /// `decodeNil(forKey:)` was asked: may be `null`.
    var nullable = false
    /// Written even when `nil` (as `null`) by the type's encoder.
    var alwaysWritten = false
}

struct EnumCase {
    let name: String
    /// The case's fields; `nil` when decoding that case failed.
    var fields: [Field]?
    /// A value of the case, when decoding it succeeded.
    var sample: Any?
}

/// One container's record, filled by the recording decoder.
final class Node {
    enum Kind {
        case none, keyed, dictionary, unkeyed, single
    }

    var kind = Kind.none
    var fields: [Field] = []
    var elements: [Shape] = []
    var single: Shape?
    var nullable = false
    /// The case names of an enum's `CodingKeys`, when `allKeys` was asked for them.
    var caseNames: [String]?
    /// The index into ``caseNames`` that `allKeys` answered.
    var chosenCase: Int?

    func add(_ name: String, _ shape: Shape, optional: Bool) {
        if let index = fields.firstIndex(where: { $0.name == name }) {
            if case .any = fields[index].shape { fields[index].shape = shape }
            fields[index].optional = fields[index].optional && optional
        } else {
            fields.append(Field(name: name, shape: shape, optional: optional))
        }
        if optional, let index = fields.firstIndex(where: { $0.name == name }) { fields[index].nullable = true }
    }

    /// `decodeNil(forKey:)` was asked: the key may hold `null`.
    func markNullable(_ name: String) {
        if let index = fields.firstIndex(where: { $0.name == name }) {
            fields[index].nullable = true
        } else {
            fields.append(Field(name: name, shape: .any, optional: false, nullable: true))
        }
    }
}
