import MicroHTTP
import StatePersistence

/// The bearer token of a request: `Authorization: Bearer <token>`, or (event streams only,
/// for `EventSource`) the `access_token` query argument.
enum Credentials {
    static func token(_ request: HTTPRequest, allowQueryToken: Bool) -> String? {
        if let header = request.header("authorization"), let token = bearerToken(header) {
            return token
        }
        if allowQueryToken, let value = request.queryValues("access_token").first, !value.isEmpty {
            return value
        }
        return nil
    }

    /// Whether `token` is the admin's: its SHA-256 equals `hash`, compared in constant time.
    static func isAdmin(_ token: String, hash: [UInt8]?) -> Bool {
        guard let hash else { return false }
        return ConstantTime.equal(SHA256.hash(token), hash)
    }

    /// The token of `Bearer <token>` (scheme in any case, spaces around), by UTF-8 byte: this
    /// runs on every session request.
    static func bearerToken(_ header: String) -> String? {
        let utf8 = header.utf8
        var index = utf8.startIndex
        while index != utf8.endIndex, utf8[index] == 0x20 || utf8[index] == 0x09 { index = utf8.index(after: index) }
        for expected in "bearer".utf8 {
            guard index != utf8.endIndex, utf8[index] | 0x20 == expected else { return nil }
            index = utf8.index(after: index)
        }
        guard index != utf8.endIndex, utf8[index] == 0x20 || utf8[index] == 0x09 else { return nil }
        while index != utf8.endIndex, utf8[index] == 0x20 || utf8[index] == 0x09 { index = utf8.index(after: index) }
        var end = utf8.endIndex
        while end != index {
            let before = utf8.index(before: end)
            guard utf8[before] == 0x20 || utf8[before] == 0x09 else { break }
            end = before
        }
        return end == index ? nil : String(Substring(utf8[index..<end]))
    }
}
