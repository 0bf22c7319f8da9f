import Foundation
import Testing

/// The OpenAPI description is shaped for client generators (openapi-python-client,
/// swift-openapi-generator): no `if`/`then` (generators drop the properties beside them), no
/// `{"type": "null"}` schemas (skipped by the Swift generator: nullable is `"type": [T, "null"]`),
/// every `required` property defined, and change bodies with typed `feature`, `version`, `state`
/// (and `effect`). scripts/openapi-client-check.sh generates a client and runs it; this is the
/// quick check that needs no Python.
@Suite("OpenAPI description: shaped for client generators")
struct OpenAPIClientShapeTests {
    /// Every schema-like object in the document, with its JSON path.
    private static func objects(_ value: Any, at path: String = "#", into found: inout [(String, [String: Any])]) {
        if let object = value as? [String: Any] {
            found.append((path, object))
            for (key, child) in object { objects(child, at: path + "/" + key, into: &found) }
        } else if let array = value as? [Any] {
            for (index, child) in array.enumerated() { objects(child, at: path + "/\(index)", into: &found) }
        }
    }

    private static func all() throws -> [(String, [String: Any])] {
        var found: [(String, [String: Any])] = []
        objects(try OpenAPISpecTests.spec(), into: &found)
        return found
    }

    @Test("no if/then, no null-only schema")
    func noUnsupportedKeywords() throws {
        for (path, object) in try Self.all() {
            #expect(object["if"] == nil && object["then"] == nil, "if/then at \(path)")
            #expect(object["type"] as? String != "null", "a {\"type\": \"null\"} schema at \(path)")
        }
    }

    @Test("every required property of an object schema is defined")
    func requiredAreDefined() throws {
        for (path, object) in try Self.all() {
            guard let required = object["required"] as? [String], object["$ref"] == nil,
                object["in"] == nil  // a parameter's `required` is a boolean, not this
            else { continue }
            let properties = object["properties"] as? [String: Any] ?? [:]
            for name in required {
                #expect(properties[name] != nil, "\(path) requires '\(name)' but does not define it")
            }
        }
    }

    @Test("change bodies are plain objects with typed feature, version, state and effect")
    func changeBodiesTyped() throws {
        let schemas = try #require((try OpenAPISpecTests.spec()["components"] as? [String: Any])?["schemas"] as? [String: Any])
        for (name, fields) in [
            ("DispatchResult", ["feature", "version", "state", "effect"]), ("FeatureState", ["feature", "version", "state"]),
            ("StateEventData", ["feature", "version", "cause", "action", "timer", "state", "effect"]), ("FeatureInfo", ["name", "initialState"]),
        ] {
            let schema = try #require(schemas[name] as? [String: Any], "no schema \(name)")
            #expect(schema["type"] as? String == "object", "\(name)")
            #expect(schema["allOf"] == nil && schema["anyOf"] == nil && schema["oneOf"] == nil, "\(name) is not a plain object")
            let properties = try #require(schema["properties"] as? [String: Any], "\(name) has no properties")
            #expect(Set(properties.keys) == Set(fields), "\(name): \(properties.keys.sorted())")
        }
    }
}
