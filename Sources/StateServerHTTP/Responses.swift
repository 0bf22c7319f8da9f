import MicroHTTP
import StateStore

/// JSON responses and the contract's error shape:
/// `{"error": {"code": "<snake_case_code>", "message": "<one human sentence>"}}`.
enum Reply {
    static let jsonType = ("Content-Type", "application/json")

    /// A JSON body ends with a newline, so a shell prompt after `curl` starts on a line of its
    /// own; a body that already ends with one (a replayed reply, a file) gets no second one.
    static func json(_ status: Int, _ body: [UInt8], route: String, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        var body = body
        if body.last != 0x0A { body.append(0x0A) }
        return HTTPResponse(status: status, headers: [jsonType] + headers, body: .bytes(body), route: route)
    }

    static func empty(_ status: Int, route: String, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: headers, body: .bytes([]), route: route)
    }

    static func error(
        _ status: Int, _ code: String, _ message: String, route: String,
        headers: [(name: String, value: String)] = []
    ) -> HTTPResponse {
        json(status, errorBody(code, message), route: route, headers: headers)
    }

    static func errorBody(_ code: String, _ message: String) -> [UInt8] {
        var inner = JSONObjectWriter()
        inner.string("code", code)
        inner.string("message", message)
        var outer = JSONObjectWriter()
        outer.raw("error", inner.finish())
        return outer.finish()
    }

    /// The status and code of a store error.
    static func storeError(_ error: StoreError) -> (status: Int, code: String) {
        switch error.kind {
        case .versionConflict: (412, "version_conflict")
        case .actionRejected: (422, "action_rejected")
        case .invalidAction: (422, "invalid_action")
        case .invalidState: (422, "invalid_state")
        default: (500, "internal_error")
        }
    }

    /// `{"feature", "version", "state"}` plus `"effect"` for dispatches.
    static func changeBody(_ change: EncodedChange, withEffect: Bool) -> [UInt8] {
        var body = JSONObjectWriter(capacity: change.state.count + 96)
        body.string("feature", change.feature)
        body.int("version", change.version)
        body.raw("state", change.state)
        if withEffect { body.raw("effect", change.effect) }
        return body.finish()
    }

    static func etag(_ version: Int) -> (name: String, value: String) {
        ("ETag", "\"\(version)\"")
    }
}

/// An `If-Match` or `If-None-Match` header: `*`, or a list of entity tags (`"3"`, `W/"3"`).
enum EntityTagCondition: Equatable {
    case any
    case versions(Set<Int>)

    /// - Parameter weak: whether weak tags (`W/"3"`) count: yes for `If-None-Match` (weak
    ///   comparison), no for `If-Match` (strong comparison, RFC 9110 §13.1.1).
    init(_ header: String, weak: Bool = true) {
        var versions = Set<Int>()
        for part in header.split(separator: ",") {
            var tag = part.trimmingWhitespace()
            if tag == "*" {
                self = .any
                return
            }
            if tag.hasPrefix("W/") {
                guard weak else { continue }
                tag = String(tag.dropFirst(2))
            }
            guard tag.count >= 2, tag.hasPrefix("\""), tag.hasSuffix("\"") else { continue }
            if let version = Int(tag.dropFirst().dropLast()) { versions.insert(version) }
        }
        self = .versions(versions)
    }

    func matches(_ version: Int) -> Bool {
        switch self {
        case .any: true
        case .versions(let set): set.contains(version)
        }
    }
}

extension StringProtocol {
    /// Without leading and trailing spaces and tabs (ASCII only, by UTF-8 index: no copying
    /// until the result).
    func trimmingWhitespace() -> String {
        let text = Substring(self)
        let utf8 = text.utf8
        var start = utf8.startIndex
        var end = utf8.endIndex
        while start < end, utf8[start] == 0x20 || utf8[start] == 0x09 { start = utf8.index(after: start) }
        while end > start {
            let before = utf8.index(before: end)
            guard utf8[before] == 0x20 || utf8[before] == 0x09 else { break }
            end = before
        }
        return String(text[start..<end])
    }
}
