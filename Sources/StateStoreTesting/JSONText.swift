import StateStore
import Testing

// Small JSON helpers for this package's own tests (`package`: not part of the product's API).

/// Parses a JSON literal written in a test; records an issue and gives `null` when it is not
/// JSON.
package func json(_ text: String) -> JSONValue {
    guard let value = JSONCoding.parse(Array(text.utf8)) else {
        Issue.record("not JSON: \(text)")
        return .null
    }
    return value
}

/// JSON bytes as text, for readable comparisons.
package func text(_ bytes: [UInt8]?) -> String? {
    bytes.map { String(decoding: $0, as: UTF8.self) }
}
