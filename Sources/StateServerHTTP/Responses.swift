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

    static func etag(_ version: Int) -> (name: String, value: String) {
        ("ETag", "\"\(version)\"")
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
