import StateJSON
import Testing

/// Parses a JSON literal written in a test; records an issue and gives `null` when it is not
/// JSON. (StateStoreTesting has the same helper, for targets that may depend on the store.)
func json(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> JSONValue {
    guard let value = JSONCoding.parse(Array(text.utf8)) else {
        Issue.record("not JSON: \(text)", sourceLocation: sourceLocation)
        return .null
    }
    return value
}
