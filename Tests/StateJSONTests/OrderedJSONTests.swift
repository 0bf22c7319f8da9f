import StateJSON
import Testing

@Suite("OrderedJSON: a JSON value that keeps its key order")
struct OrderedJSONTests {
    @Test("parse and pretty() round-trip a document with its key order, number literals and escapes")
    func roundTrip() throws {
        let text = """
            {
              "z": 1,
              "a": [
                1.50,
                -2e3,
                true,
                null,
                "é \\"quoted\\" \\n\\u0001"
              ],
              "m": {},
              "e": []
            }

            """
        let value = try OrderedJSON.parse(Array(text.utf8))
        #expect(value.keys == ["z", "a", "m", "e"])
        #expect(value["a"][0] == .number("1.50"))
        #expect(value["a"][4] == .string("é \"quoted\" \n\u{1}"))
        #expect(String(decoding: value.pretty(), as: UTF8.self) == text)
        #expect(throws: JSONParser.Failure.self) { try OrderedJSON.parse(Array(#"{"a": 1,}"#.utf8)) }
    }

    @Test("subscripts: a missing key reads null, setting appends, setting null removes, insert places")
    func subscripts() {
        var value: OrderedJSON = ["type": "object", "properties": ["b": ["type": "string"]]]
        #expect(value["missing"]["deeper"] == .null)
        value[property: "a"] = ["type": "integer"]
        #expect(value["properties"].keys == ["b", "a"])
        value.describe("Text")
        #expect(value.keys == ["type", "description", "properties"])
        value.require("a")
        #expect(value.keys == ["type", "description", "required", "properties"])
        value["description"] = .null
        #expect(value.keys == ["type", "required", "properties"])
        value.insert("title", "T", before: "type")
        #expect(value.keys == ["title", "type", "required", "properties"])
        value.setNull("default")
        #expect(value["default"] == .null && value.keys.last == "default")
    }
}
