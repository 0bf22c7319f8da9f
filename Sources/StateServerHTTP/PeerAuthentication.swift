import MicroHTTP
import StatePersistence
import Synchronization

/// The header that authenticates ``forwardedHeader``: `v2.TIME.NONCE.MAC` — a version label,
/// the forwarding node's wall clock in Unix seconds, 16 random bytes and an HMAC-SHA256 under
/// the cluster secret, both in hexadecimal.
public let forwardedMACHeader = "stateserver-forwarded-mac"

/// The header in which a forwarding node states the client address it determined (its
/// connection's peer, or what its trusted proxies' `X-Forwarded-For` names), covered by the MAC.
/// The owner takes a forwarded request's client from here, never from what the client wrote.
public let forwardedForHeader = "stateserver-forwarded-for"

/// Several nodes: only a peer may say it is forwarding a request. The forwarding node signs
/// ``forwardedHeader`` with a secret every node shares (`cluster.secret`); the owner believes
/// the header — never forwards the request again, does not count it towards
/// `limits.requestsPerSecond` again, and counts it towards moving the session
/// (``StateServerResponder/handingOver(_:_:_:)``) — only when the MAC is valid and has not been
/// used before. A request whose header has no such MAC is served as any client's request: the
/// header is ignored.
///
/// The MAC covers the forwarded-from epoch, the time, a nonce, the method, the path, the query,
/// the SHA-256 of the body, and the headers that change what a request means or who makes it
/// (``coveredHeaders``: the credential, `Idempotency-Key`, the preconditions, `Last-Event-ID`,
/// the client address the forwarding node states...), each field length-prefixed so no two
/// requests share a message. A MAC is accepted for ``window`` seconds either side of the
/// owner's clock (clocks a little apart), and once: the owner remembers every MAC it accepted
/// until it could no longer be accepted (``SeenMACs``). Each forward is signed afresh (a new
/// time and nonce), a retried one too.
public struct PeerAuthentication: Sendable {
    /// The secrets: the first signs, every one verifies (a rotation lists two for a while).
    let secrets: [[UInt8]]
    /// The wall clock, Unix seconds.
    let now: @Sendable () -> Int64
    /// The MACs accepted, shared by every copy of these keys.
    let seen: SeenMACs

    /// Seconds a MAC stays valid either side of the receiver's clock.
    public static let window: Int64 = 60

    /// MACs remembered at most (about 10 MB when full): a MAC is kept until `window` seconds
    /// after its time, at most 2 × `window` (one signed `window` seconds ahead of this clock),
    /// so this holds 2,000 forwarded requests a second received from clocks as far apart as
    /// allowed, 4,000 a second from clocks in step. Past it, a valid MAC is refused (the
    /// request served as a client's) rather than an unexpired one forgotten.
    public static let capacity = 1 << 18

    /// The request headers the MAC covers, every value of each in order: the credential, what
    /// makes a change conditional or unique, where a stream resumes, the body's type, the origin
    /// the reply is decorated for, and the client address the forwarding node states.
    public static let coveredHeaders = [
        "authorization", "content-type", "idempotency-key", "if-match", "if-none-match", "last-event-id", "origin", forwardedForHeader,
    ]

    /// The label of this format in ``forwardedMACHeader``; a MAC without it is refused.
    static let version = "v2"

    /// - Parameters:
    ///   - secrets: the first signs; each one, and any other, is accepted when verifying.
    ///   - capacity: the most MACs remembered at once (``capacity``).
    ///   - now: the wall clock in Unix seconds.
    public init(secrets: [String], capacity: Int = PeerAuthentication.capacity, now: @escaping @Sendable () -> Int64) {
        self.secrets = secrets.map { Array($0.utf8) }
        self.now = now
        seen = SeenMACs(capacity: capacity, window: Self.window)
    }

    /// What the owner believes of a request forwarded with a valid MAC.
    public struct Forwarded: Sendable, Equatable {
        /// The forwarding node's epoch (``forwardedHeader``).
        public let epoch: Int64
        /// The client address the forwarding node determined (``forwardedForHeader``); nil
        /// when it had none (a request made in its process).
        public let client: IPAddress?

        public init(epoch: Int64, client: IPAddress?) {
            self.epoch = epoch
            self.client = client
        }
    }

    /// What a request's forwarding header is worth.
    public enum Verdict: Sendable, Equatable {
        /// A valid MAC, seen for the first time.
        case forwarded(Forwarded)
        /// No header, or no valid MAC: none, malformed, outside the window, another secret, the
        /// request not the one signed.
        case invalid
        /// A valid MAC accepted before (a replay), or made so long ago that it was forgotten.
        case replayed
        /// A valid MAC, but ``capacity`` MACs are remembered already.
        case full
    }

    /// The value of ``forwardedMACHeader`` for a request forwarded by `epoch`, sent with
    /// `headers` (those of ``coveredHeaders`` among them are signed).
    public func sign(
        epoch: String, method: String, path: String, query: [(name: String, value: String?)], headers: [(name: String, value: String)],
        body: [UInt8]
    ) -> String {
        let time = now()
        var random = SystemRandomNumberGenerator()
        var nonce: [UInt8] = []
        for _ in 0..<2 {
            let value: UInt64 = random.next()
            for shift in stride(from: 56, through: 0, by: -8) { nonce.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
        }
        let nonceText = Self.hex(nonce)
        let message = Self.message(
            epoch: epoch, time: time, nonce: nonceText, method: method, path: path, query: query, headers: headers, body: body)
        return "\(Self.version).\(time).\(nonceText).\(Self.hex(HMACSHA256.mac(key: secrets[0], message)))"
    }

    /// Checks `request`'s ``forwardedHeader`` and ``forwardedMACHeader``, and remembers a valid
    /// MAC: asked twice of the same request, the second answer is ``Verdict/replayed``. Ask once
    /// per request.
    public func verify(_ request: HTTPRequest) -> Verdict {
        guard let epochText = request.header(forwardedHeader), let epoch = Int64(epochText),
            let value = request.header(forwardedMACHeader)
        else { return .invalid }
        let parts = value.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == Self.version, let time = Int64(parts[1]),
            parts[2].utf8.count == 32, Self.bytes(hex: parts[2]) != nil,
            let mac = Self.bytes(hex: parts[3]), mac.count == 32
        else { return .invalid }
        // Any Int64 may come in: no arithmetic that can trap on it.
        let now = now()
        let (difference, overflow) = now.subtractingReportingOverflow(time)
        guard !overflow, difference.magnitude <= Self.window.magnitude else { return .invalid }
        let message = Self.message(
            epoch: epochText, time: time, nonce: String(parts[2]), method: request.method, path: request.path, query: request.query,
            headers: request.headers, body: request.body)
        var valid = false
        for secret in secrets where ConstantTime.equal(HMACSHA256.mac(key: secret, message), mac) { valid = true }
        guard valid else { return .invalid }
        switch seen.insert(mac, time: time, now: now) {
        case .first: break
        case .again: return .replayed
        case .full: return .full
        }
        return .forwarded(Forwarded(epoch: epoch, client: request.header(forwardedForHeader).flatMap { IPAddress($0) }))
    }

    /// What the MAC is computed over: a version tag, then each field as `LENGTH:BYTES\n`.
    static func message(
        epoch: String, time: Int64, nonce: String, method: String, path: String, query: [(name: String, value: String?)],
        headers: [(name: String, value: String)], body: [UInt8]
    ) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(512 + path.utf8.count)
        func field(_ text: some Sequence<UInt8>) {
            let bytes = Array(text)
            out += Array("\(bytes.count):".utf8)
            out += bytes
            out.append(0x0A)
        }
        field("stateserver-forwarded-\(version)".utf8)
        field(epoch.utf8)
        field(String(time).utf8)
        field(nonce.utf8)
        field(method.utf8)
        field(path.utf8)
        field(String(query.count).utf8)
        for argument in query {
            field(argument.name.utf8)
            field(argument.value.map { "=" + $0 }.map { Array($0.utf8) } ?? [])
        }
        field(Array(hex(SHA256.hash(body)).utf8))
        // Names compare lower-cased (a request's already are; what a forwarder sends may not be).
        let lowered = headers.map { (name: $0.name.lowercased(), value: $0.value) }
        for name in coveredHeaders {
            let values = lowered.filter { $0.name == name }.map(\.value)
            field(name.utf8)
            field(String(values.count).utf8)
            for value in values { field(value.utf8) }
        }
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

/// The forwarding MACs a node accepted, each kept until it could no longer be accepted (its
/// time more than `window` seconds behind the clock), so that none is accepted twice.
///
/// Bounded: at most `capacity` MACs. When that many are kept, a new one is refused rather than
/// an unexpired one forgotten (a forgotten MAC could be replayed). Kept by their time, a set per
/// second: the MACs that expire together go together, and a MAC is looked up under its own
/// time only. Times already forgotten stay refused should the clock step back.
///
/// Thread-safe: the table is behind one lock, held for a lookup and an insert (or, once a
/// second, for dropping the seconds that expired).
final class SeenMACs: Sendable {
    /// The first 16 bytes of a MAC: unique enough among at most `capacity` of them, and no
    /// one without the secret can choose them.
    struct Key: Hashable {
        let high: UInt64
        let low: UInt64

        init(_ mac: [UInt8]) {
            var high: UInt64 = 0
            var low: UInt64 = 0
            for index in 0..<8 { high = high << 8 | UInt64(mac[index]) }
            for index in 8..<16 { low = low << 8 | UInt64(mac[index]) }
            self.high = high
            self.low = low
        }
    }

    private struct Table {
        var byTime: [Int64: Set<Key>] = [:]
        var count = 0
        /// Every time up to this one was forgotten.
        var forgottenThrough = Int64.min
    }

    enum Outcome {
        case first
        case again
        case full
    }

    let capacity: Int
    let window: Int64
    private let table = Mutex(Table())

    init(capacity: Int, window: Int64) {
        self.capacity = capacity
        self.window = window
    }

    /// The MACs kept now.
    var count: Int { table.withLock { $0.count } }

    /// Remembers `mac` (32 bytes), made at `time`, received at `now`: `.first` the first time,
    /// `.again` after that (or when its time was forgotten), `.full` when `capacity` MACs are
    /// kept and none could be forgotten.
    func insert(_ mac: [UInt8], time: Int64, now: Int64) -> Outcome {
        guard mac.count >= 16 else { return .again }
        let key = Key(mac)
        let (horizon, overflow) = now.subtractingReportingOverflow(window)
        return table.withLock { table in
            // Times before `horizon` are out of the window: forget them (once a second).
            if !overflow, horizon > Int64.min, horizon - 1 > table.forgottenThrough {
                for expired in table.byTime.keys.filter({ $0 < horizon }) {
                    table.count -= table.byTime.removeValue(forKey: expired)?.count ?? 0
                }
                table.forgottenThrough = horizon - 1
            }
            if time <= table.forgottenThrough { return .again }
            if table.byTime[time]?.contains(key) == true { return .again }
            guard table.count < capacity else { return .full }
            table.byTime[time, default: []].insert(key)
            table.count += 1
            return .first
        }
    }
}

extension StateServerResponder {
    /// What this node believes of a request a peer says it forwarded: the forwarding node's
    /// epoch and the client it stated, when the header's MAC is valid and new; `nil` for a
    /// client's request, with or without the header. Verifies (and so uses up) the MAC: once
    /// per request.
    func forwardedBy(_ request: HTTPRequest) -> PeerAuthentication.Forwarded? {
        guard request.header(forwardedHeader) != nil else { return nil }
        let verdict = settings.peers?.verify(request) ?? .invalid
        switch verdict {
        case .forwarded(let forwarded): return forwarded
        case .invalid: log.logger.notice("ignored a forwarding header without a valid MAC: served as a client's request")
        case .replayed: log.logger.warning("ignored a forwarding header whose MAC was used before (a replay): served as a client's request")
        case .full:
            log.logger.warning(
                "ignored a forwarding header: as many forwarding MACs as can be remembered are unexpired; served as a client's request",
                metadata: ["capacity": "\(settings.peers?.seen.capacity ?? 0)"])
        }
        return nil
    }
}
