import Configuration
import Foundation
import Logging
import StateSessions

/// Every setting of the server, gathered from the components that own them.
///
/// Layers, highest first: command-line flags, environment variables (`STATE_SERVER_` + the key
/// in upper snake case: `streams.bufferLimit` ↔ `STATE_SERVER_STREAMS_BUFFER_LIMIT`), the YAML
/// file given by `--config` or `STATE_SERVER_CONFIG`, then the defaults — which
/// `config/state-server.yaml` restates and documents. Each key is declared once, as a `Setting`
/// of the component that uses it: `HTTPSettings`, `TLSSettings`, `StorageSettings`, `SessionsSettings`,
/// `SweeperSettings`, `LogSettings`, `AuthSettings` (their doc comments list key, type and
/// default), and the hosted features' own (``FeatureSetting``, declared by the executable).
struct ServerSettings: Sendable {
    var http: HTTPSettings
    var tls: TLSSettings
    var storage: StorageSettings
    var sessions: SessionsSettings
    var sweeper: SweeperSettings
    var log: LogSettings
    var features: FeatureSettings
    var auth: AuthSettings
    /// Every setting with its effective value, in reading order.
    let entries: [(key: String, meaning: String, value: ConfigContent)]

    /// Reads every setting, the hosted features' `declared` ones among them: the default where
    /// no layer has the key; an error naming the key for a value of the wrong type or out of range.
    init(_ reader: SettingsReader, features declared: [FeatureSetting]) throws(SettingsError) {
        var read = reader
        http = try HTTPSettings(&read)
        tls = try TLSSettings(&read)
        storage = try StorageSettings(&read)
        sessions = try SessionsSettings(&read)
        sweeper = try SweeperSettings(&read)
        log = try LogSettings(&read)
        features = try FeatureSettings(declared, &read)
        auth = try AuthSettings(&read)
        entries = read.entries
    }

    /// The settings as a JSON object keyed like the config file (`streams.bufferLimit`).
    var json: String {
        var values: [String: Any] = [:]
        for entry in entries { values[entry.key] = entry.value.jsonObject }
        let data = (try? JSONSerialization.data(withJSONObject: values, options: [.sortedKeys, .prettyPrinted])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    /// `--help`'s list of environment variables: every setting, read from the defaults.
    static var helpText: String {
        var text = """
            Settings come from, highest first: these flags, environment variables, the YAML file \
            given by --config or STATE_SERVER_CONFIG (config/state-server.yaml documents every \
            key), then built-in defaults. Environment variables:

            """
        let entries = (try? ServerSettings(.defaults, features: HostedFeatures.settings))?.entries ?? []
        for entry in entries {
            text += "  \(Settings.environmentName(entry.key).padding(toLength: 43, withPad: " ", startingAt: 0)) \(entry.meaning)\n"
        }
        return text
    }
}

/// Sessions: replay, limits, idempotency, snapshots, idle eviction and TTL.
///
/// | key | type | default |
/// | --- | --- | --- |
/// | `replayBuffer` | events per session | `1000` |
/// | `history.keep` | changes per session kept for history (SQLite, PostgreSQL) | `1000` |
/// | `sessions.max` | sessions | `100000` |
/// | `sessions.idleTimeout` | seconds before an unused durable session leaves memory | `300` |
/// | `sessions.ttl` | seconds of inactivity before a session is deleted | `2592000` |
/// | `persistence.snapshotEvery` | changes per store between snapshots | `100` |
/// | `idempotency.keys` | keys remembered per session | `1000` |
/// | `idempotency.bytes` | reply bytes remembered per session in memory | `4194304` |
/// | `idempotency.ttl` | seconds storage remembers a key after its first use | `86400` |
/// | `replayBytes` | bytes of events kept for resume per session | `16777216` |
/// | `serverReplayBytes` | bytes of events kept for resume, all sessions | `1073741824` |
/// | `sessions.memoryBytes` | state bytes loaded sessions may hold together (SQLite, PostgreSQL) | `1073741824` |
/// | `timers.maxPerStore` | timers a store may hold pending | `1000` |
struct SessionsSettings: Sendable {
    static let replayBuffer = Setting("replayBuffer", default: 1000, in: 0...1_000_000, "events kept for resume")
    static let historyKeep = Setting("history.keep", default: 1000, in: 0...1_000_000, "changes kept for history")
    static let max = Setting("sessions.max", default: 100_000, in: 1...100_000_000, "sessions (memory storage)")
    static let idleTimeout = Setting("sessions.idleTimeout", default: 300.0, in: 0.1...31_536_000, "idle seconds to evict")
    static let ttl = Setting("sessions.ttl", default: 2_592_000.0, in: 1...3_153_600_000, "idle seconds to delete")
    static let snapshotEvery = Setting("persistence.snapshotEvery", default: 100, in: 1...1_000_000, "changes per snapshot")
    static let idempotencyKeys = Setting("idempotency.keys", default: 1000, in: 0...1_000_000, "keys kept per session")
    static let idempotencyBytes = Setting("idempotency.bytes", default: 4 << 20, in: 0...(1 << 34), "reply bytes per session")
    static let idempotencyTTL = Setting("idempotency.ttl", default: 86_400.0, in: 1...31_536_000, "seconds a key is kept")
    static let replayBytes = Setting("replayBytes", default: 16 << 20, in: 0...(1 << 34), "event bytes per session")
    static let serverReplayBytes = Setting("serverReplayBytes", default: 1 << 30, in: 0...(1 << 40), "event bytes in all")
    static let maxTimers = Setting("timers.maxPerStore", default: 1000, in: 0...1_000_000, "pending timers per store")
    static let memoryBytes = Setting("sessions.memoryBytes", default: 1 << 30, in: 1...(1 << 50), "state bytes loaded")

    /// What `SessionManager` takes.
    var manager = SessionSettings()

    init(_ read: inout SettingsReader) throws(SettingsError) {
        manager.replayBuffer = try read(Self.replayBuffer)
        manager.historyKeep = try read(Self.historyKeep)
        manager.maxSessions = try read(Self.max)
        manager.idleTimeout = .milliseconds(Int(try read(Self.idleTimeout) * 1000))
        manager.ttl = .milliseconds(Int(try read(Self.ttl) * 1000))
        manager.snapshotEvery = try read(Self.snapshotEvery)
        manager.idempotencyKeys = try read(Self.idempotencyKeys)
        manager.maxTimersPerStore = try read(Self.maxTimers)
        manager.idempotencyBytes = try read(Self.idempotencyBytes)
        manager.idempotencyTTL = .milliseconds(Int(try read(Self.idempotencyTTL) * 1000))
        manager.replayBytes = try read(Self.replayBytes)
        manager.serverReplayBytes = try read(Self.serverReplayBytes)
        manager.memoryBytes = try read(Self.memoryBytes)
    }
}

/// A setting of the hosted features themselves, declared by the executable that hosts them
/// (``HostedFeatures/settings``): read like the server's own (environment, the file, the default;
/// no flag) and listed by `--help` and `--print-config`. `state-server` declares one for its
/// example login, `login.checkDelay` (Sources/state-server/main.swift); a server built with
/// ``run(features:middleware:arguments:)`` has none. A number.
package struct FeatureSetting: Sendable {
    let setting: Setting<Double>

    package init(_ key: String, default defaultValue: Double, in range: ClosedRange<Double>, _ meaning: String) {
        setting = Setting(key, default: defaultValue, in: range, meaning)
    }
}

/// The values of the hosted features' own settings (``FeatureSetting``), to build them with.
package struct FeatureSettings: Sendable {
    private var values: [String: Double] = [:]

    /// Every setting at its default, for commands that read no settings (`features`, `replay`).
    package init() {}

    init(_ declared: [FeatureSetting], _ read: inout SettingsReader) throws(SettingsError) {
        for feature in declared { values[feature.setting.key] = try read(feature.setting) }
    }

    /// `setting`'s value: as read, else its default.
    package subscript(_ setting: FeatureSetting) -> Double {
        values[setting.setting.key] ?? setting.setting.defaultValue
    }
}
