import AsyncHTTPClient
import Foundation
import Logging
import MicroHTTP
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import ServiceLifecycle
import StateServerHTTP

/// Several nodes: forwards a request for a session another node owns to that node over
/// HTTP/1.1 (AsyncHTTPClient, a keep-alive pool per owner) and relays its reply — event streams
/// too, event by event, so a stream served through another node reads exactly like one from
/// the owner. Hop-by-hop headers are not passed on (RFC 9110 §7.6.1); the request carries
/// ``forwardedHeader`` so the owner never forwards it again.
///
/// Two clients, so that streams never starve requests: an event stream holds its connection
/// for as long as it lasts, and streams in a capped pool shared with requests (64 per owner)
/// left every other request waiting for a connection that never came. Requests use a pool of
/// 64 connections per owner; event streams a client of their own whose pool per owner is as
/// large as `streams.total`, which every relayed stream counts in, so a stream never waits
/// for a connection either. (HTTP/2 between nodes would multiplex both over few connections,
/// but the nodes serve HTTP/1.1 only; serving the stream on the node the client reached would
/// need every owner's changes on every node again, the NOTIFY traffic ownership removed.)
final class Forwarder: RequestForwarder {
    /// Requests other than event streams.
    let client: HTTPClient
    /// Event streams: one connection each, for as long as the stream lasts.
    let streamClient: HTTPClient
    let epoch: @Sendable () -> Int64
    /// Signs ``forwardedHeader`` with the cluster secret.
    let peers: PeerAuthentication
    let streamBufferLimit: Int
    let logger: Logger
    /// Longest wait for a reply that is not an event stream: the membership lease (an owner
    /// that does not answer for that long is paused or cut off, and loses its sessions).
    let replyTimeout: TimeAmount
    /// Largest reply body relayed (replies are states: the server's own limits keep them far
    /// below this).
    static let replyLimit = 256 << 20

    /// Connections per owner for requests other than event streams.
    static let requestConnections = 64

    /// - Parameter streamLimit: `streams.total`: the most event streams this node relays at once.
    /// - Parameter trust: certificates trusted, besides the system's CA bundle, for owners'
    ///   `https://` URLs (`cluster.caFile`).
    init(
        epoch: @escaping @Sendable () -> Int64, peers: PeerAuthentication, lease: Duration, streamBufferLimit: Int, streamLimit: Int,
        trust: [NIOSSLCertificate] = [], logger: Logger
    ) {
        self.peers = peers
        replyTimeout = .nanoseconds(lease.components.seconds * 1_000_000_000 + lease.components.attoseconds / 1_000_000_000)
        func makeClient(connections: Int) -> HTTPClient {
            var configuration = HTTPClient.Configuration(
                redirectConfiguration: .disallow,
                timeout: .init(connect: .seconds(1), read: nil),
                decompression: .disabled)
            configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = connections
            // A refused connection fails the request at once (`503 owner_unavailable`, nothing
            // sent) instead of being tried again until the connect timeout: between nodes it
            // means the owner's process is gone, and the next attempt should look up the owner
            // again (its membership ends within a second, issue 39), not wait here.
            configuration.connectionPool.retryConnectionEstablishment = false
            // For owners' https:// URLs: full verification (chain and host name), against the
            // system's roots plus `trust`. A connection this node closes does not wait for the
            // owner's close_notify (swift-nio-ssl waits 5 s by default): libmicrohttpd does not
            // read a suspended event stream's connection, so a relayed stream the client left
            // held its connection, and the owner's stream, 5 s longer, and a node with one
            // could not stop within 5 s.
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.additionalTrustRoots = trust.isEmpty ? [] : [.certificates(trust)]
            tls.shutdownTimeout = .milliseconds(100)
            configuration.tlsConfiguration = tls
            return HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
        }
        client = makeClient(connections: Self.requestConnections)
        streamClient = makeClient(connections: max(streamLimit, 1))
        self.epoch = epoch
        self.streamBufferLimit = streamBufferLimit
        self.logger = logger
    }

    /// Not passed on: hop-by-hop fields, what the client sets itself, and what only this node
    /// may say (the forwarding headers, the client's address).
    static let dropped: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host",
        "content-length", "expect", "proxy-authorization", forwardedHeader, forwardedMACHeader, forwardedForHeader, "x-forwarded-for",
    ]

    func forward(_ request: HTTPRequest, client address: IPAddress?, to base: String, route: String) async -> HTTPResponse {
        var target = base.hasSuffix("/") ? String(base.dropLast()) : base
        target += request.path
        if !request.query.isEmpty {
            target += "?" + request.query.map { Self.encode($0.name) + ($0.value.map { "=" + Self.encode($0) } ?? "") }
                .joined(separator: "&")
        }
        var outgoing = HTTPClientRequest(url: target)
        outgoing.method = HTTPMethod(rawValue: request.method)
        var headers = request.headers.filter { !Self.dropped.contains($0.name) }
        // The client as this node determined it, never the X-Forwarded-For the client wrote:
        // under the MAC for the owner, and as the one X-Forwarded-For for an owner that trusts
        // this node as a proxy but cannot verify its MAC (clocks too far apart).
        if let address {
            headers.append(("x-forwarded-for", address.description))
            headers.append((forwardedForHeader, address.description))
        }
        let from = "\(epoch())"
        headers.append((forwardedHeader, from))
        // Signed here, for this attempt (a new time and nonce): the owner accepts a MAC once.
        let mac = peers.sign(
            epoch: from, method: request.method, path: request.path, query: request.query, headers: headers, body: request.body)
        headers.append((forwardedMACHeader, mac))
        for (name, value) in headers { outgoing.headers.add(name: name, value: value) }
        if !request.body.isEmpty || request.method == "POST" || request.method == "PUT" {
            outgoing.body = .bytes(ByteBuffer(bytes: request.body))
        }
        let isStream = route.hasSuffix("/events") && request.method == "GET"
        do {
            let response = try await (isStream ? streamClient : client).execute(
                outgoing, deadline: isStream ? .distantFuture : .now() + replyTimeout, logger: logger)
            var headers: [(name: String, value: String)] = []
            for (name, value) in response.headers where !Self.dropped.contains(name.lowercased()) && name.lowercased() != "date" {
                headers.append((name, value))
            }
            let isEventStream = response.headers.first(name: "content-type")?.hasPrefix("text/event-stream") == true
            if isEventStream && request.method == "GET" {
                // A stream present on the owner (`?presence=`) watches for a vanished client
                // here too, where the client is: the owner sees this node's connection end.
                let present = !request.queryValues("presence").isEmpty
                return relay(
                    response, status: Int(response.status.code), headers: headers, route: route,
                    peerTimeout: present ? RouteSettings.presencePeerTimeout : nil)
            }
            let body = try await response.body.collect(upTo: Self.replyLimit)
            return HTTPResponse(status: Int(response.status.code), headers: headers, body: .bytes(Array(buffer: body)), route: route)
        } catch {
            let reached = !Self.neverSent(error)
            logger.warning(
                "forwarding to the session's owner failed",
                metadata: ["owner": "\(base)", "route": "\(route)", "error": "\(error)", "sent": "\(reached)"])
            let isChange = request.method != "GET" && request.method != "HEAD"
            if reached && isChange {
                return forwardingFailure(
                    code: "outcome_unknown",
                    message: "the node that owns this session stopped answering while the change was sent; it may have been applied: "
                        + "read the state, or retry with the same Idempotency-Key",
                    route: route)
            }
            return forwardingFailure(
                code: "owner_unavailable", message: "the node that owns this session cannot be reached; nothing was applied, try again",
                route: route)
        }
    }

    /// An event stream from the owner, passed on whole events at a time (a heartbeat this node
    /// adds never lands inside one), until either side ends it.
    private func relay(
        _ response: HTTPClientResponse, status: Int, headers: [(name: String, value: String)], route: String, peerTimeout: Duration?
    ) -> HTTPResponse {
        let stream = EventStream(bufferLimit: streamBufferLimit, peerTimeout: peerTimeout)
        let pump = Task {
            var pending: [UInt8] = []
            do {
                for try await chunk in response.body {
                    pending += chunk.readableBytesView
                    guard let end = Self.lastEventEnd(pending) else { continue }
                    guard stream.send(Array(pending[..<end])) else { break }
                    pending.removeSubrange(..<end)
                }
            } catch {
                // The owner went away or the client did: either way the stream ends; the
                // client resumes with Last-Event-ID.
            }
            stream.close()
        }
        stream.onFinish { pump.cancel() }
        return HTTPResponse(status: status, headers: headers, body: .stream(stream), route: route)
    }

    /// Index just past the last blank line (`\n\n`) in `bytes`, which ends an event.
    static func lastEventEnd(_ bytes: [UInt8]) -> Int? {
        var index = bytes.count - 1
        while index > 0 {
            if bytes[index] == 0x0A && bytes[index - 1] == 0x0A { return index + 1 }
            index -= 1
        }
        return nil
    }

    /// Whether the request cannot have reached the owner: no connection was made, or none
    /// came free in the pool in time (the request waited in the pool's queue, unsent).
    static func neverSent(_ error: any Error) -> Bool {
        if error is NIOConnectionError { return true }
        // A TLS handshake that failed (an owner's certificate this node does not trust, or that
        // does not name the host of its URL): the request was never sent.
        if case NIOSSLError.handshakeFailed = error { return true }
        if error is NIOSSLExtraError { return true }
        if let error = error as? HTTPClientError, error == .connectTimeout || error == .getConnectionFromPoolTimeout { return true }
        if let error = error as? IOError, error.errnoCode == ECONNREFUSED { return true }
        let text = String(describing: error)
        return text.contains("connectTimeout") || text.contains("getConnectionFromPoolTimeout") || text.contains("connection refused")
            || text.contains("ECONNREFUSED")
    }

    /// Percent-encodes a query name or value (RFC 3986 unreserved characters stay).
    static func encode(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x2D, 0x2E, 0x5F, 0x7E: out.unicodeScalars.append(UnicodeScalar(byte))
            default: out += String(format: "%%%02X", byte)
            }
        }
        return out
    }

    func shutdown() async {
        try? await client.shutdown()
        try? await streamClient.shutdown()
    }
}

/// Shuts the forwarder's HTTP client down at graceful shutdown (after the HTTP server stopped).
struct ForwarderService: Service, CustomStringConvertible {
    let forwarder: Forwarder
    var description: String { "ForwarderService" }

    func run() async {
        try? await gracefulShutdown()
        await forwarder.shutdown()
    }
}
