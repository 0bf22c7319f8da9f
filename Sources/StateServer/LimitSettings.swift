import Foundation
import MicroHTTP
import StateServerHTTP

/// Abuse limits, the proxies whose `X-Forwarded-For` is believed, and CORS. `0` turns a limit
/// off. The defaults suit a server facing browsers directly; behind a proxy list the proxy in
/// `http.trustedProxies` (deploy/ does, with production values).
///
/// | key | type | default |
/// | --- | --- | --- |
/// | `limits.sessionsPerMinute` | sessions created per client address per minute | `300` |
/// | `limits.connectionsPerAddress` | connections one client address may hold | `100` |
/// | `limits.requestsPerSecond` | requests per client address per second | `1000` |
/// | `limits.dispatchesPerSecond` | dispatches per session per second | `100` |
/// | `http.trustedProxies` | comma-separated addresses or CIDR ranges | `""` |
/// | `cors.allowedOrigins` | comma-separated origins, or `*` | `""` |
struct LimitSettings: Sendable {
    static let sessionsPerMinute = Setting(
        "limits.sessionsPerMinute", default: 300, in: 0...1_000_000, "new sessions/address/minute, 0 = no limit")
    static let connectionsPerAddress = Setting(
        "limits.connectionsPerAddress", default: 100, in: 0...1_000_000, "connections/address, 0 = no limit")
    static let requestsPerSecond = Setting(
        "limits.requestsPerSecond", default: 1000, in: 0...100_000_000, "requests/address/second, 0 = no limit")
    static let dispatchesPerSecond = Setting(
        "limits.dispatchesPerSecond", default: 100, in: 0...1_000_000, "dispatches/session/second, 0 = no limit")
    static let trustedProxies = Setting("http.trustedProxies", default: "", "proxies believed for X-Forwarded-For")
    static let allowedOrigins = Setting("cors.allowedOrigins", default: "", "origins allowed by CORS, or *")

    /// Reads the settings into the transport's and the routes' configuration.
    static func read(_ read: inout SettingsReader, into http: inout HTTPSettings) throws(SettingsError) {
        var limits = RateLimits()
        limits.sessionsPerMinute = try read(Self.sessionsPerMinute)
        http.server.connectionsPerAddress = try read(Self.connectionsPerAddress)
        limits.requestsPerSecond = try read(Self.requestsPerSecond)
        limits.dispatchesPerSecond = try read(Self.dispatchesPerSecond)
        limits.trustedProxies = try ranges(try read(Self.trustedProxies))
        http.server.connectionLimitExempt = limits.trustedProxies
        http.routes.limits = limits
        http.routes.cors = try origins(try read(Self.allowedOrigins))
    }

    /// `10.0.0.0/8, 192.0.2.1, ::1`: every entry an address or a CIDR range.
    static func ranges(_ text: String) throws(SettingsError) -> [AddressRange] {
        var ranges: [AddressRange] = []
        for entry in entries(text) {
            guard let range = AddressRange(entry) else {
                throw .notAllowed(
                    key: trustedProxies.key, allowed: "comma-separated IP addresses or CIDR ranges (10.0.0.0/8, ::1)",
                    got: "'\(entry)'")
            }
            ranges.append(range)
        }
        return ranges
    }

    /// `https://app.example.com, http://localhost:3000`, or `*` alone: each entry a browser's
    /// `Origin` (scheme, host and port if not the default; no path), compared lower-cased.
    static func origins(_ text: String) throws(SettingsError) -> CORSSettings {
        var cors = CORSSettings()
        let list = entries(text)
        if list == ["*"] {
            cors.anyOrigin = true
            return cors
        }
        for entry in list {
            let lower = entry.lowercased()
            let rest = lower.hasPrefix("https://") ? lower.dropFirst(8) : lower.hasPrefix("http://") ? lower.dropFirst(7) : nil
            guard let rest, !rest.isEmpty, !rest.contains(where: { "/?#@* ".contains($0) }) else {
                throw .notAllowed(
                    key: allowedOrigins.key,
                    allowed: "comma-separated origins like https://app.example.com (scheme, host, port; no path), or * alone",
                    got: "'\(entry)'")
            }
            cors.allowedOrigins.append(lower)
        }
        return cors
    }

    private static func entries(_ text: String) -> [String] {
        text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}
