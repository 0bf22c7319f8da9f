import MicroHTTP
import Synchronization
import Testing

@testable import StateServerHTTP

/// The token buckets (``PaceTable``) and who a request's client is (``ClientLimits``), on an
/// injected clock. What the routes do with them is AbuseLimitTests (in process, requests given
/// peer addresses); over real connections, SocketAbuseLimitTests.
@Suite("Rate limits: token buckets and client addresses")
struct RateLimitTests {
    static let second: Int64 = 1_000_000_000

    @Test("a bucket of 3 at one token a second: three at once, then one a second; refusals take nothing and say how long")
    func bucket() {
        let table = PaceTable<String>(rate: 1, per: Self.second, burst: 3)
        #expect(table.take("a", now: 0) == nil)
        #expect(table.take("a", now: 0) == nil)
        #expect(table.take("a", now: 0) == nil)
        #expect(table.take("a", now: 0) == Self.second)
        #expect(table.take("a", now: Self.second / 4) == Self.second * 3 / 4)
        // The refusals took nothing: one token back after a second, exactly one.
        #expect(table.take("a", now: Self.second) == nil)
        #expect(table.take("a", now: Self.second) != nil)
        // Another key has its own bucket.
        #expect(table.take("b", now: Self.second) == nil)
        // After a long pause the bucket is full again, never fuller.
        let later = 100 * Self.second
        for _ in 0..<3 { #expect(table.take("a", now: later) == nil) }
        #expect(table.take("a", now: later) != nil)
    }

    @Test("per minute: 300 a minute is 300 at once, then one every 200 ms")
    func perMinute() {
        let table = PaceTable<Int>(rate: 300, per: 60 * Self.second, burst: 300)
        for _ in 0..<300 { #expect(table.take(1, now: 0) == nil) }
        #expect(table.take(1, now: 0) == Self.second / 5)
        #expect(table.take(1, now: Self.second / 5) == nil)
    }

    @Test("keys whose buckets are full again are forgotten as new keys come: the table stays small")
    func idleKeysForgotten() {
        let table = PaceTable<Int>(rate: 10, per: Self.second, burst: 10, capacity: 1024, shards: 4)
        for key in 0..<5000 {
            // Each key is used once, 10 ms apart: its bucket is full again 100 ms later.
            #expect(table.take(key, now: Int64(key) * Self.second / 100) == nil)
            #expect(table.count <= 1024)
        }
        // Only keys of the last 100 ms (10 of them) can still hold a token, plus what no sweep
        // has been due to look at yet (below each shard's sweep mark).
        #expect(table.count <= 4 * PaceTable<Int>.firstSweep)
    }

    @Test("a flood of distinct keys all in use at once stays within capacity, and the heaviest users keep their debt")
    func floodBounded() {
        let table = PaceTable<Int>(rate: 1, per: Self.second, burst: 5, capacity: 512, shards: 2)
        // Key -1 empties its bucket first: it owes the most.
        for _ in 0..<5 { #expect(table.take(-1, now: 0) == nil) }
        for key in 0..<20_000 {
            _ = table.take(key, now: 0)
            #expect(table.count <= 512)
        }
        #expect(table.take(-1, now: 0) != nil, "the key that used its whole bucket was forgotten")
    }

    @Test("the client: the peer, or behind trusted proxies the right-most untrusted X-Forwarded-For address; IPv6 by /64")
    func client() throws {
        var settings = RateLimits()
        settings.trustedProxies = try ["10.0.0.0/8", "192.0.2.1", "2001:db8:ffff::/48"].map { try #require(AddressRange($0)) }
        let limits = ClientLimits(settings, now: { 0 })
        func client(_ peer: String?, _ forwarded: [String]) -> String? {
            let request = HTTPRequest(
                method: "GET", path: "/", headers: forwarded.map { ("x-forwarded-for", $0) }, peer: peer.flatMap { IPAddress($0) })
            return limits.client(of: request)?.description
        }
        #expect(client(nil, ["198.51.100.1"]) == nil, "in process: no address")
        #expect(client("203.0.113.5", ["198.51.100.1"]) == "203.0.113.5", "an untrusted peer is the client")
        #expect(client("192.0.2.1", []) == "192.0.2.1", "a proxy without the header is the client")
        #expect(client("192.0.2.1", ["198.51.100.1"]) == "198.51.100.1")
        #expect(client("192.0.2.1", ["203.0.113.9, 198.51.100.1"]) == "198.51.100.1", "what the client wrote on the left is ignored")
        #expect(client("192.0.2.1", ["198.51.100.1, 10.2.3.4"]) == "198.51.100.1", "trusted hops are skipped")
        #expect(client("192.0.2.1", ["203.0.113.9", "198.51.100.1 , 10.2.3.4"]) == "198.51.100.1", "several fields, in order")
        #expect(client("192.0.2.1", ["10.1.1.1, 10.2.2.2"]) == "10.1.1.1", "all trusted: the left-most")
        #expect(client("192.0.2.1", ["bogus, 198.51.100.1"]) == "198.51.100.1")
        #expect(client("192.0.2.1", ["198.51.100.1, bogus"]) == "192.0.2.1", "garbage ends the walk at the last address read")
        #expect(client("192.0.2.1", ["198.51.100.1:4711"]) == "198.51.100.1", "IPv4 with a port")
        #expect(client("192.0.2.1", ["[2001:db8::7]:443"]) == "2001:db8::7", "bracketed IPv6 with a port")
        #expect(client("192.0.2.1", ["2001:db8::7"]) == "2001:db8::7")
        #expect(client("::ffff:192.0.2.1", ["198.51.100.1"]) == "198.51.100.1", "an IPv4-mapped peer is the IPv4 proxy")
        #expect(client("2001:db8:ffff:1::1", ["198.51.100.1"]) == "198.51.100.1", "an IPv6 proxy range")

        let a = try #require(IPAddress("2001:db8:1:2:aaaa::1"))
        let b = try #require(IPAddress("2001:db8:1:2:bbbb::2"))
        let c = try #require(IPAddress("2001:db8:1:3::1"))
        #expect(a.limitKey == b.limitKey && a.limitKey != c.limitKey, "IPv6 counts by /64")
        let v4 = try #require(IPAddress("198.51.100.1"))
        #expect(v4.limitKey == v4 && v4.isIPv4 && v4 == IPAddress("::ffff:198.51.100.1"))
    }

    @Test("address ranges: CIDR and single addresses, IPv4 and IPv6; anything else is refused")
    func ranges() throws {
        let private10 = try #require(AddressRange("10.0.0.0/8"))
        #expect(private10.contains(try #require(IPAddress("10.255.1.2"))))
        #expect(!private10.contains(try #require(IPAddress("11.0.0.1"))))
        #expect(!private10.contains(try #require(IPAddress("::a00:1"))), "an IPv6 address is not in an IPv4 range")
        #expect(AddressRange("10.1.2.3/8") == private10, "host bits are ignored")
        #expect(private10.description == "10.0.0.0/8")
        func address(_ text: String) throws -> IPAddress { try #require(IPAddress(text), "\(text)") }
        let all4 = try #require(AddressRange("0.0.0.0/0"))
        #expect(all4.contains(try address("203.0.113.1")))
        #expect(!all4.contains(try address("2001:db8::1")))
        let one = try #require(AddressRange("::1"))
        #expect(one.contains(try address("::1")))
        #expect(!one.contains(try address("::2")))
        let net6 = try #require(AddressRange("2001:db8::/32"))
        #expect(net6.contains(try address("2001:db8:ffff::1")))
        #expect(!net6.contains(try address("2001:db9::1")))
        for bad in ["", "x", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8/8", "1.2.3", "[::1]", "::1%eth0", "10.0.0.0/٨"] {
            #expect(AddressRange(bad) == nil, "\(bad) was read as a range")
        }
    }

    @Test("a refusal is 429 rate_limited with Retry-After in whole seconds, at least 1")
    func refusal() {
        #expect(APIError.rateLimited("x", wait: 1).headers.first { $0.name == "Retry-After" }?.value == "1")
        #expect(APIError.rateLimited("x", wait: Self.second).headers.first { $0.name == "Retry-After" }?.value == "1")
        #expect(APIError.rateLimited("x", wait: Self.second + 1).headers.first { $0.name == "Retry-After" }?.value == "2")
        let error = APIError.rateLimited("too many", wait: 20 * Self.second)
        #expect(error.status == 429 && error.code == "rate_limited" && error.message == "too many; try again in 20 s")
    }

    @Test("requests count per client address, on the limits' clock; requests made in process never")
    func requestClock() {
        var settings = RateLimits()
        settings.requestsPerSecond = 2
        let clock = Mutex<Int64>(0)
        let limits = ClientLimits(settings, now: { clock.withLock { $0 } })
        let request = HTTPRequest(method: "GET", path: "/healthz", peer: IPAddress("198.51.100.1"))
        #expect(throws: Never.self) { try limits.checkRequest(request, forwarded: nil) }
        #expect(throws: Never.self) { try limits.checkRequest(request, forwarded: nil) }
        #expect(throws: APIError.self) { try limits.checkRequest(request, forwarded: nil) }
        clock.withLock { $0 = Self.second / 2 }
        #expect(throws: Never.self) { try limits.checkRequest(request, forwarded: nil) }
        // In process (no peer): never limited by address.
        for _ in 0..<10 {
            #expect(throws: Never.self) { try limits.checkRequest(HTTPRequest(method: "GET", path: "/healthz"), forwarded: nil) }
        }
    }

    @Test("a request a peer forwarded (its MAC believed) counted where it arrived: not again here; its client is the one that node stated, never the X-Forwarded-For")
    func forwardedRequests() throws {
        var settings = RateLimits()
        settings.requestsPerSecond = 1
        settings.trustedProxies = [try #require(AddressRange("10.0.0.0/8"))]
        let limits = ClientLimits(settings, now: { 0 })
        let node = HTTPRequest(
            method: "GET", path: "/v1/sessions/s/state", headers: [("x-forwarded-for", "198.51.100.1")], peer: IPAddress("10.0.0.2"))
        let forwarded = PeerAuthentication.Forwarded(epoch: 7, client: IPAddress("203.0.113.5"))
        for _ in 0..<5 { #expect(throws: Never.self) { try limits.checkRequest(node, forwarded: forwarded) } }
        #expect(limits.client(of: node, forwarded: forwarded)?.description == "203.0.113.5")
        #expect(limits.client(of: node)?.description == "198.51.100.1", "not believed: a trusted proxy's request")
        #expect(throws: Never.self) { try limits.checkRequest(node, forwarded: nil) }
        #expect(throws: APIError.self) { try limits.checkRequest(node, forwarded: nil) }
    }
}
