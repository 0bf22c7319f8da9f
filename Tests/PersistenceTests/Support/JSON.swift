import StateStore
import Testing

// JSON helpers of the session and storage suites (StateSessionsTests links this file).

/// Parses JSON text (test literals); fails the test on bad JSON.
func json(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> JSONValue {
    guard let value = JSONCoding.parse(Array(text.utf8)) else {
        Issue.record("not JSON: \(text)", sourceLocation: sourceLocation)
        return .null
    }
    return value
}

func json(_ bytes: [UInt8]?) -> JSONValue? {
    bytes.flatMap { JSONCoding.parse($0) }
}

func text(_ bytes: [UInt8]?) -> String {
    bytes.map { String(decoding: $0, as: UTF8.self) } ?? "nil"
}
