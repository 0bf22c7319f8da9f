import Foundation
import StateStore

/// Checks a JSON value against the JSON Schema subset the OpenAPI description uses (`type`,
/// `const`, `enum`, `required`, `properties`, `additionalProperties`, `items`, `oneOf`,
/// `anyOf`, `$ref` to `#/components/schemas/NAME`, `minimum`, `maximum`, `minLength`,
/// `maxItems`, `pattern`). Keywords it does not know are ignored (`format`, `description`,
/// `discriminator`, `example`).
package struct SchemaCheck {
    package let components: [String: OrderedJSON]

    package init(components: [String: OrderedJSON]) {
        self.components = components
    }

    /// The components of an OpenAPI document.
    package init(document: OrderedJSON) {
        var components: [String: OrderedJSON] = [:]
        for name in document["components"]["schemas"].keys { components[name] = document["components"]["schemas"][name] }
        self.components = components
    }

    /// Why `value` does not conform to `schema` (empty: it conforms).
    package func problems(_ value: JSONValue, _ schema: OrderedJSON, at path: String = "$", depth: Int = 0) -> [String] {
        guard depth < 64 else { return ["\(path): schema nesting too deep"] }
        var found: [String] = []
        if case .string(let ref) = schema["$ref"] {
            let prefix = "#/components/schemas/"
            guard ref.hasPrefix(prefix), let target = components[String(ref.dropFirst(prefix.count))] else {
                return ["\(path): unresolved \(ref)"]
            }
            found += problems(value, target, at: path, depth: depth + 1)
        }
        if schema["type"] != .null {
            let types = schema["type"].stringValue.map { [$0] } ?? schema["type"].elements.compactMap(\.stringValue)
            if !types.contains(where: { Self.has(value, type: $0) }) {
                found.append("\(path): \(value.typeName) is not \(types.joined(separator: " or "))")
                return found
            }
        }
        if schema["const"] != .null, let constant = schema["const"].jsonValue, constant != value {
            found.append("\(path): not the constant \(constant)")
        }
        if case .array(let options) = schema["enum"], !options.compactMap(\.jsonValue).contains(value) {
            found.append("\(path): not one of the enum's values")
        }
        if case .array(let branches) = schema["oneOf"] {
            let matching = branches.filter { problems(value, $0, at: path, depth: depth + 1).isEmpty }.count
            if matching != 1 { found.append("\(path): matches \(matching) branches of oneOf, not 1") }
        }
        if case .array(let branches) = schema["anyOf"], !branches.contains(where: { problems(value, $0, at: path, depth: depth + 1).isEmpty }) {
            found.append("\(path): matches no branch of anyOf")
        }
        switch value {
        case .object(let fields):
            for case .string(let name) in schema["required"].elements where fields[name] == nil {
                found.append("\(path): lacks required \(name)")
            }
            let properties = schema["properties"]
            for (name, field) in fields.sorted(by: { $0.key < $1.key }) {
                if properties.keys.contains(name) {
                    found += problems(field, properties[name], at: path + "." + name, depth: depth + 1)
                } else if schema["additionalProperties"] == .bool(false) {
                    found.append("\(path): has \(name), which the schema does not allow")
                } else if case .object = schema["additionalProperties"] {
                    found += problems(field, schema["additionalProperties"], at: path + "." + name, depth: depth + 1)
                }
            }
        case .array(let elements):
            if case .number(let text) = schema["maxItems"], let most = Int(text), elements.count > most {
                found.append("\(path): more than \(most) items")
            }
            if schema["items"] != .null {
                for (index, element) in elements.enumerated() {
                    found += problems(element, schema["items"], at: path + "[\(index)]", depth: depth + 1)
                }
            }
        case .string(let text):
            if case .number(let least) = schema["minLength"], let count = Int(least), text.unicodeScalars.count < count {
                found.append("\(path): shorter than \(count)")
            }
            if case .string(let pattern) = schema["pattern"], text.range(of: pattern, options: .regularExpression) == nil {
                found.append("\(path): does not match \(pattern)")
            }
        case .int, .double:
            let number: Double = if case .int(let int) = value { Double(int) } else if case .double(let double) = value { double } else { 0 }
            if case .number(let text) = schema["minimum"], let least = Double(text), number < least {
                found.append("\(path): below \(text)")
            }
            if case .number(let text) = schema["maximum"], let most = Double(text), number > most {
                found.append("\(path): above \(text)")
            }
        default: break
        }
        return found
    }

    private static func has(_ value: JSONValue, type: String) -> Bool {
        switch (type, value) {
        case ("null", .null), ("boolean", .bool), ("string", .string), ("array", .array), ("object", .object): true
        case ("number", .int), ("number", .double), ("integer", .int): true
        case ("integer", .double(let double)): double.rounded() == double
        default: false
        }
    }
}
