import StateJSON
import Testing

@Suite("The JSON parser")
struct JSONParserTests {
    /// Issue 10 item 2: a parse failure says where: byte offset, line and column.
    @Test func aParseFailureGivesItsOffsetLineAndColumn() {
        guard case .failure(let failure) = JSONCoding.parseOrFailure(Array("{\n  \"a\": 1,\n  \"b\" 2\n}".utf8)) else {
            Issue.record("parsed")
            return
        }
        #expect(failure.offset == 18)
        #expect(failure.line == 3)
        #expect(failure.column == 7)
        #expect(failure.reason == "expected ':'")
        #expect(failure.description == "expected ':' at byte 18 (line 3, column 7)")
        guard case .failure(let first) = JSONCoding.parseOrFailure(Array("x".utf8)) else { return }
        #expect(first.description == "unexpected character at byte 0 (line 1, column 1)")
        if case .success(let value) = JSONCoding.parseOrFailure(Array("[1]".utf8)) { #expect(value == .array([.int(1)])) }
    }
}
