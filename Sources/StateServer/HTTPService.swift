import Foundation
import Logging
import MicroHTTP
import ServiceLifecycle
import StateServerHTTP

/// The HTTP side: listen address, limits and event streams.
///
/// | key | type | default |
/// | --- | --- | --- |
/// | `host` | string | `127.0.0.1` |
/// | `port` | int 0...65535 (0 = pick a free port) | `8080` |
/// | `bodyLimit` | bytes | `65536` |
/// | `heartbeat` | seconds | `15` |
/// | `streams.perSession` | event streams | `32` |
/// | `streams.total` | event streams | `10000` |
/// | `streams.presencePerSession` | streams present (`?presence=`) per session | `1000` |
/// | `streams.bufferLimit` | bytes queued per subscriber | `1048576` |
/// | `streams.shutdownRetry` | seconds a client waits before reconnecting after a shutdown | `1` |
/// | `streams.socketBuffer` | kernel send buffer bytes per stream (SO_SNDBUF), 0 = the kernel's autotuning | `65536` |
/// | `http.threads` | event threads, 0 = one per core | `0` |
/// | `http.connectionLimit` | connections, 0 = what the open-file limit fits, at most 20000 (`FileLimit`) | `0` |
/// | `http.connectionTimeout` | seconds idle before close | `60` |
/// | `http.headTimeout` | seconds from a request head's first byte to its end, 0 = no limit | `10` |
/// | `http.connectionMemoryLimit` | bytes per connection | `8192` |
/// | `http.reusePort` | share the port with other processes (SO_REUSEPORT) | `false` |
/// | `recording.maxBytes` | bytes of one `GET .../recording` (its starting states always) | `67108864` |
/// | `admin.tokenHash` | SHA-256 of the admin token, 64 hexadecimal digits; empty = no admin | `""` |
struct HTTPSettings: Sendable {
    static let host = Setting("host", default: "127.0.0.1", "listen address")
    static let port = Setting("port", default: 8080, in: 0...65535, "port, 0 = any free")
    static let bodyLimit = Setting("bodyLimit", default: 65_536, in: 1...(64 << 20), "max body bytes")
    static let heartbeat = Setting("heartbeat", default: 15.0, in: 0.05...86_400, "seconds between pings")
    static let streamsPerSession = Setting("streams.perSession", default: 32, in: 1...100_000, "streams per session")
    static let streamsTotal = Setting("streams.total", default: 10_000, in: 1...1_000_000, "streams in all")
    static let presencePerSession = Setting(
        "streams.presencePerSession", default: 1000, in: 1...100_000, "streams present per session")
    static let streamBufferLimit = Setting(
        "streams.bufferLimit", default: 1_048_576, in: 1024...(1 << 30), "bytes per slow subscriber")
    static let shutdownRetry = Setting(
        "streams.shutdownRetry", default: 1.0, in: 0...3600, "shutdown retry hint, seconds")
    static let streamSocketBuffer = Setting(
        "streams.socketBuffer", default: 65_536, in: 0...(256 << 20), "kernel send buffer bytes/stream, 0 = auto")
    static let threads = Setting("http.threads", default: 0, in: 0...256, "threads, 0 = cores")
    static let connectionLimit = Setting("http.connectionLimit", default: 0, in: 0...1_000_000, "max connections, 0 = fit nofile")
    static let connectionTimeout = Setting("http.connectionTimeout", default: 60, in: 0...86_400, "idle connection seconds")
    static let headTimeout = Setting("http.headTimeout", default: 10.0, in: 0...86_400, "seconds to send a request head, 0 = none")
    static let connectionMemoryLimit = Setting(
        "http.connectionMemoryLimit", default: 8192, in: 4096...(16 << 20), "buffer bytes/connection")
    static let reusePort = Setting("http.reusePort", default: false, "share the port (true/false)")
    static let adminTokenHash = Setting("admin.tokenHash", default: "", "SHA-256 of the admin token, hex")
    static let recordingMaxBytes = Setting(
        "recording.maxBytes", default: 64 << 20, in: 4096...(1 << 40), "bytes of one recording export")

    /// The transport's settings.
    var server = HTTPServer.Configuration()
    /// The routes' limits.
    var routes = RouteSettings()

    init(_ read: inout SettingsReader) throws(SettingsError) {
        server.host = try read(Self.host)
        server.port = try read(Self.port)
        server.bodyLimit = try read(Self.bodyLimit)
        routes.bodyLimit = server.bodyLimit
        server.heartbeat = .seconds(try read(Self.heartbeat))
        routes.maxStreamsPerSession = try read(Self.streamsPerSession)
        routes.maxStreams = try read(Self.streamsTotal)
        routes.maxPresencePerSession = try read(Self.presencePerSession)
        routes.streamBufferLimit = try read(Self.streamBufferLimit)
        routes.serverVersion = StateServerVersion.current
        let shutdownRetry = try read(Self.shutdownRetry)
        server.shutdownBytes = ServerSentEvents.shutdown(retryAfterMilliseconds: Int((shutdownRetry * 1000).rounded()))
        server.streamSocketBuffer = try read(Self.streamSocketBuffer)
        server.threads = try read(Self.threads)
        server.connectionLimit = try read(Self.connectionLimit)
        server.connectionTimeout = try read(Self.connectionTimeout)
        let headTimeout = try read(Self.headTimeout)
        server.headTimeout = headTimeout > 0 ? .milliseconds(Int((headTimeout * 1000).rounded(.up))) : nil
        server.connectionMemoryLimit = try read(Self.connectionMemoryLimit)
        server.reusePort = try read(Self.reusePort)
        routes.recordingMaxBytes = try read(Self.recordingMaxBytes)
        let adminHash = try read(Self.adminTokenHash)
        if !adminHash.isEmpty {
            guard let bytes = PeerAuthentication.bytes(hex: adminHash[...]), bytes.count == 32 else {
                throw SettingsError.notAllowed(
                    key: Self.adminTokenHash.key, allowed: "empty, or the SHA-256 of the admin token as 64 hexadecimal digits",
                    got: "\(adminHash.count) characters")
            }
            routes.adminTokenHash = bytes
        }
        // Abuse limits, trusted proxies and CORS: LimitSettings.
        try LimitSettings.read(&read, into: &self)
    }

    /// The host as it appears in a URL (`[::1]`).
    var shownHost: String { server.host.contains(":") ? "[\(server.host)]" : server.host }
}

/// Serves HTTP from `run()` until graceful shutdown: binds, prints the port line, then on
/// shutdown ends the event streams with a `shutdown` event (`streams.shutdownRetry`), stops
/// accepting and waits up to `grace` for them.
struct HTTPService: Service, CustomStringConvertible {
    let server: HTTPServer
    let settings: HTTPSettings
    let logger: Logger
    /// Logged with the `listening on` line.
    let metadata: Logger.Metadata
    var grace: Duration = .seconds(2)
    /// Awaited before the port opens (several nodes: until this node hears the others).
    var before: @Sendable () async -> Void = {}
    /// Awaited once the port is bound, before the `listening on` line (several nodes: join the
    /// cluster, advertising the port); a failure stops the server.
    var after: @Sendable (_ port: Int) async throws -> Void = { _ in }

    var description: String { "HTTPService" }

    func run() async throws {
        await before()
        let port: Int
        do {
            port = try server.start()
        } catch {
            logger.critical("cannot start", metadata: ["error": "\(error)"])
            throw error
        }
        do {
            try await after(port)
        } catch {
            await server.stop(grace: .zero)
            throw error
        }
        let url = "\(settings.scheme)://\(settings.shownHost):\(port)"
        FileHandle.standardOutput.write(Data("listening on \(url)\n".utf8))
        logger.info("listening on \(url)", metadata: metadata)
        // Returns at graceful shutdown, or throws if the group is cancelled: stop either way.
        try? await gracefulShutdown()
        await server.stop(grace: grace)
        logger.debug("HTTP stopped")
    }
}
