import Configuration
import Foundation
import SystemPackage

/// Every setting of the server, with its key, environment variable and default.
///
/// Layers, highest first: command-line flags, environment variables (`STATE_SERVER_` + the key
/// in upper snake case: `streams.bufferLimit` ↔ `STATE_SERVER_STREAMS_BUFFER_LIMIT`), the YAML
/// file given by `--config` or `STATE_SERVER_CONFIG`, then the defaults below — which
/// `config/state-server.yaml` restates and documents.
///
/// | key | type | default |
/// | --- | --- | --- |
/// | `host` | string | `127.0.0.1` |
/// | `storage` | `memory` or `sqlite:PATH` | `memory` |
/// | `persistence.snapshotEvery` | changes per store between snapshots | `100` |
/// | `persistence.maxBytes` | bytes the database may grow to, 0 = no limit | `0` |
/// | `persistence.sync` | `full` (fsync every commit) or `normal` (fsync at checkpoints) | `full` |
/// | `sessions.idleTimeout` | seconds before an unused durable session leaves memory | `300` |
/// | `sessions.ttl` | seconds of inactivity before a session is deleted | `2592000` |
/// | `sessions.sweepInterval` | seconds between eviction and TTL sweeps | `30` |
/// | `port` | int 0...65535 (0 = pick a free port) | `8080` |
/// | `bodyLimit` | bytes | `65536` |
/// | `heartbeat` | seconds | `15` |
/// | `replayBuffer` | events per session | `1000` |
/// | `streams.perSession` | event streams | `32` |
/// | `streams.total` | event streams | `10000` |
/// | `streams.bufferLimit` | bytes queued per subscriber | `1048576` |
/// | `sessions.max` | sessions | `100000` |
/// | `idempotency.keys` | keys remembered per session | `1000` |
/// | `login.checkDelay` | seconds | `0.2` |
/// | `log.level` | trace…critical | `info` |
/// | `log.format` | `text` or `json` | `text` |
/// | `http.threads` | event threads, 0 = one per core | `0` |
/// | `http.connectionLimit` | connections | `20000` |
/// | `http.connectionTimeout` | seconds idle before close | `60` |
/// | `http.connectionMemoryLimit` | bytes per connection | `8192` |
/// | `http.reusePort` | share the port with other processes (SO_REUSEPORT) | `false` |
struct ServerConfiguration: Equatable {
    var host = "127.0.0.1"
    var storage = "memory"
    var snapshotEvery = 100
    var storageMaxBytes = 0
    var sync = "full"
    var idleTimeout = 300.0
    var ttl = 2_592_000.0
    var sweepInterval = 30.0
    var port = 8080
    var bodyLimit = 65_536
    var heartbeat = 15.0
    var replayBuffer = 1000
    var streamsPerSession = 32
    var streamsTotal = 10_000
    var streamBufferLimit = 1_048_576
    var maxSessions = 100_000
    var idempotencyKeys = 1000
    var loginCheckDelay = 0.2
    var logLevel = "info"
    var logFormat = "text"
    var httpThreads = 0
    var connectionLimit = 20_000
    var connectionTimeout = 60
    var connectionMemoryLimit = 8192
    var reusePort = false

    /// The settings as a JSON object keyed like the config file (`streams.bufferLimit`).
    var json: String {
        let values: [String: Any] = [
            "host": host, "port": port, "storage": storage, "persistence.snapshotEvery": snapshotEvery,
            "persistence.maxBytes": storageMaxBytes, "persistence.sync": sync, "sessions.idleTimeout": idleTimeout, "sessions.ttl": ttl,
            "sessions.sweepInterval": sweepInterval, "bodyLimit": bodyLimit, "heartbeat": heartbeat,
            "replayBuffer": replayBuffer, "streams.perSession": streamsPerSession,
            "streams.total": streamsTotal, "streams.bufferLimit": streamBufferLimit,
            "sessions.max": maxSessions, "idempotency.keys": idempotencyKeys,
            "login.checkDelay": loginCheckDelay, "log.level": logLevel, "log.format": logFormat,
            "http.threads": httpThreads, "http.connectionLimit": connectionLimit,
            "http.connectionTimeout": connectionTimeout, "http.connectionMemoryLimit": connectionMemoryLimit,
            "http.reusePort": reusePort,
        ]
        let data = (try? JSONSerialization.data(withJSONObject: values, options: [.sortedKeys, .prettyPrinted])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    /// Every key with its environment variable, for `--help`.
    static let keys: [(key: String, meaning: String)] = [
        ("host", "listen address"), ("port", "port, 0 = any free"),
        ("storage", "memory or sqlite:PATH"), ("bodyLimit", "max body bytes"),
        ("heartbeat", "seconds between pings"),
        ("replayBuffer", "events kept for resume"),
        ("streams.perSession", "streams per session"), ("streams.total", "streams in all"),
        ("streams.bufferLimit", "bytes per slow subscriber"),
        ("sessions.max", "sessions (memory storage)"),
        ("sessions.idleTimeout", "idle seconds to evict"),
        ("sessions.ttl", "idle seconds to delete"),
        ("sessions.sweepInterval", "seconds between sweeps"),
        ("persistence.snapshotEvery", "changes per snapshot"),
        ("persistence.maxBytes", "db size cap, 0 = none"),
        ("persistence.sync", "full (fsync) or normal"),
        ("idempotency.keys", "keys kept per session"),
        ("login.checkDelay", "login check seconds"),
        ("log.level", "trace ... critical"), ("log.format", "text or json"),
        ("http.threads", "threads, 0 = cores"), ("http.connectionLimit", "max connections"),
        ("http.connectionTimeout", "idle connection seconds"),
        ("http.connectionMemoryLimit", "buffer bytes/connection"),
        ("http.reusePort", "share the port (true/false)"),
    ]

    /// `STATE_SERVER_` + the key in upper snake case.
    static func environmentName(_ key: String) -> String {
        var out = "STATE_SERVER_"
        for character in key {
            if character == "." {
                out += "_"
            } else if character.isUppercase {
                out += "_" + String(character)
            } else {
                out += character.uppercased()
            }
        }
        return out
    }

    static var helpText: String {
        var text = """
            Settings come from, highest first: these flags, environment variables, the YAML file \
            given by --config or STATE_SERVER_CONFIG (config/state-server.yaml documents every \
            key), then built-in defaults. Environment variables:

            """
        for (key, meaning) in keys {
            text += "  \(environmentName(key).padding(toLength: 43, withPad: " ", startingAt: 0)) \(meaning)\n"
        }
        return text
    }

    struct Invalid: Error, CustomStringConvertible {
        let description: String
    }

    /// Reads every setting from `reader`, falling back to the defaults; a value of the wrong
    /// type or out of range is an error naming the key.
    static func load(from reader: ConfigReader) throws -> ServerConfiguration {
        var c = ServerConfiguration()
        c.host = try string(reader, "host", c.host)
        c.port = try int(reader, "port", c.port, 0...65535)
        c.storage = try string(reader, "storage", c.storage)
        guard c.storage == "memory" || (c.storage.hasPrefix("sqlite:") && c.storage.count > "sqlite:".count) else {
            throw Invalid(description: "storage must be 'memory' or 'sqlite:PATH'; got '\(c.storage)'")
        }
        c.snapshotEvery = try int(reader, "persistence.snapshotEvery", c.snapshotEvery, 1...1_000_000)
        c.storageMaxBytes = try int(reader, "persistence.maxBytes", c.storageMaxBytes, 0...Int.max)
        c.sync = try string(reader, "persistence.sync", c.sync)
        guard ["full", "normal"].contains(c.sync) else {
            throw Invalid(description: "persistence.sync must be full or normal; got '\(c.sync)'")
        }
        c.idleTimeout = try double(reader, "sessions.idleTimeout", c.idleTimeout, 0.1...31_536_000)
        c.ttl = try double(reader, "sessions.ttl", c.ttl, 1...3_153_600_000)
        c.sweepInterval = try double(reader, "sessions.sweepInterval", c.sweepInterval, 0.05...86_400)
        c.bodyLimit = try int(reader, "bodyLimit", c.bodyLimit, 1...(64 << 20))
        c.heartbeat = try double(reader, "heartbeat", c.heartbeat, 0.05...86_400)
        c.replayBuffer = try int(reader, "replayBuffer", c.replayBuffer, 0...1_000_000)
        c.streamsPerSession = try int(reader, "streams.perSession", c.streamsPerSession, 1...100_000)
        c.streamsTotal = try int(reader, "streams.total", c.streamsTotal, 1...1_000_000)
        c.streamBufferLimit = try int(reader, "streams.bufferLimit", c.streamBufferLimit, 1024...(1 << 30))
        c.maxSessions = try int(reader, "sessions.max", c.maxSessions, 1...100_000_000)
        c.idempotencyKeys = try int(reader, "idempotency.keys", c.idempotencyKeys, 0...1_000_000)
        c.loginCheckDelay = try double(reader, "login.checkDelay", c.loginCheckDelay, 0...3600)
        c.logLevel = try string(reader, "log.level", c.logLevel)
        guard ["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(c.logLevel) else {
            throw Invalid(description: "log.level must be one of trace, debug, info, notice, warning, error, critical; got '\(c.logLevel)'")
        }
        c.logFormat = try string(reader, "log.format", c.logFormat)
        guard ["text", "json"].contains(c.logFormat) else {
            throw Invalid(description: "log.format must be text or json; got '\(c.logFormat)'")
        }
        c.httpThreads = try int(reader, "http.threads", c.httpThreads, 0...256)
        c.connectionLimit = try int(reader, "http.connectionLimit", c.connectionLimit, 16...1_000_000)
        c.connectionTimeout = try int(reader, "http.connectionTimeout", c.connectionTimeout, 0...86_400)
        c.connectionMemoryLimit = try int(reader, "http.connectionMemoryLimit", c.connectionMemoryLimit, 4096...(16 << 20))
        do { c.reusePort = try reader.requiredBool(forKey: ConfigKey("http.reusePort")) } catch where missing(error) {} catch {
            throw Invalid(description: "setting 'http.reusePort' must be true or false")
        }
        return c
    }

    private static func missing(_ error: any Error) -> Bool {
        "\(error)".hasPrefix("Missing required config value")
    }

    private static func int(_ r: ConfigReader, _ key: String, _ fallback: Int, _ range: ClosedRange<Int>) throws -> Int {
        try bounded(key, fallback, range, "an integer") { try r.requiredInt(forKey: ConfigKey(key)) }
    }

    private static func double(_ r: ConfigReader, _ key: String, _ fallback: Double, _ range: ClosedRange<Double>) throws -> Double {
        try bounded(key, fallback, range, "a number") { try r.requiredDouble(forKey: ConfigKey(key)) }
    }

    /// A setting read by `lookup`: the fallback when it is missing, an error naming the key when
    /// it has the wrong type or lies outside `range`.
    private static func bounded<T: Comparable>(
        _ key: String, _ fallback: T, _ range: ClosedRange<T>, _ kind: String, _ lookup: () throws -> T
    ) throws -> T {
        let value: T
        do { value = try lookup() } catch where missing(error) { return fallback } catch {
            throw Invalid(description: "setting '\(key)' must be \(kind)")
        }
        guard range.contains(value) else {
            throw Invalid(description: "setting '\(key)' must be in \(range.lowerBound)...\(range.upperBound); got \(value)")
        }
        return value
    }

    private static func string(_ r: ConfigReader, _ key: String, _ fallback: String) throws -> String {
        do { return try r.requiredString(forKey: ConfigKey(key)) } catch where missing(error) { return fallback } catch {
            throw Invalid(description: "setting '\(key)' must be a string")
        }
    }

    /// The environment variables that start with `STATE_SERVER_`, with that prefix removed, so
    /// that `STATE_SERVER_BODY_LIMIT` answers the key `bodyLimit`.
    static func prefixedEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> [String: String] {
        var result: [String: String] = [:]
        for (name, value) in environment where name.hasPrefix("STATE_SERVER_") {
            result[String(name.dropFirst("STATE_SERVER_".count))] = value
        }
        return result
    }

    /// Builds the layered reader: flags, environment, file.
    static func reader(flags: [AbsoluteConfigKey: ConfigValue], file: String?) async throws -> ConfigReader {
        var providers: [any ConfigProvider] = [
            InMemoryProvider(name: "flags", values: flags),
            EnvironmentVariablesProvider(environmentVariables: prefixedEnvironment()),
        ]
        if let file {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory), !isDirectory.boolValue else {
                throw Invalid(description: "config file '\(file)' does not exist or is a directory")
            }
            do {
                providers.append(try await FileProvider<YAMLSnapshot>(filePath: FilePath(file)))
            } catch {
                throw Invalid(description: "config file '\(file)' is not valid YAML: \(error)")
            }
        }
        return ConfigReader(providers: providers)
    }
}
