import MicroHTTP
import StateServerHTTP
import Synchronization
import Testing

/// The MAC of a forwarded request (issue 24 item 5, issue 36 item 11): what the forwarding node
/// signs, the owner accepts — once — and nothing else.
@Suite("Forwarded requests: the cluster secret's MAC")
struct PeerAuthenticationTests {
    static let secret = "first-cluster-secret-0123456789abcdef"
    static let other = "other-cluster-secret-0123456789abcdef"

    /// A wall clock the test sets.
    final class Clock: Sendable {
        private let seconds: Atomic<Int64>
        init(_ seconds: Int64) { self.seconds = Atomic(seconds) }
        func set(_ value: Int64) { seconds.store(value, ordering: .relaxed) }
        var now: Int64 { seconds.load(ordering: .relaxed) }
    }

    /// Keys whose clock reads `clock`.
    static func keys(_ secrets: [String], clock: Clock, capacity: Int = PeerAuthentication.capacity) -> PeerAuthentication {
        PeerAuthentication(secrets: secrets, capacity: capacity) { clock.now }
    }

    /// What a forwarding node sends along with a dispatch: the credential, the key, the
    /// client it determined, and a header the MAC does not cover.
    static let sentHeaders: [(name: String, value: String)] = [
        ("authorization", "Bearer token-1"), ("content-type", "application/json"), ("idempotency-key", "k-1"),
        ("x-forwarded-for", "198.51.100.7"), (forwardedForHeader, "198.51.100.7"), ("user-agent", "test"),
    ]

    /// The request as the owner receives it, signed by `keys` (or with `mac` instead); with
    /// `received`, the owner receives that instead of what was signed.
    static func request(
        signedBy keys: PeerAuthentication, epoch: String = "7", method: String = "POST", path: String = "/v1/sessions/s1/dispatch",
        query: [(name: String, value: String?)] = [("delta", "json-patch"), ("flag", nil)],
        headers: [(name: String, value: String)] = sentHeaders, body: [UInt8] = Array(#"{"a":1}"#.utf8),
        mac: String? = nil, received: (method: String, path: String, headers: [(name: String, value: String)], body: [UInt8])? = nil
    ) -> HTTPRequest {
        let value = mac ?? keys.sign(epoch: epoch, method: method, path: path, query: query, headers: headers, body: body)
        return HTTPRequest(
            method: received?.method ?? method, path: received?.path ?? path,
            headers: (received?.headers ?? headers) + [(forwardedHeader, epoch), (forwardedMACHeader, value)], query: query,
            body: received?.body ?? body)
    }

    /// The verdict on a valid, new MAC from node 7 for client 198.51.100.7.
    static let believed = PeerAuthentication.Verdict.forwarded(.init(epoch: 7, client: IPAddress("198.51.100.7")))

    @Test("a request signed with the secret names its forwarding node and its client; one signed with another secret, altered, or made up does not")
    func signAndVerify() {
        let clock = Clock(1_800_000_000)
        let keys = Self.keys([Self.secret], clock: clock)
        #expect(keys.verify(Self.request(signedBy: keys)) == Self.believed)
        #expect(keys.verify(Self.request(signedBy: Self.keys([Self.other], clock: clock))) == .invalid)
        let body = Array(#"{"a":1}"#.utf8)
        #expect(keys.verify(Self.request(signedBy: keys, received: ("DELETE", "/v1/sessions/s1/dispatch", Self.sentHeaders, body))) == .invalid)
        #expect(keys.verify(Self.request(signedBy: keys, received: ("POST", "/v1/sessions/s2/dispatch", Self.sentHeaders, body))) == .invalid)
        #expect(keys.verify(Self.request(signedBy: keys, received: ("POST", "/v1/sessions/s1/dispatch", Self.sentHeaders, Array(#"{"a":2}"#.utf8)))) == .invalid)
        let hex64 = String(repeating: "ab", count: 32)
        let hex32 = String(repeating: "cd", count: 16)
        for made in ["", "garbage", "1800000000.", "1800000000.\(String(repeating: "00", count: 32))", "-9223372036854775808.00",
                     "9223372036854775807.\(hex64)", "-9223372036854775808.\(hex64)", "v2", "v2...", "v2.1800000000.\(hex32).",
                     "v2.1800000000.\(hex32).\(hex64)", "v2.1800000000.\(hex32).\(hex64).", "v1.1800000000.\(hex32).\(hex64)",
                     "v2.-9223372036854775808.\(hex32).\(hex64)", "v2.9223372036854775807.\(hex32).\(hex64)",
                     "v2.1800000000.zz\(hex32.dropFirst(2)).\(hex64)", "v2.1800000000.\(hex32)ab.\(hex64)"] {
            #expect(keys.verify(Self.request(signedBy: keys, mac: made)) == .invalid, "\(made)")
        }
        // No header at all, the MAC without the header, a header that is not an epoch.
        #expect(keys.verify(HTTPRequest(method: "GET", path: "/")) == .invalid)
        let signed = Self.request(signedBy: keys)
        let alone = HTTPRequest(method: signed.method, path: signed.path, headers: signed.headers.filter { $0.name != forwardedHeader },
                                query: signed.query, body: signed.body)
        #expect(keys.verify(alone) == .invalid)
        #expect(keys.verify(Self.request(signedBy: keys, epoch: "seven")) == .invalid)
    }

    @Test("the epoch is covered: a valid MAC with another node's epoch in the header is refused")
    func epochCovered() {
        let clock = Clock(1_800_000_000)
        let keys = Self.keys([Self.secret], clock: clock)
        let signed = Self.request(signedBy: keys, epoch: "7")
        let swapped = HTTPRequest(
            method: signed.method, path: signed.path,
            headers: signed.headers.map { $0.name == forwardedHeader ? ($0.name, "8") : $0 }, query: signed.query, body: signed.body)
        #expect(keys.verify(swapped) == .invalid)
    }

    @Test("the headers that change a request's meaning are covered (each altered, added, repeated or removed: refused); others are not")
    func headersCovered() {
        let clock = Clock(1_800_000_000)
        let keys = Self.keys([Self.secret], clock: clock)
        func received(_ change: ([(name: String, value: String)]) -> [(name: String, value: String)]) -> PeerAuthentication.Verdict {
            let body = Array(#"{"a":1}"#.utf8)
            return keys.verify(Self.request(signedBy: keys, received: ("POST", "/v1/sessions/s1/dispatch", change(Self.sentHeaders), body)))
        }
        for (name, value) in [("authorization", "Bearer token-2"), ("content-type", "text/plain"), ("idempotency-key", "k-2"),
                              (forwardedForHeader, "203.0.113.9")] {
            #expect(received { $0.map { $0.name == name ? (name, value) : $0 } } == .invalid, "\(name) altered")
            #expect(received { $0.filter { $0.name != name } } == .invalid, "\(name) removed")
            #expect(received { $0 + [(name, value)] } == .invalid, "a second \(name)")
        }
        for (name, value) in [("if-match", "\"3\""), ("if-none-match", "\"3\""), ("last-event-id", "12"), ("origin", "https://a.example")] {
            #expect(received { $0 + [(name, value)] } == .invalid, "\(name) added")
        }
        #expect(received { $0.map { $0.name == "user-agent" ? ("user-agent", "other") : $0 } } == Self.believed, "not covered")
        #expect(received { $0.map { $0.name == "x-forwarded-for" ? ("x-forwarded-for", "203.0.113.9, 10.0.0.1") : $0 } } == Self.believed,
                "X-Forwarded-For is not covered: a proxy between nodes may append to it")
        #expect(received { $0 + [("via", "1.1 proxy")] } == Self.believed)
    }

    @Test("a MAC is accepted once: the same request again is a replay; the same request signed twice in the same second has two MACs, each accepted once")
    func replayRefused() {
        let clock = Clock(1_800_000_000)
        let keys = Self.keys([Self.secret], clock: clock)
        let signed = Self.request(signedBy: keys)
        #expect(keys.verify(signed) == Self.believed)
        #expect(keys.verify(signed) == .replayed)
        clock.set(1_800_000_030)
        #expect(keys.verify(signed) == .replayed, "still remembered within the window")
        clock.set(1_800_000_000)
        let again = Self.request(signedBy: keys)
        #expect(again.header(forwardedMACHeader) != signed.header(forwardedMACHeader), "a new nonce")
        #expect(keys.verify(again) == Self.believed)
        #expect(keys.verify(again) == .replayed)
        // Copies of the keys (the router's and the forwarder's) share what was seen.
        let copy = keys
        #expect(copy.verify(signed) == .replayed)
    }

    @Test("a MAC holds for 60 s either side of the receiver's clock, not longer")
    func window() {
        let clock = Clock(1_800_000_000)
        let keys = Self.keys([Self.secret], clock: clock)
        for (offset, valid) in [(-61, false), (-60, true), (0, true), (60, true), (61, false)] as [(Int64, Bool)] {
            clock.set(1_800_000_000)
            let signed = Self.request(signedBy: keys)
            clock.set(1_800_000_000 + offset)
            #expect((keys.verify(signed) == Self.believed) == valid, "received \(offset) s after it was signed")
        }
    }

    @Test("the table of MACs seen is bounded: full, a new valid MAC is refused rather than an unexpired one forgotten; expired ones make room; a MAC forgotten stays refused if the clock steps back")
    func bounded() {
        let clock = Clock(1_800_000_000)
        let keys = Self.keys([Self.secret], clock: clock, capacity: 3)
        let first = (0..<3).map { _ in Self.request(signedBy: keys) }
        for request in first { #expect(keys.verify(request) == Self.believed) }
        let fourth = Self.request(signedBy: keys)
        #expect(keys.verify(fourth) == .full)
        for request in first { #expect(keys.verify(request) == .replayed, "not forgotten while full") }
        clock.set(1_800_000_060)
        #expect(keys.verify(Self.request(signedBy: keys)) == .full, "60 s on, the first three may still be replayed")
        clock.set(1_800_000_061)
        let later = Self.request(signedBy: keys)
        #expect(keys.verify(later) == Self.believed, "expired ones were forgotten")
        #expect(keys.verify(fourth) == .invalid, "out of the window")
        clock.set(1_800_000_000)
        for request in first { #expect(keys.verify(request) == .replayed, "the clock stepped back: forgotten, still refused") }
    }

    @Test("rotation: the first secret signs, every one listed verifies")
    func rotation() {
        let clock = Clock(1_800_000_000)
        let old = Self.keys([Self.secret], clock: clock)
        let both = Self.keys([Self.other, Self.secret], clock: clock)
        let new = Self.keys([Self.other], clock: clock)
        #expect(both.verify(Self.request(signedBy: old)) == Self.believed)
        #expect(both.verify(Self.request(signedBy: new)) == Self.believed)
        #expect(new.verify(Self.request(signedBy: both)) == Self.believed, "the first one signs")
        #expect(old.verify(Self.request(signedBy: both)) == .invalid)
    }
}
