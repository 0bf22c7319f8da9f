import StateStore
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
    @Test(arguments: ["9E-111055112", "-1e-400", "1.9999999999999999", "123456789012345678.5", "-0.0", "[-0.0,{\"a\":1e-999}]"])
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
    }
}
