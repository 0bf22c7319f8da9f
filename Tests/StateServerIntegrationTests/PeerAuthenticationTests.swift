import MicroHTTP
import StateServerHTTP
import Synchronization
import Testing

/// The MAC of a forwarded request (issue 24 item 5): what the forwarding node signs, the owner
/// accepts, and nothing else.
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
    static func keys(_ secrets: [String], clock: Clock) -> PeerAuthentication {
        PeerAuthentication(secrets: secrets) { clock.now }
    }

    /// The request as the owner receives it, signed by `keys` (or with `mac` instead).
    static func request(
        signedBy keys: PeerAuthentication, epoch: String = "7", method: String = "POST", path: String = "/v1/sessions/s1/dispatch",
        query: [(name: String, value: String?)] = [("delta", "json-patch"), ("flag", nil)], body: [UInt8] = Array(#"{"a":1}"#.utf8),
        mac: String? = nil, received: (method: String, path: String, body: [UInt8])? = nil
    ) -> HTTPRequest {
        let value = mac ?? keys.sign(epoch: epoch, method: method, path: path, query: query, body: body)
        return HTTPRequest(
            method: received?.method ?? method, path: received?.path ?? path,
            headers: [(forwardedHeader, epoch), (forwardedMACHeader, value)], query: query, body: received?.body ?? body)
    }

    @Test("a request signed with the secret names its forwarding node; one signed with another secret, altered, or made up does not")
    func signAndVerify() {
        let clock = Clock(1_800_000_000)
        let keys = Self.keys([Self.secret], clock: clock)
        #expect(keys.forwardedBy(Self.request(signedBy: keys)) == 7)
        #expect(keys.forwardedBy(Self.request(signedBy: Self.keys([Self.other], clock: clock))) == nil)
        let body = Array(#"{"a":1}"#.utf8)
        #expect(keys.forwardedBy(Self.request(signedBy: keys, received: ("DELETE", "/v1/sessions/s1/dispatch", body))) == nil)
        #expect(keys.forwardedBy(Self.request(signedBy: keys, received: ("POST", "/v1/sessions/s2/dispatch", body))) == nil)
        #expect(keys.forwardedBy(Self.request(signedBy: keys, received: ("POST", "/v1/sessions/s1/dispatch", Array(#"{"a":2}"#.utf8)))) == nil)
        for made in ["", "garbage", "1800000000.", "1800000000.\(String(repeating: "00", count: 32))", "-9223372036854775808.00",
                     "9223372036854775807.\(String(repeating: "ab", count: 32))", "-9223372036854775808.\(String(repeating: "ab", count: 32))"] {
            #expect(keys.forwardedBy(Self.request(signedBy: keys, mac: made)) == nil, "\(made)")
        }
        // No header at all, or the MAC without the header.
        #expect(keys.forwardedBy(HTTPRequest(method: "GET", path: "/")) == nil)
        let signed = Self.request(signedBy: keys)
        let alone = HTTPRequest(method: signed.method, path: signed.path, headers: signed.headers.filter { $0.name != forwardedHeader },
                                query: signed.query, body: signed.body)
        #expect(keys.forwardedBy(alone) == nil)
    }

    @Test("the epoch is covered: a valid MAC with another node's epoch in the header is refused")
    func epochCovered() {
        let clock = Clock(1_800_000_000)
        let keys = Self.keys([Self.secret], clock: clock)
        let signed = Self.request(signedBy: keys, epoch: "7")
        let swapped = HTTPRequest(
            method: signed.method, path: signed.path,
            headers: signed.headers.map { $0.name == forwardedHeader ? ($0.name, "8") : $0 }, query: signed.query, body: signed.body)
        #expect(keys.forwardedBy(swapped) == nil)
    }

    @Test("a MAC holds for 60 s either side of the receiver's clock, not longer")
    func window() {
        let clock = Clock(1_800_000_000)
        let keys = Self.keys([Self.secret], clock: clock)
        let signed = Self.request(signedBy: keys)
        for (offset, valid) in [(-61, false), (-60, true), (0, true), (60, true), (61, false)] as [(Int64, Bool)] {
            clock.set(1_800_000_000 + offset)
            #expect((keys.forwardedBy(signed) != nil) == valid, "received \(offset) s after it was signed")
        }
    }

    @Test("rotation: the first secret signs, every one listed verifies")
    func rotation() {
        let clock = Clock(1_800_000_000)
        let old = Self.keys([Self.secret], clock: clock)
        let both = Self.keys([Self.other, Self.secret], clock: clock)
        let new = Self.keys([Self.other], clock: clock)
        #expect(both.forwardedBy(Self.request(signedBy: old)) == 7)
        #expect(both.forwardedBy(Self.request(signedBy: new)) == 7)
        #expect(new.forwardedBy(Self.request(signedBy: both)) == 7, "the first one signs")
        #expect(old.forwardedBy(Self.request(signedBy: both)) == nil)
    }
}
