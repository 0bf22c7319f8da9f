import MicroHTTP
import StateStore

/// JSON responses and the contract's error shape:
/// `{"error": {"code": "<snake_case_code>", "message": "<one human sentence>"}}`.
enum Reply {
    static let jsonType = ("Content-Type", "application/json")
    /// The headers of most JSON replies, made once (not an array per reply).
    private static let jsonHeaders: [(name: String, value: String)] = [jsonType]
    /// `{"status":"ok"}` and its newline, made once.
    static let statusOK = Array("{\"status\":\"ok\"}\n".utf8)

    /// A JSON body ends with a newline, so a shell prompt after `curl` starts on a line of its
    /// own; a body that already ends with one (a replayed reply, a file) gets no second one.
    static func json(_ status: Int, _ body: [UInt8], route: String, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        var body = body
        if body.last != 0x0A { body.append(0x0A) }
        return HTTPResponse(
            status: status, headers: headers.isEmpty ? jsonHeaders : [jsonType] + headers, body: .bytes(body), route: route)
    }

    static func empty(_ status: Int, route: String, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: headers, body: .bytes([]), route: route)
    }

    static func error(
        _ status: Int, _ code: String, _ message: String, route: String,
        headers: [(name: String, value: String)] = []
    ) -> HTTPResponse {
        json(status, errorBody(code, message), route: route, headers: headers + [noStore])
    }

    static func errorBody(_ code: String, _ message: String) -> [UInt8] {
        var inner = JSONObjectWriter()
        inner.string("code", code)
        inner.string("message", message)
        var outer = JSONObjectWriter()
        outer.raw("error", inner.finish())
        return outer.finish()
    }

    static func etag(_ version: Int) -> (name: String, value: String) {
        ("ETag", "\"" + String(version) + "\"")
    }

    /// A JSON reply of a store's state at `version`: its ETag and its caching (one array of
    /// headers made, not three: a state's read and a dispatch's reply are most of the traffic).
    static func versioned(
        _ body: [UInt8], version: Int, caching: (name: String, value: String), route: String
    ) -> HTTPResponse {
        var body = body
        if body.last != 0x0A { body.append(0x0A) }
        return HTTPResponse(status: 200, headers: [jsonType, etag(version), caching], body: .bytes(body), route: route)
    }

    /// Caching (RFC 9111), decided per kind of reply (docs/API.md, "Caching"):
    /// - `no-store`: the reply that hands out a session's token (OAuth's rule for token
    ///   replies), the replies to changes, errors, health and metrics: nothing to reuse.
    static let noStore = ("Cache-Control", "no-store")
    /// - `private, no-cache`: a feature's state (with its `ETag`). A browser may keep it but
    ///   must ask again each time (with `If-None-Match`, answered `304`); a shared cache must
    ///   not keep a session's state. `GET .../state` (no validator) is `no-store`; the event
    ///   stream keeps the contract's `no-cache`.
    static let privateRevalidate = ("Cache-Control", "private, no-cache")
    /// - `no-cache` with a strong `ETag`: the files compiled into the binary and the feature
    ///   list, the same for everyone until the server is upgraded; a reload is a `304`.
    static let revalidate = ("Cache-Control", "no-cache")

    /// A fixed body (a file compiled in, the feature list) with its ETag: `304` without a
    /// body when `If-None-Match` names the tag (or is `*`), else `200`.
    static func validated(
        _ request: HTTPRequest, _ body: [UInt8], etag: String, route: String, headers: [(name: String, value: String)]
    ) -> HTTPResponse {
        let all = headers + [revalidate, ("ETag", etag)]
        if noneMatch(request, etag) {
            return HTTPResponse(status: 304, headers: all.filter { $0.name != "Content-Type" }, body: .bytes([]), route: route)
        }
        return HTTPResponse(status: 200, headers: all, body: .bytes(body), route: route)
    }

    /// Whether `If-None-Match` (every field line, comma-separated) names `etag` by the weak
    /// comparison of RFC 9110 13.1.2 (`W/` ignored), or is `*`.
    static func noneMatch(_ request: HTTPRequest, _ etag: String) -> Bool {
        for field in request.headers where field.name == "if-none-match" {
            for item in field.value.split(separator: ",") {
                var tag = item.trimmingWhitespace()
                if tag == "*" { return true }
                if tag.hasPrefix("W/") { tag.removeFirst(2) }
                if tag == etag { return true }
            }
        }
        return false
    }

    /// A strong entity tag for fixed bytes: their 64-bit FNV-1a hash, in hex and quotes.
    static func contentTag(_ bytes: [UInt8]) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return "\"" + String(hash, radix: 16) + "\""
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
