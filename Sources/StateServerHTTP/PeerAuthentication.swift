import MicroHTTP
import StatePersistence

/// The header that authenticates ``forwardedHeader``: `TIME.MAC`, the forwarding node's wall
/// clock in Unix seconds and an HMAC-SHA256 under the cluster secret, in hexadecimal.
public let forwardedMACHeader = "stateserver-forwarded-mac"

/// Several nodes: only a peer may say it is forwarding a request. The forwarding node signs
/// ``forwardedHeader`` with a secret every node shares (`cluster.secret`); the owner believes
/// the header — never forwards the request again, and counts it towards moving the session
/// (``StateServerResponder/handingOver(_:_:_:)``) — only when the MAC is valid. A request whose
/// header has no valid MAC is served as any client's request: the header is ignored.
///
/// The MAC covers the forwarded-from epoch, the time, the method, the path, the query and the
/// SHA-256 of the body, each field length-prefixed so no two requests share a message. A MAC
/// is accepted for ``window`` seconds either side of the owner's clock: long enough for clocks
/// a little apart, too short to keep a captured request usable. (A replay inside the window
/// repeats a request a client made anyway — its token is in it; keep peer traffic on a private
/// network or `https://` advertised URLs so that it cannot be read at all.)
public struct PeerAuthentication: Sendable {
    /// The secrets: the first signs, every one verifies (a rotation lists two for a while).
    let secrets: [[UInt8]]
    /// The wall clock, Unix seconds.
    let now: @Sendable () -> Int64

    /// Seconds a MAC stays valid either side of the receiver's clock.
    public static let window: Int64 = 60

    /// - Parameters:
    ///   - secrets: the first signs; each one, and any other, is accepted when verifying.
    ///   - now: the wall clock in Unix seconds.
    public init(secrets: [String], now: @escaping @Sendable () -> Int64) {
        self.secrets = secrets.map { Array($0.utf8) }
        self.now = now
    }

    /// The value of ``forwardedMACHeader`` for a request forwarded by `epoch`.
    public func sign(epoch: String, method: String, path: String, query: [(name: String, value: String?)], body: [UInt8]) -> String {
        let time = now()
        let mac = HMACSHA256.mac(key: secrets[0], Self.message(epoch: epoch, time: time, method: method, path: path, query: query, body: body))
        return "\(time).\(Self.hex(mac))"
    }

    /// The forwarding node's epoch when `request` carries ``forwardedHeader`` with a valid MAC
    /// made within ``window`` seconds of now; `nil` otherwise.
    public func forwardedBy(_ request: HTTPRequest) -> Int64? {
        guard let epoch = request.header(forwardedHeader), let value = request.header(forwardedMACHeader) else { return nil }
        let parts = value.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let time = Int64(parts[0]), let mac = Self.bytes(hex: parts[1]), mac.count == 32 else { return nil }
        // Any Int64 may come in: no arithmetic that can trap on it.
        let (difference, overflow) = now().subtractingReportingOverflow(time)
        guard !overflow, difference.magnitude <= Self.window.magnitude else { return nil }
        let message = Self.message(
            epoch: epoch, time: time, method: request.method, path: request.path, query: request.query, body: request.body)
        var valid = false
        for secret in secrets where HMACSHA256.equal(HMACSHA256.mac(key: secret, message), mac) { valid = true }
        return valid ? Int64(epoch) : nil
    }

    /// What the MAC is computed over: a version tag, then each field as `LENGTH:BYTES\n`.
    static func message(
        epoch: String, time: Int64, method: String, path: String, query: [(name: String, value: String?)], body: [UInt8]
    ) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256 + path.utf8.count)
        func field(_ text: some Sequence<UInt8>) {
            let bytes = Array(text)
            out += Array("\(bytes.count):".utf8)
            out += bytes
            out.append(0x0A)
        }
        field("stateserver-forwarded-v1".utf8)
        field(epoch.utf8)
        field(String(time).utf8)
        field(method.utf8)
        field(path.utf8)
        field(String(query.count).utf8)
        for argument in query {
            field(argument.name.utf8)
            field(argument.value.map { "=" + $0 }.map { Array($0.utf8) } ?? [])
        }
        field(Array(hex(SHA256.hash(body)).utf8))
        return out
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `hex` as bytes, two hexadecimal digits each (either case); nil when it is not that.
    public static func bytes(hex: Substring) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }
}

extension StateServerResponder {
    /// The forwarding node's epoch when a peer forwarded `request` (its header's MAC is valid
    /// under the cluster secret); `nil` for a client's request, with or without the header.
    func forwardedBy(_ request: HTTPRequest) -> Int64? {
        guard request.header(forwardedHeader) != nil else { return nil }
        guard let peers = settings.peers, let epoch = peers.forwardedBy(request) else {
            log.logger.notice("ignored a forwarding header without a valid MAC: served as a client's request")
            return nil
        }
        return epoch
    }
}
