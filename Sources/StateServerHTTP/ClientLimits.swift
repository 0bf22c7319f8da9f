import Dispatch
import MicroHTTP
import StateSessions

/// The abuse limits the routes enforce (`limits.*`, `http.trustedProxies`); 0 turns a limit
/// off. Each is a token bucket whose size is one period's worth: `requestsPerSecond: 1000`
/// allows 1,000 requests at once from a full bucket, then one a millisecond.
public struct RateLimits: Sendable {
    /// Sessions created (`POST /v1/sessions`, `POST /v1/recordings`) per client address per
    /// minute.
    public var sessionsPerMinute = 0
    /// Requests per client address per second, any route.
    public var requestsPerSecond = 0
    /// Dispatches per session per second.
    public var dispatchesPerSecond = 0
    /// Peers whose `X-Forwarded-For` is believed: a request from one of them counts for the
    /// right-most address in that header that is not one of them.
    public var trustedProxies: [AddressRange] = []

    public init() {}
}

/// The per-address and per-session token buckets of one server (``RateLimits``), and who a
/// request's client is.
///
/// A request's client is its connection's peer, unless that peer is a trusted proxy: then it is
/// the right-most address of `X-Forwarded-For` (every field, in order) that is not a trusted
/// proxy — each proxy appends the address it got the request from, so the addresses right of
/// the first untrusted one were written by trusted proxies, and everything left of it is
/// whatever the client sent. An entry that is not an address ends the walk (the client is
/// the last address read). IPv6 clients count by /64 (``IPAddress/limitKey``).
///
/// Requests made in process have no peer and are never limited by address.
final class ClientLimits: Sendable {
    let settings: RateLimits
    private let requests: PaceTable<IPAddress>?
    private let creations: PaceTable<IPAddress>?
    private let dispatches: PaceTable<String>?
    /// Nanoseconds on a monotonic clock.
    private let now: @Sendable () -> Int64

    static let second: Int64 = 1_000_000_000

    init(_ settings: RateLimits, now: @escaping @Sendable () -> Int64 = ClientLimits.monotonicNanoseconds) {
        self.settings = settings
        self.now = now
        requests = settings.requestsPerSecond > 0
            ? PaceTable(rate: settings.requestsPerSecond, per: Self.second, burst: settings.requestsPerSecond) : nil
        creations = settings.sessionsPerMinute > 0
            ? PaceTable(rate: settings.sessionsPerMinute, per: 60 * Self.second, burst: settings.sessionsPerMinute) : nil
        dispatches = settings.dispatchesPerSecond > 0
            ? PaceTable(rate: settings.dispatchesPerSecond, per: Self.second, burst: settings.dispatchesPerSecond) : nil
    }

    /// The monotonic clock's nanoseconds (`DispatchTime`: one `clock_gettime`, without the
    /// 128-bit arithmetic of `Duration` that cost more than the bucket itself).
    @Sendable static func monotonicNanoseconds() -> Int64 {
        Int64(clamping: DispatchTime.now().uptimeNanoseconds)
    }

    /// The client a request counts for (nil: made in process). For a request a peer forwarded
    /// (`forwarded`, its MAC verified), the client that node stated under the MAC.
    func client(of request: HTTPRequest, forwarded: PeerAuthentication.Forwarded? = nil) -> IPAddress? {
        if let forwarded { return forwarded.client }
        guard let peer = request.peer else { return nil }
        let trusted = settings.trustedProxies
        guard !trusted.isEmpty, trusted.contains(peer) else { return peer }
        var client = peer
        for field in request.headers.reversed() where field.name == "x-forwarded-for" {
            for item in field.value.split(separator: ",").reversed() {
                guard let address = Self.forwardedAddress(item) else { return client }
                client = address
                if !trusted.contains(address) { return client }
            }
        }
        return client
    }

    /// One `X-Forwarded-For` entry: an address, with blanks around it, IPv6 maybe in brackets,
    /// maybe with a port (`192.0.2.1:5000`, `[2001:db8::1]:5000`), as some proxies write it.
    static func forwardedAddress(_ item: Substring) -> IPAddress? {
        var text = item.trimmingWhitespace()[...]
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            text = text[text.index(after: text.startIndex)..<close]
        } else if let colon = text.firstIndex(of: ":"), text.lastIndex(of: ":") == colon {
            text = text[..<colon]  // IPv4 with a port (an IPv6 address has several colons)
        }
        return IPAddress(text)
    }

    /// `429 rate_limited` when the request's client is past `limits.requestsPerSecond`.
    /// Requests a node of the cluster forwarded (`forwarded`: with a valid MAC, not used
    /// before) counted where they arrived.
    func checkRequest(_ request: HTTPRequest, forwarded: PeerAuthentication.Forwarded?) throws(APIError) {
        guard let requests, forwarded == nil, let client = client(of: request) else { return }
        if let wait = requests.take(client.limitKey, now: now()) {
            throw .rateLimited(
                "too many requests from this address: limits.requestsPerSecond allows \(settings.requestsPerSecond) a second",
                wait: wait)
        }
    }

    /// `429 rate_limited` when the request's client is past `limits.sessionsPerMinute`; asked
    /// of the routes that create a session (declared ``Access/creating(admin:)``).
    func checkCreation(_ request: HTTPRequest, forwarded: PeerAuthentication.Forwarded? = nil) throws(APIError) {
        guard let creations, let client = client(of: request, forwarded: forwarded) else { return }
        if let wait = creations.take(client.limitKey, now: now()) {
            throw .rateLimited(
                "too many new sessions from this address: limits.sessionsPerMinute allows \(settings.sessionsPerMinute) a minute",
                wait: wait)
        }
    }

    /// `429 rate_limited` when `session` is past `limits.dispatchesPerSecond`; checked before
    /// the dispatch is read, so a refused one runs nothing.
    func checkDispatch(_ session: Session) throws(APIError) {
        guard let dispatches else { return }
        if let wait = dispatches.take(session.id, now: now()) {
            throw .rateLimited(
                "too many dispatches on this session: limits.dispatchesPerSecond allows \(settings.dispatchesPerSecond) a second; nothing was applied",
                wait: wait)
        }
    }
}

extension APIError {
    /// `429 rate_limited` with `Retry-After`: the whole seconds until the bucket has a token
    /// again (at least 1).
    static func rateLimited(_ message: String, wait: Int64) -> APIError {
        let seconds = max(1, (wait + ClientLimits.second - 1) / ClientLimits.second)
        return APIError(
            status: 429, code: "rate_limited", message: message + "; try again in \(seconds) s",
            headers: [("Retry-After", String(seconds))])
    }
}
