import Foundation
import StateStore

/// Derives the shapes of `Decodable` types by running their `init(from:)` on a
/// ``RecordingDecoder``. One derivation holds every type it met, so a type used twice is derived
/// once and a recursive type refers to itself.
///
/// An enum with synthesized `Codable` reads `allKeys` of a container keyed by its `CodingKeys`;
/// their names come from the runtime's metadata (``TypeReflection``), and the enum is decoded
/// once per case. Not thread-safe: one derivation is used by one caller.
final class Derivation {
    /// A struct or enum with a component of its own, in the order they were finished.
    struct Named {
        let type: Any.Type
        var shape: Shape
    }

    private(set) var named: [ObjectIdentifier: Named] = [:]
    private(set) var namedOrder: [ObjectIdentifier] = []
    private(set) var warnings: [String] = []
    private var shapes: [ObjectIdentifier: Shape] = [:]
    private var samples: [ObjectIdentifier: Any] = [:]
    private var inProgress: Set<ObjectIdentifier> = []
    private var recursive: Set<ObjectIdentifier> = []
    /// Per type being derived (innermost last): arrays to answer empty on the next attempt,
    /// with their element's shape.
    private var hints: [[String: Shape]] = []

    /// Takes values of every type found inside `value` (its stored properties, elements and
    /// associated values, through `Mirror`) as samples, so that a type whose `init(from:)`
    /// refuses the decoder's own samples does not stop the types around it.
    func seed(_ value: Any, depth: Int = 0) {
        guard depth < 32 else { return }
        let id = ObjectIdentifier(Swift.type(of: value))
        if samples[id] == nil, Swift.type(of: value) is any Decodable.Type { samples[id] = value }
        for child in Mirror(reflecting: value).children { seed(child.value, depth: depth + 1) }
    }

    /// The shape of `type`: `.named` for structs and enums, the shape itself for the rest.
    func shape(of type: any Decodable.Type) -> Shape {
        let id = ObjectIdentifier(type)
        if let known = shapes[id] { return known }
        if let leaf = Leaf.of(type) {
            shapes[id] = .schema(leaf.schema)
            samples[id] = leaf.sample
            return .schema(leaf.schema)
        }
        if inProgress.contains(id) {
            recursive.insert(id)
            return .named(id)
        }
        inProgress.insert(id)
        hints.append([:])
        let result = derive(type)
        hints.removeLast()
        inProgress.remove(id)
        shapes[id] = result
        return result
    }

    /// A value of `type`, once its derivation made one.
    func sample(of type: any Decodable.Type) -> Any? {
        samples[ObjectIdentifier(type)]
    }

    /// The values of each case of an enum `type`, by case name, as far as they could be made.
    func caseSamples(of type: any Decodable.Type) -> [String: Any] {
        guard case .cases(let cases)? = named[ObjectIdentifier(type)]?.shape else { return [:] }
        var out: [String: Any] = [:]
        for enumCase in cases {
            if let sample = enumCase.sample { out[enumCase.name] = sample }
        }
        return out
    }

    func warn(_ message: String) {
        if !warnings.contains(message) { warnings.append(message) }
    }

    func emptyArrayHint(at path: String) -> Shape? { hints.last?[path] }

    func hintEmptyArray(at path: String, element: Shape) {
        guard !hints.isEmpty, hints[hints.count - 1][path] == nil else { return }
        hints[hints.count - 1][path] = element
    }

    private var hintCount: Int { hints.last?.count ?? 0 }

    /// Runs `init(from:)` once (again while a new hint appears), answering enum case `choice`.
    private func attempt(_ type: any Decodable.Type, choice: Int) -> (node: Node, value: Any?, error: (any Error)?) {
        var result: (node: Node, value: Any?, error: (any Error)?) = (Node(), nil, nil)
        for _ in 0..<8 {
            let node = Node()
            let before = hintCount
            do {
                let value = try type.init(from: RecordingDecoder(derivation: self, node: node, path: "", choice: choice))
                return (node, value, nil)
            } catch {
                result = (node, nil, error)
                if hintCount == before { break }
            }
        }
        return result
    }

    private func derive(_ type: any Decodable.Type) -> Shape {
        let id = ObjectIdentifier(type)
        let name = String(reflecting: type)
        if type == Never.self {
            warn("\(name) has no values: its schema accepts any JSON")
            return .any
        }
        let first = attempt(type, choice: 0)
        if let names = first.node.caseNames, first.node.kind == .keyed {
            // An enum: one attempt per case; a case that failed is tried again once the others
            // gave the enum a sample (an indirect case that holds the enum itself).
            var cases = names.map { EnumCase(name: $0, fields: nil, sample: nil) }
            var pending = Array(names.indices)
            for _ in 0..<2 {
                var failed: [Int] = []
                for index in pending {
                    let run = index == 0 && pending.count == names.count ? first : attempt(type, choice: index)
                    if let value = run.value {
                        samples[id] = samples[id] ?? value
                        cases[index].sample = value
                        if case .node(let payload)? = run.node.fields.first(where: { $0.name == names[index] })?.shape {
                            cases[index].fields = finishFields(payload)
                        } else {
                            cases[index].fields = []
                        }
                    } else {
                        failed.append(index)
                    }
                }
                pending = failed
                if pending.isEmpty { break }
            }
            for index in pending {
                warn("\(name).\(names[index]): the case could not be decoded from sample values; its schema accepts any fields")
            }
            return register(id, type, .cases(cases))
        }
        guard let value = first.value else {
            if first.node.kind == .single, let values = enumeratedValues(type) {
                return .schema(Self.enumSchema(values))
            }
            if let error = first.error as? NoSample, ObjectIdentifier(error.type) == id || recursive.contains(ObjectIdentifier(error.type)) {
                warn("\(name) refers to itself where no value of it can be made: its schema accepts any JSON")
            } else {
                warn("\(name): its init(from:) refused the sample values (\(Self.describe(first.error))): its schema accepts any JSON")
            }
            return recursive.contains(id) ? register(id, type, .any) : .any
        }
        samples[id] = value
        var shape = finish(first.node)
        if case .object(var fields) = shape {
            markWrittenWhenNil(&fields, sample: value)
            shape = .object(fields)
        }
        switch (first.node.kind, shape) {
        case (.keyed, .object):
            return register(id, type, shape)
        default:
            return recursive.contains(id) ? register(id, type, shape) : shape
        }
    }

    /// The values of an enum with raw values (or any `CaseIterable`): its `allCases` as
    /// encoded, else its case names when each decodes as a string.
    private func enumeratedValues(_ type: any Decodable.Type) -> [JSONValue]? {
        if let iterable = type as? any (CaseIterable & Encodable).Type {
            let values = Self.encodedCases(iterable)
            if let first = values.first {
                samples[ObjectIdentifier(type)] = samples[ObjectIdentifier(type)] ?? (try? JSONCoding.decode(type, from: first))
                return values
            }
        }
        guard let names = TypeReflection.caseNames(of: type), !names.isEmpty else { return nil }
        for name in names {
            let node = Node()
            let decoder = RecordingDecoder(derivation: self, node: node, path: "", choice: nil, rawString: name)
            guard let value = try? type.init(from: decoder) else { return nil }
            samples[ObjectIdentifier(type)] = samples[ObjectIdentifier(type)] ?? value
        }
        return names.map(JSONValue.string)
    }

    private static func encodedCases<T: CaseIterable & Encodable>(_ type: T.Type) -> [JSONValue] {
        type.allCases.compactMap { value in (try? JSONCoding.encode(value)).flatMap(JSONCoding.parse) }
    }

    private static func enumSchema(_ values: [JSONValue]) -> OrderedJSON {
        var schema: OrderedJSON = [:]
        if values.allSatisfy({ if case .string = $0 { true } else { false } }) {
            schema["type"] = "string"
        } else if values.allSatisfy({ if case .int = $0 { true } else { false } }) {
            schema["type"] = "integer"
        }
        schema["enum"] = .array(values.map(OrderedJSON.init))
        return schema
    }

    private func register(_ id: ObjectIdentifier, _ type: Any.Type, _ shape: Shape) -> Shape {
        if named[id] == nil { namedOrder.append(id) }
        named[id] = Named(type: type, shape: shape)
        return .named(id)
    }

    /// Optional fields the type's encoder writes as `null` when they are `nil` (every optional of
    /// the sample is `nil`) are always present on the wire.
    private func markWrittenWhenNil(_ fields: inout [Field], sample: Any) {
        guard fields.contains(where: \.optional), let encodable = sample as? any Encodable,
            let bytes = try? JSONCoding.encode(encodable), case .object(let written)? = JSONCoding.parse(bytes)
        else { return }
        for index in fields.indices where fields[index].optional && written[fields[index].name] == .null {
            fields[index].alwaysWritten = true
        }
    }

    private static func describe(_ error: (any Error)?) -> String {
        guard let error else { return "no error" }
        if let decoding = error as? DecodingError {
            switch decoding {
            case .dataCorrupted(let context), .keyNotFound(_, let context), .typeMismatch(_, let context),
                .valueNotFound(_, let context):
                return context.debugDescription
            @unknown default: return String(describing: error)
            }
        }
        return String(describing: error)
    }

    // MARK: Nodes to shapes

    private func finish(_ node: Node) -> Shape {
        var shape: Shape
        switch node.kind {
        case .none, .keyed:
            shape = .object(finishFields(node))
        case .dictionary:
            shape = .dictionary(node.fields.first.map { resolve($0.shape) } ?? .any)
        case .unkeyed:
            shape = .array(node.elements.first.map(resolve) ?? .any)
        case .single:
            shape = node.single.map(resolve) ?? .any
        }
        return node.nullable ? .nullable(shape) : shape
    }

    private func finishFields(_ node: Node) -> [Field] {
        node.fields.map { field in
            var field = field
            field.shape = resolve(field.shape)
            return field
        }
    }

    private func resolve(_ shape: Shape) -> Shape {
        if case .node(let node) = shape { return finish(node) }
        return shape
    }
}

/// Types with a schema of their own: Swift's numbers, strings and booleans, and the Foundation
/// types as ``JSONCoding`` writes them.
enum Leaf {
    static func of(_ type: any Decodable.Type) -> (schema: OrderedJSON, sample: Any)? {
        switch ObjectIdentifier(type) {
        case ObjectIdentifier(Bool.self): (["type": "boolean"], false)
        case ObjectIdentifier(String.self): (["type": "string"], "")
        case ObjectIdentifier(Int.self): (["type": "integer", "format": "int64"], 0 as Int)
        case ObjectIdentifier(Int64.self): (["type": "integer", "format": "int64"], 0 as Int64)
        case ObjectIdentifier(Int32.self): (["type": "integer", "format": "int32"], 0 as Int32)
        case ObjectIdentifier(Int16.self): (["type": "integer", "minimum": -32768, "maximum": 32767], 0 as Int16)
        case ObjectIdentifier(Int8.self): (["type": "integer", "minimum": -128, "maximum": 127], 0 as Int8)
        case ObjectIdentifier(UInt.self): (["type": "integer", "minimum": 0], 0 as UInt)
        case ObjectIdentifier(UInt64.self): (["type": "integer", "minimum": 0], 0 as UInt64)
        case ObjectIdentifier(UInt32.self): (["type": "integer", "minimum": 0, "maximum": 4_294_967_295], 0 as UInt32)
        case ObjectIdentifier(UInt16.self): (["type": "integer", "minimum": 0, "maximum": 65535], 0 as UInt16)
        case ObjectIdentifier(UInt8.self): (["type": "integer", "minimum": 0, "maximum": 255], 0 as UInt8)
        case ObjectIdentifier(Double.self): (["type": "number", "format": "double"], 0 as Double)
        case ObjectIdentifier(Float.self): (["type": "number", "format": "float"], 0 as Float)
        case ObjectIdentifier(Decimal.self): (["type": "number"], Decimal(0))
        case ObjectIdentifier(Date.self):
            (["type": "number", "format": "double", "description": "A date: seconds since 2001-01-01 00:00:00 UTC."],
                Date(timeIntervalSinceReferenceDate: 0))
        case ObjectIdentifier(UUID.self): (["type": "string", "format": "uuid"], UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)))
        case ObjectIdentifier(URL.self): (["type": "string", "format": "uri"], URL(fileURLWithPath: "/"))
        case ObjectIdentifier(Data.self): (["type": "string", "contentEncoding": "base64"], Data())
        case ObjectIdentifier(JSONValue.self): ([:], JSONValue.null)
        default: nil
        }
    }
}
