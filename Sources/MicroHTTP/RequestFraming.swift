/// The framing rules the server enforces on every request head before routing (RFC 9110 and
/// RFC 9112), on top of what libmicrohttpd 0.9.75 checks itself.
///
/// libmicrohttpd frames a message by the first `Content-Length` and ignores a second one with
/// another value; the rest of the body is then read as a second request (request smuggling). A
/// request that breaks any rule here is answered `400 invalid_request` and its connection is
/// closed, so nothing behind it is read.
enum RequestFraming {
    /// Why the head is refused, or nil when it is acceptable. `fields` are the header lines in
    /// arrival order, duplicates included, names as sent.
    static func problem(version: String, fields: [(name: String, value: String)]) -> String? {
        var contentLengths: [String] = []
        var transferCodings: [String] = []
        var hosts = 0
        for field in fields {
            guard !field.name.isEmpty else { return "a header line has no field name" }
            guard field.name.utf8.allSatisfy(isTokenByte) else { return "a header field name has characters not allowed in a token" }
            switch field.name.lowercased() {
            case "content-length": contentLengths.append(field.value)
            case "transfer-encoding":
                transferCodings += field.value.split(separator: ",", omittingEmptySubsequences: false).map { trimmed($0) }
            case "host": hosts += 1
            default: break
            }
        }
        if let first = contentLengths.first {
            guard contentLengths.allSatisfy({ $0 == first }) else { return "conflicting Content-Length header fields" }
            guard !first.isEmpty, first.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
                return "Content-Length is not a non-negative integer"
            }
            guard transferCodings.isEmpty else { return "Content-Length together with Transfer-Encoding" }
        }
        if !transferCodings.isEmpty {
            guard transferCodings.count == 1, transferCodings[0].lowercased() == "chunked" else {
                return "unsupported Transfer-Encoding (only chunked is accepted)"
            }
        }
        if version == "HTTP/1.1" {
            if hosts == 0 { return "an HTTP/1.1 request needs a Host header field" }
        }
        if hosts > 1 { return "more than one Host header field" }
        return nil
    }

    /// The declared body length, if any (already checked by ``problem(version:fields:)``);
    /// values past `UInt64.max` count as `UInt64.max`.
    static func contentLength(_ fields: [(name: String, value: String)]) -> UInt64? {
        guard let text = fields.first(where: { $0.name.lowercased() == "content-length" })?.value else { return nil }
        var value: UInt64 = 0
        for byte in text.utf8 {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let (times, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
            if overflow1 || overflow2 { return UInt64.max }
            value = sum
        }
        return value
    }

    /// tchar of RFC 9110 §5.6.2.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }

    private static func trimmed(_ text: Substring) -> String {
        String(text.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
