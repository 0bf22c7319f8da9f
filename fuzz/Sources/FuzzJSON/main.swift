// libFuzzer target: StateJSON's strict parser (Sources/StateJSON/JSONParser.swift) and its
// writers. Every input either parses or fails with a position inside it; whatever parses is
// written as canonical JSON (compact, keys sorted) that parses back to the same value, writes
// the same bytes again, and is what the Codable encoder writes for it too.
import FuzzSupport
import StateStore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSON(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = inputBytes(start, count)
    let value: JSONValue
    do {
        value = try JSONParser.parse(bytes)
    } catch {
        expect(error.offset >= 0 && error.offset <= bytes.count, "failure offset \(error.offset) outside 0...\(bytes.count)")
        expect(error.line >= 1 && error.column >= 1, "failure at line \(error.line), column \(error.column)")
        return 0
    }
    let written = value.bytes
    let reparsed: JSONValue
    do {
        reparsed = try JSONParser.parse(written)
    } catch {
        finding("the parser refuses what the writer wrote for \(show(bytes)): \(error) in \(show(written))")
    }
    expect(reparsed == value, "round trip changed the value: \(show(bytes)) -> \(show(written)) -> \(show(reparsed))")
    expect(reparsed.bytes == written, "canonical form not stable: \(show(written)) -> \(show(reparsed.bytes))")
    // Measuring without writing agrees with writing (the bounds of JSON Patch and recordings).
    expect(value.encodedCount(atMost: written.count) == written.count, "encodedCount is not \(written.count) for \(show(written))")
    expect(value.encodedCount(atMost: written.count - 1) == nil, "encodedCount fits \(show(written)) in fewer bytes")
    // The Codable path (JSONValueEncoder/Decoder) agrees with the direct writer and parser.
    do {
        let encoded = try JSONValueEncoder.encodeToBytes(value)
        expect(encoded == written, "JSONValueEncoder wrote \(show(encoded)), the writer \(show(written))")
        let decoded = try JSONValueDecoder.decode(JSONValue.self, from: value)
        expect(decoded == value, "JSONValueDecoder gave \(show(decoded)) for \(show(written))")
    } catch {
        finding("the Codable path refused \(show(written)): \(error)")
    }
    // A parsed document is a whole value: any prefix of its canonical form is not.
    if written.count > 1, case .success = JSONCoding.parseOrFailure(Array(written.dropLast())) {
        if case .int = value {} else if case .double = value {} else {
            finding("a cut document parses: \(show(Array(written.dropLast())))")
        }
    }
    return 0
}
