import CMicroHTTPD
import CMicroHTTPDShim

/// The framing rules the server enforces on every request head before routing (RFC 9110 and
/// RFC 9112), on top of what libmicrohttpd 0.9.75 checks itself.
///
/// libmicrohttpd frames a message by the first `Content-Length` and ignores a second one with
/// another value; the rest of the body is then read as a second request (request smuggling). A
/// request that breaks any rule here is answered `400 invalid_request` and its connection is
/// closed, so nothing behind it is read.
///
/// The rules are checked in C (`ss_read_head` in the shim), in the same pass over the header
/// fields libmicrohttpd already parsed that lists them for the request, comparing bytes: this
/// runs on every request. In the order they are reported:
///
/// 1. The target holds no raw NUL (checked here, from where the URI log callback saw it end).
/// 2. The header block ends with an empty line (no line with an empty field name).
/// 3. Every field name is a non-empty token.
/// 4. `Content-Length` fields agree byte for byte, are a non-empty run of digits, and come
///    without `Transfer-Encoding`.
/// 5. `Transfer-Encoding` names one coding only: `chunked`, in any ASCII case.
/// 6. An HTTP/1.1 request has a `Host` field; no request has more than one.
/// 7. No bytes hide behind a NUL inside a field; no field value has a control character
///    other than HTAB (a bare CR); the method is a token; an HTTP/1.0 request has no
///    `Transfer-Encoding`; the `Host` value is `host[:port]`; at most one `Authorization`.
/// 8. At most `SS_MAX_QUERY_ARGUMENTS` (64) query arguments (checked here, from the count the
///    URI log callback made: past that libmicrohttpd runs out of connection memory and never
///    answers, so the arguments are dropped unparsed and the request refused).
enum RequestFraming {
    static let nulInTarget = "the request target contains a NUL byte"
    static let controlInTarget = "the request target contains a control character or a blank"
    static let tooManyArguments = "the request target has more than \(SS_MAX_QUERY_ARGUMENTS) query arguments"
    static let queryTargetTooLong = "a request target with a query may be at most \(SS_MAX_QUERY_TARGET_BYTES) bytes"

    /// The reason given in the 400 for a problem `ss_read_head` reported, or nil for none.
    static func message(_ problem: Int32) -> String? {
        switch Int(problem) {
        case SS_HEAD_OK: nil
        case SS_HEAD_MALFORMED_BLOCK: "a header line has no field name (or the header block is malformed)"
        case SS_HEAD_EMPTY_NAME: "a header line has no field name"
        case SS_HEAD_NAME_NOT_TOKEN: "a header field name has characters not allowed in a token"
        case SS_HEAD_CONFLICTING_LENGTH: "conflicting Content-Length header fields"
        case SS_HEAD_BAD_LENGTH: "Content-Length is not a non-negative integer"
        case SS_HEAD_LENGTH_WITH_CODING: "Content-Length together with Transfer-Encoding"
        case SS_HEAD_UNSUPPORTED_CODING: "unsupported Transfer-Encoding (only chunked is accepted)"
        case SS_HEAD_MISSING_HOST: "an HTTP/1.1 request needs a Host header field"
        case SS_HEAD_REPEATED_HOST: "more than one Host header field"
        case SS_HEAD_HIDDEN_BYTES: "a header field contains a NUL byte"
        case SS_HEAD_CONTROL_IN_VALUE: "a header field value contains a control character (CR, LF, NUL or another one besides tab)"
        case SS_HEAD_BAD_METHOD: "the method is not a token"
        case SS_HEAD_CODING_IN_HTTP10: "Transfer-Encoding in an HTTP/1.0 request"
        case SS_HEAD_BAD_HOST: "the Host header field is not a valid host[:port]"
        case SS_HEAD_REPEATED_AUTHORIZATION: "more than one Authorization header field"
        default: "the request head is malformed"
        }
    }
}

/// Header fields and query arguments as Swift values, made from what the shim lists.
enum RequestFields {
    /// Fields listed on the stack; a request with more is listed again into a heap buffer.
    static let stackCapacity = 24

    /// Header fields with names lower-cased (names are tokens, checked before: ASCII).
    static func headers(_ fields: UnsafeBufferPointer<ss_field>) -> [(name: String, value: String)] {
        var headers: [(name: String, value: String)] = []
        headers.reserveCapacity(fields.count)
        for field in fields {
            headers.append((lowercasedName(field.name, field.name_length), text(field.value, field.value_length) ?? ""))
        }
        return headers
    }

    /// The query arguments of a raw query string (after `?`), as libmicrohttpd hands them to the
    /// server: split at `&`, then at the first `=` (none: no value), `+` as a space, then each
    /// part percent-decoded by libmicrohttpd's own `MHD_http_unescape` (an invalid escape stays
    /// as it is; a decoded NUL ends the text). For callers without a connection — the
    /// in-process test server builds its requests with it.
    package static func queryArguments(_ query: Substring?) -> [(name: String, value: String?)] {
        guard let query, !query.isEmpty else { return [] }
        return query.split(separator: "&", omittingEmptySubsequences: true).map { argument in
            guard let equals = argument.firstIndex(of: "=") else { return (unescape(argument), nil) }
            return (unescape(argument[..<equals]), unescape(argument[argument.index(after: equals)...]))
        }
    }

    /// `+` as a space, then `MHD_http_unescape`.
    static func unescape(_ text: Substring) -> String {
        var bytes = Array(text.utf8).map { $0 == UInt8(ascii: "+") ? UInt8(ascii: " ") : $0 }
        bytes.append(0)
        let length = bytes.withUnsafeMutableBufferPointer { buffer -> Int in
            guard let base = buffer.baseAddress else { return 0 }
            return base.withMemoryRebound(to: CChar.self, capacity: buffer.count) { MHD_http_unescape($0) }
        }
        let decoded = bytes[..<min(length, bytes.count - 1)]
        return String(decoding: decoded.prefix { $0 != 0 }, as: UTF8.self)
    }

    /// The query arguments of the current request, in arrival order.
    static func query(_ connection: OpaquePointer) -> [(name: String, value: String?)] {
        withUnsafeTemporaryAllocation(of: ss_field.self, capacity: stackCapacity) { buffer in
            let count = ss_collect_values(connection, MHD_ValueKind.GET_ARGUMENT_KIND, buffer.baseAddress, buffer.count)
            if count == 0 { return [] }
            if count <= buffer.count { return query(UnsafeBufferPointer(rebasing: buffer[..<count])) }
            var all = [ss_field](repeating: ss_field(), count: count)
            let listed = all.withUnsafeMutableBufferPointer {
                ss_collect_values(connection, MHD_ValueKind.GET_ARGUMENT_KIND, $0.baseAddress, $0.count)
            }
            return all.withUnsafeBufferPointer { query(UnsafeBufferPointer(rebasing: $0[..<min(listed, count)])) }
        }
    }

    private static func query(_ fields: UnsafeBufferPointer<ss_field>) -> [(name: String, value: String?)] {
        var query: [(name: String, value: String?)] = []
        query.reserveCapacity(fields.count)
        for field in fields {
            query.append((text(field.name, field.name_length) ?? "", text(field.value, field.value_length)))
        }
        return query
    }

    /// The bytes as a String (invalid UTF-8 repaired, as `String(cString:)` does).
    private static func text(_ pointer: UnsafePointer<CChar>?, _ length: Int) -> String? {
        guard let pointer else { return nil }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: length) {
            String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
        }
    }

    private static func lowercasedName(_ pointer: UnsafePointer<CChar>?, _ length: Int) -> String {
        guard let pointer, length > 0 else { return "" }
        return String(unsafeUninitializedCapacity: length) { out in
            for index in 0..<length {
                let byte = UInt8(bitPattern: pointer[index])
                out[index] = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
            }
            return length
        }
    }
}
