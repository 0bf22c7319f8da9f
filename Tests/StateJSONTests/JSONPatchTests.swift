import StateJSON
import Testing

@Suite("JSON Patch: the difference between two states, and applying it")
struct JSONPatchTests {
    private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
    private func text(_ bytes: [UInt8]?) -> String { bytes.map { String(decoding: $0, as: UTF8.self) } ?? "nil" }

    /// diff then apply gives the new document byte for byte.
    private func roundTrip(_ old: String, _ new: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let patch = try #require(JSONPatch.diff(from: bytes(old), to: bytes(new)), sourceLocation: sourceLocation)
        let applied = try JSONPatch.apply(patch: patch, to: bytes(old))
        #expect(text(applied) == new, "patch \(text(patch))", sourceLocation: sourceLocation)
    }

    @Test func smallChangesMakeSmallPatches() throws {
        #expect(text(JSONPatch.diff(from: bytes(#"{"a":1}"#), to: bytes(#"{"a":1}"#))) == "[]")
        #expect(text(JSONPatch.diff(from: bytes(#"{"a":1,"b":2}"#), to: bytes(#"{"a":1,"b":3}"#)))
            == #"[{"op":"replace","path":"/b","value":3}]"#)
        #expect(text(JSONPatch.diff(from: bytes(#"{"a":1}"#), to: bytes(#"{"a":1,"b":[true]}"#)))
            == #"[{"op":"add","path":"/b","value":[true]}]"#)
        #expect(text(JSONPatch.diff(from: bytes(#"{"a":1,"b":2}"#), to: bytes(#"{"b":2}"#)))
            == #"[{"op":"remove","path":"/a"}]"#)
        // One element toggled in the middle of a long list: one operation.
        let items = (0..<500).map { #"{"done":false,"id":\#($0),"title":"item \#($0)"}"# }
        var toggled = items
        toggled[250] = #"{"done":true,"id":250,"title":"item 250"}"#
        let old = "{\"items\":[" + items.joined(separator: ",") + "]}"
        let new = "{\"items\":[" + toggled.joined(separator: ",") + "]}"
        #expect(text(JSONPatch.diff(from: bytes(old), to: bytes(new))) == #"[{"op":"replace","path":"/items/250/done","value":true}]"#)
        // Inserted at the front, removed from the middle: one operation each.
        let front = "{\"items\":[" + ([#"{"new":1}"#] + items).joined(separator: ",") + "]}"
        #expect(text(JSONPatch.diff(from: bytes(old), to: bytes(front))) == #"[{"op":"add","path":"/items/0","value":{"new":1}}]"#)
        var removed = items
        removed.remove(at: 100)
        let less = "{\"items\":[" + removed.joined(separator: ",") + "]}"
        #expect(text(JSONPatch.diff(from: bytes(old), to: bytes(less))) == #"[{"op":"remove","path":"/items/100"}]"#)
        try roundTrip(old, new)
        try roundTrip(old, front)
        try roundTrip(old, less)
    }

    @Test func keysAreEscapedAsPointerTokens() throws {
        let patch = JSONPatch.diff(from: bytes(#"{"a/b":1,"m~n":2,"q\"t":3}"#), to: bytes(#"{"a/b":2,"m~n":3,"q\"t":4}"#))
        #expect(text(patch) == #"[{"op":"replace","path":"/a~1b","value":2},{"op":"replace","path":"/m~0n","value":3},{"op":"replace","path":"/q\"t","value":4}]"#)
        try roundTrip(#"{"a/b":1,"m~n":2,"q\"t":3}"#, #"{"a/b":2,"m~n":3,"q\"t":4}"#)
    }

    @Test func typeChangesAndWholeDocuments() throws {
        try roundTrip(#"{"a":[1,2]}"#, #"{"a":{"x":1}}"#)
        try roundTrip(#"[1,2,3]"#, #"{"a":1}"#)
        try roundTrip(#"3"#, #""three""#)
        try roundTrip(#"[]"#, #"[1,2,3]"#)
        try roundTrip(#"[1,2,3]"#, #"[]"#)
        try roundTrip(#"{}"#, #"{"a":{"b":{"c":[null,false,1.5,"x"]}}}"#)
        try roundTrip(#"{"a":"\u0001\n"}"#, #"{"a":"\n\u0001"}"#)
    }

    @Test func aPatchLongerThanItsLimitIsNotMade() {
        let old = bytes(#"{"a":[1,2,3,4,5,6,7,8,9]}"#)
        let new = bytes(#"{"a":[9,8,7,6,5,4,3,2,1]}"#)
        #expect(JSONPatch.diff(from: old, to: new, limit: new.count) == nil)
        #expect(JSONPatch.diff(from: old, to: new) != nil)
    }

    /// Random documents and random edits: diff then apply always gives the new document.
    @Test func randomEditsRoundTrip() throws {
        var generator = SplitMix(seed: 20_261_125)
        for _ in 0..<400 {
            let old = Self.randomValue(&generator, depth: 0)
            let new = Self.mutate(old, &generator, depth: 0)
            try roundTrip(text(old.bytes), text(new.bytes))
        }
    }

    @Test func applyRefusesBadPatchesAndChangesNothing() {
        var document: JSONValue = .object(["a": .array([.int(1)])])
        let before = document
        for patch in [
            #"{"op":"add"}"#, #"[{"op":"remove","path":"/b"}]"#, #"[{"op":"replace","path":"/a/5","value":1}]"#,
            #"[{"op":"add","path":"/a/01","value":1}]"#, #"[{"op":"jump","path":"/a"}]"#, #"[{"op":"add","path":"a","value":1}]"#,
            #"[{"op":"add","path":"/x","value":1},{"op":"test","path":"/x","value":2}]"#,
            #"[{"op":"move","from":"/a","path":"/a/0"}]"#, #"[{"op":"remove","path":""}]"#,
        ] {
            let value = JSONCoding.parse(bytes(patch)) ?? .null
            #expect(throws: JSONPatch.Failure.self, "\(patch)") { try JSONPatch.apply(value, to: &document) }
            #expect(document == before, "\(patch) changed nothing")
        }
        let ok = JSONCoding.parse(bytes(#"[{"op":"copy","from":"/a","path":"/b"},{"op":"move","from":"/b","path":"/c"},{"op":"add","path":"/a/-","value":2},{"op":"test","path":"/a/1","value":2}]"#))
        #expect(throws: Never.self) { try JSONPatch.apply(ok ?? .null, to: &document) }
        #expect(text(document.bytes) == #"{"a":[1,2],"c":[1]}"#)
    }

    // MARK: Random documents

    struct SplitMix {
        var state: UInt64
        init(seed: UInt64) { state = seed }
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    }

    static let keys = ["a", "b", "c", "d/e", "f~g", "é", "h\"i"]

    static func randomValue(_ g: inout SplitMix, depth: Int) -> JSONValue {
        switch g.below(depth > 3 ? 5 : 7) {
        case 0: return .null
        case 1: return .bool(g.below(2) == 0)
        case 2: return .int(Int64(g.below(1000)) - 500)
        case 3: return .double(Double(g.below(1000)) / 8 + 0.125)
        case 4: return .string(String(repeating: "x", count: g.below(4)) + (g.below(3) == 0 ? "\n\u{1}" : ""))
        case 5: return .array((0..<g.below(6)).map { _ in randomValue(&g, depth: depth + 1) })
        default:
            var fields: [String: JSONValue] = [:]
            for _ in 0..<g.below(5) { fields[keys[g.below(keys.count)]] = randomValue(&g, depth: depth + 1) }
            return .object(fields)
        }
    }

    static func mutate(_ value: JSONValue, _ g: inout SplitMix, depth: Int) -> JSONValue {
        if g.below(6) == 0 { return randomValue(&g, depth: depth) }
        switch value {
        case .array(var items):
            switch g.below(4) {
            case 0: items.insert(randomValue(&g, depth: depth + 1), at: g.below(items.count + 1))
            case 1 where !items.isEmpty: items.remove(at: g.below(items.count))
            default:
                if !items.isEmpty {
                    let index = g.below(items.count)
                    items[index] = mutate(items[index], &g, depth: depth + 1)
                }
            }
            return .array(items)
        case .object(var fields):
            let key = keys[g.below(keys.count)]
            switch g.below(3) {
            case 0: fields[key] = nil
            default: fields[key] = fields[key].map { mutate($0, &g, depth: depth + 1) } ?? randomValue(&g, depth: depth + 1)
            }
            return .object(fields)
        default:
            return g.below(2) == 0 ? value : randomValue(&g, depth: depth)
        }
    }
}
