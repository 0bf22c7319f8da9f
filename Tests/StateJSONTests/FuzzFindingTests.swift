import StateJSON
import Testing

/// Inputs `make fuzz` found (scripts/fuzz.sh, fuzz/Sources), kept as tests of the property the
/// fuzz target checks. Each is also a seed in fuzz/seeds/<target>/.
@Suite("Fuzz findings: JSON and JSON Patch")
struct FuzzFindingTests {
    /// What `FuzzJSON` checks: a parsed value is written as canonical JSON that parses back to
    /// the same value and writes the same bytes again.
    private func roundTrips(_ text: String) throws {
        let value = try JSONParser.parse(Array(text.utf8))
        let written = value.bytes
        let again = try JSONParser.parse(written)
        #expect(again == value, "\(text) -> \(String(decoding: written, as: UTF8.self))")
        #expect(again.bytes == written, "\(text): \(String(decoding: written, as: UTF8.self)) -> \(String(decoding: again.bytes, as: UTF8.self))")
    }

    // FuzzJSON, 30 s: `9E-111055112` parsed as the double 0.0 (it underflows), written `0`, read
    // back as the integer 0, and `.double(0) != .int(0)`. Numbers now compare by value (RFC 6902's
    // rule for `test`); negative zero is written `-0.0` so it keeps its sign.
    //
    // FuzzJSON, next 60 s: `920368547758079011.9999999999999999999999912` is the double
    // 920368547758078976, written in its shortest form `9.20368547758079e+17`, which reads back
    // as the integer 920368547758079000. A whole double that fits in 64 bits is now written as
    // its exact digits.
    @Test(arguments: [
        "9E-111055112", "-1e-400", "1.9999999999999999", "123456789012345678.5", "-0.0", "[-0.0,{\"a\":1e-999}]",
        "920368547758079011.9999999999999999999999912", "-9223372036854775808.5", "1e300",
    ])
    func aNumberThatRoundsToAWholeOneRoundTrips(_ text: String) throws {
        try roundTrips(text)
    }

    @Test func numbersCompareByValue() throws {
        #expect(JSONValue.int(2) == .double(2.0))
        #expect(JSONValue.double(0) == .int(0))
        #expect(JSONValue.double(-0.0) == .int(0))
        #expect(JSONValue.int(2) != .double(2.5))
        // Past 2^53 a double is not every integer: 2^53 + 1 is not the double 2^53.
        #expect(JSONValue.int(9_007_199_254_740_993) != .double(9_007_199_254_740_992))
        #expect(JSONValue.int(.max) != .double(9_223_372_036_854_775_808))
        #expect(JSONValue.array([.int(1)]) == .array([.double(1)]))
        #expect(JSONValue.int(1) != .string("1"))
        #expect(JSONValue.double(-0.0).bytes == Array("-0.0".utf8))
        #expect(JSONValue.double(2).bytes == Array("2".utf8))
        #expect(JSONValue.double(920_368_547_758_078_976).bytes == Array("920368547758078976".utf8))
        #expect(JSONValue.double(1e300).bytes == Array("1e+300".utf8))
    }

    // Found while writing FuzzPatch's seeds, before a run: a `copy` shares its value, so a
    // patch of 40 copies of the whole document to new keys made one whose JSON has 2^40 bytes in
    // no time, and anything that then wrote or compared it (a recording's replay, its divergence
    // message) never returned; copies into ever deeper paths (`/a`, `/a/a`, `/a/a/a/a`, ...)
    // doubled the nesting each time, and writing or freeing it overflowed the stack.

    private static func copies(_ paths: [String]) -> JSONValue {
        .array(paths.map { .object(["op": .string("copy"), "from": .string(""), "path": .string($0)]) })
    }

    @Test func copiesOfTheWholeDocumentAreBounded() throws {
        var document = JSONValue.object(["count": .int(0)])
        let patch = Self.copies((0..<40).map { "/k\($0)" })
        do {
            try JSONPatch.apply(patch, to: &document)
            Issue.record("40 copies of the document applied")
        } catch {
            #expect(error.message.hasSuffix("the patch's copy and move operations carry more than 1048576 bytes"), "\(error)")
        }
        #expect(document == .object(["count": .int(0)]), "a refused patch changes nothing")
        // Within the bound, copies apply and the result is what they say.
        try JSONPatch.apply(Self.copies(["/a", "/b"]), to: &document)
        #expect(document.bytes == Array(#"{"a":{"count":0},"b":{"a":{"count":0},"count":0},"count":0}"#.utf8))
    }

    @Test func copiesIntoDeeperPathsAreBounded() throws {
        var document = JSONValue.object(["count": .int(0)])
        // Each copy doubles the nesting: 2, 4, ..., 512, then 1024.
        let patch = Self.copies((0..<12).map { String(repeating: "/a", count: 1 << $0) })
        do {
            try JSONPatch.apply(patch, to: &document)
            Issue.record("copies nested the document 4096 levels deep")
        } catch {
            #expect(error.message == "operation 9: the value would nest deeper than 512 levels", "\(error)")
        }
        #expect(document == .object(["count": .int(0)]))
        try JSONPatch.apply(.array(Array(patch.arrayItems.prefix(9))), to: &document)
        #expect(try JSONParser.parse(document.bytes) == document, "512 levels: what the parser reads")
    }

    @Test func addsAndMovesCannotNestPastTheParsersDepth() throws {
        let deep = (0..<509).reduce(JSONValue.array([])) { inner, _ in .array([inner]) }  // 510 levels
        let innermost = "/deep" + String(repeating: "/0", count: 509) + "/0"  // 511 tokens
        func add(_ value: JSONValue) -> JSONValue {
            .array([.object(["op": .string("add"), "path": .string(innermost), "value": value])])
        }
        var document = JSONValue.object(["deep": deep])
        try JSONPatch.apply(add(.array([])), to: &document)
        #expect(try JSONParser.parse(document.bytes) == document, "512 levels: what the parser reads")
        #expect(throws: JSONPatch.Failure.self) { try JSONPatch.apply(add(.array([.array([])])), to: &document) }
        // Moving the 510 levels three keys down is refused; moving part of them up is free.
        var two = JSONValue.object(["deep": deep, "b": .object(["c": .object([:])])])
        #expect(throws: JSONPatch.Failure.self) {
            try JSONPatch.apply(.array([.object(["op": .string("move"), "from": .string("/deep"), "path": .string("/b/c/d")])]), to: &two)
        }
        try JSONPatch.apply(.array([.object(["op": .string("move"), "from": .string("/deep"), "path": .string("/b/c/d")])]), to: &two, maxDepth: 513)
        try JSONPatch.apply(.array([.object(["op": .string("move"), "from": .string("/b/c/d/0"), "path": .string("/up")])]), to: &two)
        #expect(two["up"] == (0..<508).reduce(JSONValue.array([])) { inner, _ in .array([inner]) })
    }

    @Test(arguments: [
        #"{"a":[1,-20,3.5,true,false,null,"x\"\\\n\u0001é"],"b":{}}"#, "[]", "{}", "-9223372036854775808", "1e300", "-0.0", #""""#,
    ])
    func encodedCountIsTheWrittenLength(_ text: String) throws {
        let value = try JSONParser.parse(Array(text.utf8))
        let length = value.bytes.count
        #expect(value.encodedCount(atMost: length) == length)
        #expect(value.encodedCount(atMost: length - 1) == nil)
    }
}

extension JSONValue {
    fileprivate var arrayItems: [JSONValue] { if case .array(let items) = self { items } else { [] } }
}
