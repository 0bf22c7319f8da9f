import StateJSON
import Testing

@Suite("TaggedJSON")
struct TaggedJSONTests {
    @Test func untagMovesTheTypeOutside() throws {
        let result = try #require(TaggedJSON.untag(json(#"{"type":"increment","by":2}"#)))
        #expect(result.type == "increment")
        #expect(result.untagged == json(#"{"increment":{"by":2}}"#))

        let bare = try #require(TaggedJSON.untag(json(#"{"type":"clear"}"#)))
        #expect(bare.untagged == json(#"{"clear":{}}"#))
    }

    @Test(arguments: [#"{"by":2}"#, #"{"type":2}"#, #"{"type":null}"#, #"["type"]"#, #""increment""#, "null"])
    func untagNeedsAnObjectWithAStringType(value: String) {
        #expect(TaggedJSON.untag(json(value)) == nil)
    }

    @Test func tagMovesTheTypeInside() {
        #expect(TaggedJSON.tag(json(#"{"increment":{"by":2}}"#)) == json(#"{"type":"increment","by":2}"#))
        #expect(TaggedJSON.tag(json(#"{"clear":{}}"#)) == json(#"{"type":"clear"}"#))
    }

    @Test(arguments: [#"{"a":{},"b":{}}"#, #"{"a":1}"#, #"{}"#, #"[1]"#, #"3"#])
    func tagLeavesOtherValuesUnchanged(value: String) {
        #expect(TaggedJSON.tag(json(value)) == json(value))
    }

    @Test func tagAndUntagAreInverses() throws {
        let tagged = json(#"{"type":"move","to":{"x":1,"y":[2,3]},"fast":true}"#)
        let untagged = try #require(TaggedJSON.untag(tagged)).untagged
        #expect(TaggedJSON.tag(untagged) == tagged)
    }
}
