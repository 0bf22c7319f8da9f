import Configuration
import Foundation
import SystemPackage

// How settings are declared and read.
//
// A component owns a settings struct (`HTTPSettings`, `StorageSettings`, `SessionsSettings`,
// `SweeperSettings`, `LogSettings`, `AuthSettings`; the hosted features' own are `FeatureSetting`s
// their executable declares). Each of its settings is declared once, as
// a `static let` `Setting` naming its key, default, allowed values and one-line meaning, and the
// struct's `init(_:)` reads them with a `SettingsReader`. Everything else — `--help`,
// `--print-config`, the flags — is derived from those declarations: the reader records every
// setting it reads, and reading the defaults lists them all.

/// A value a setting can hold: how it is asked of a configuration provider and printed back.
protocol SettingValue: Sendable, Equatable {
    /// The type asked of the providers (environment variables are parsed into it).
    static var configType: ConfigType { get }
    /// What a value must be, for messages ("an integer", "one of text, json").
    static var expected: String { get }
    /// The value, or `nil` when `content` is not one.
    init?(content: ConfigContent)
    /// The value as configuration content (for `--print-config` and the flag layer).
    var content: ConfigContent { get }
}

extension Int: SettingValue {
    static var configType: ConfigType { .int }
    static var expected: String { "an integer" }
    init?(content: ConfigContent) {
        guard case .int(let value) = content else { return nil }
        self = value
    }
    var content: ConfigContent { .int(self) }
}

extension Double: SettingValue {
    static var configType: ConfigType { .double }
    static var expected: String { "a number" }
    init?(content: ConfigContent) {
        switch content {
        case .double(let value): self = value
        case .int(let value): self = Double(value)
        default: return nil
        }
    }
    var content: ConfigContent { .double(self) }
}

extension String: SettingValue {
    static var configType: ConfigType { .string }
    static var expected: String { "a string" }
    init?(content: ConfigContent) {
        guard case .string(let value) = content else { return nil }
        self = value
    }
    var content: ConfigContent { .string(self) }
}

extension Bool: SettingValue {
    static var configType: ConfigType { .bool }
    static var expected: String { "true or false" }
    init?(content: ConfigContent) {
        guard case .bool(let value) = content else { return nil }
        self = value
    }
    var content: ConfigContent { .bool(self) }
}

/// A setting whose value is one of a few words (`log.format`, `persistence.sync`): an enum,
/// parsed once here instead of compared as a string wherever it is used.
protocol SettingChoice: SettingValue, RawRepresentable<String>, CaseIterable {}

extension SettingChoice {
    static var configType: ConfigType { .string }
    static var expected: String { "one of " + allCases.map(\.rawValue).joined(separator: ", ") }
    init?(content: ConfigContent) {
        guard case .string(let text) = content, let value = Self(rawValue: text) else { return nil }
        self = value
    }
    var content: ConfigContent { .string(rawValue) }
}

/// One setting: its key (`streams.bufferLimit`), default, allowed values and meaning.
/// Environment variable: `STATE_SERVER_` + the key in upper snake case.
struct Setting<Value: SettingValue>: Sendable {
    let key: String
    let defaultValue: Value
    let meaning: String
    private let allows: @Sendable (Value) -> Bool
    private let allowed: String?

    init(_ key: String, default defaultValue: Value, _ meaning: String) {
        self.key = key
        self.defaultValue = defaultValue
        self.meaning = meaning
        allows = { _ in true }
        allowed = nil
    }

    init(_ key: String, default defaultValue: Value, in range: ClosedRange<Value>, _ meaning: String) where Value: Comparable {
        self.key = key
        self.defaultValue = defaultValue
        self.meaning = meaning
        allows = { range.contains($0) }
        allowed = "in \(range.lowerBound)...\(range.upperBound)"
    }

    var configKey: AbsoluteConfigKey { AbsoluteConfigKey(key.split(separator: ".").map(String.init)) }

    /// `STATE_SERVER_` + the key in upper snake case.
    var environmentVariable: String { Settings.environmentName(key) }

    /// Whether `value` is allowed; the message naming the key when it is not.
    func check(_ value: Value) throws(SettingsError) {
        guard allows(value) else {
            throw SettingsError(.outOfRange(key: key, allowed: allowed ?? Value.expected, got: Settings.withoutPassword("\(value.content.printed)")))
        }
    }
}

/// A setting that cannot be used, naming its key. Cases can be added later (a struct around a
/// private enum).
struct SettingsError: Error, CustomStringConvertible, Equatable {
    fileprivate enum Reason: Equatable {
        case wrongType(key: String, expected: String, got: String?)
        case outOfRange(key: String, allowed: String, got: String)
        case file(path: String, problem: String)
    }

    fileprivate let reason: Reason

    fileprivate init(_ reason: Reason) { self.reason = reason }

    /// `key`'s value is not one it may take: `allowed` says what it may be.
    static func notAllowed(key: String, allowed: String, got: String) -> SettingsError {
        SettingsError(.outOfRange(key: key, allowed: allowed, got: got))
    }

    /// The key of the setting at fault, if one is.
    var key: String? {
        switch reason {
        case .wrongType(let key, _, _), .outOfRange(let key, _, _): key
        case .file: nil
        }
    }

    var description: String {
        switch reason {
        case .wrongType(let key, let expected, nil): "setting '\(key)' must be \(expected)"
        case .wrongType(let key, let expected, let got?): "setting '\(key)' must be \(expected); got \(got)"
        case .outOfRange(let key, let allowed, let got): "setting '\(key)' must be \(allowed); got \(got)"
        case .file(let path, let problem): "config file '\(path)' \(problem)"
        }
    }
}

/// Reads settings from configuration providers, highest priority first (the same layering as
/// swift-configuration's `ConfigReader`: the first provider with a value wins, a provider that
/// cannot give the value as the asked type is an error).
///
/// A key no provider has is told apart by type — `LookupResult.value` is `nil` — and gets the
/// setting's default; `ConfigReader`'s `required…` methods would report it only through an
/// error whose type is not public. Every setting read is recorded, in order.
struct SettingsReader {
    private let providers: [any ConfigProvider]
    /// Every setting read so far: key, meaning, value.
    private(set) var entries: [(key: String, meaning: String, value: ConfigContent)] = []

    init(providers: [any ConfigProvider]) {
        self.providers = providers
    }

    /// A reader that gives every setting its default.
    static var defaults: SettingsReader { SettingsReader(providers: []) }

    mutating func callAsFunction<Value>(_ setting: Setting<Value>) throws(SettingsError) -> Value {
        let value = try lookup(setting) ?? setting.defaultValue
        try setting.check(value)
        // What --print-config shows: never a password.
        var shown = value.content
        if case .string(let text) = shown { shown = .string(Settings.withoutPassword(text)) }
        // The admin credential's hash, the cluster secret and the JWT secret are secrets too: shown only as set
        // or not.
        if setting.key.hasPrefix("admin.") || setting.key == "cluster.secret" || setting.key == "auth.jwtSecret", case .string(let text) = shown, !text.isEmpty {
            shown = .string("***")
        }
        entries.append((setting.key, setting.meaning, shown))
        return value
    }

    private func lookup<Value>(_ setting: Setting<Value>) throws(SettingsError) -> Value? {
        for provider in providers {
            let found: ConfigValue?
            do {
                found = try provider.value(forKey: setting.configKey, type: Value.configType).value
            } catch {
                throw SettingsError(.wrongType(key: setting.key, expected: Value.expected, got: nil))
            }
            guard let found else { continue }
            guard let value = Value(content: found.content) else {
                throw SettingsError(.wrongType(key: setting.key, expected: Value.expected, got: Settings.withoutPassword(found.content.printed)))
            }
            return value
        }
        return nil
    }
}

/// Command-line flags as the highest configuration layer, keyed by the settings they set.
struct FlagValues {
    private(set) var values: [AbsoluteConfigKey: ConfigValue] = [:]

    mutating func set<Value>(_ setting: Setting<Value>, _ value: Value?) {
        if let value { values[setting.configKey] = ConfigValue(value.content, isSecret: false) }
    }
}

extension ConfigContent {
    /// The value as JSON would print it (for messages and `--print-config`).
    var printed: String {
        switch self {
        case .string(let text): "'\(text)'"
        case .int(let value): String(value)
        case .double(let value): String(value)
        case .bool(let value): String(value)
        default: "\(self)"
        }
    }

    /// The value as a `JSONSerialization` object.
    var jsonObject: Any {
        switch self {
        case .string(let text): text
        case .int(let value): value
        case .double(let value): value
        case .bool(let value): value
        default: "\(self)"
        }
    }
}

/// Naming rules and the layered providers.
enum Settings {
    /// `text` with the password of a URL (`scheme://user:password@host`) replaced by `***`:
    /// a refused value is quoted in errors, and a database URL may carry a password.
    /// Query arguments whose values are secrets too (`?password=`, as libpq accepts it) are
    /// shown as `password=***`.
    static func withoutPassword(_ text: String) -> String {
        guard text.contains("://") else { return text }
        var text = text
        if let mark = text.firstIndex(of: "?") {
            let arguments = text[text.index(after: mark)...].split(separator: "&", omittingEmptySubsequences: false).map { argument in
                guard let equals = argument.firstIndex(of: "=") else { return String(argument) }
                let key = argument[..<equals].lowercased()
                let secret = ["pass", "secret", "token", "key"].contains { key.contains($0) }
                return secret ? String(argument[...equals]) + "***" : String(argument)
            }
            text = String(text[...mark]) + arguments.joined(separator: "&")
        }
        guard let scheme = text.range(of: "://") else { return text }
        let rest = text[scheme.upperBound...]
        let authority = rest.prefix { $0 != "?" }
        guard let at = authority.lastIndex(of: "@") else { return text }
        let userinfo = rest[..<at]
        guard let colon = userinfo.firstIndex(of: ":") else { return text }
        return String(text[..<colon]) + ":***" + String(rest[at...])
    }

    /// `STATE_SERVER_` + the key in upper snake case (`streams.bufferLimit` ↔
    /// `STATE_SERVER_STREAMS_BUFFER_LIMIT`).
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

    /// The environment variables that start with `STATE_SERVER_`, with that prefix removed, so
    /// that `STATE_SERVER_BODY_LIMIT` answers the key `bodyLimit`.
    static func prefixedEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> [String: String] {
        var result: [String: String] = [:]
        for (name, value) in environment where name.hasPrefix("STATE_SERVER_") {
            result[String(name.dropFirst("STATE_SERVER_".count))] = value
        }
        return result
    }

    /// The layers, highest first: flags, environment, the YAML file (if any).
    static func reader(flags: FlagValues, file: String?) async throws(SettingsError) -> SettingsReader {
        var providers: [any ConfigProvider] = [
            InMemoryProvider(name: "flags", values: flags.values),
            EnvironmentVariablesProvider(environmentVariables: prefixedEnvironment()),
        ]
        if let file {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory), !isDirectory.boolValue else {
                throw SettingsError(.file(path: file, problem: "does not exist or is a directory"))
            }
            do {
                providers.append(try await FileProvider<YAMLSnapshot>(filePath: FilePath(file)))
            } catch {
                throw SettingsError(.file(path: file, problem: "is not valid YAML: \(error)"))
            }
        }
        return SettingsReader(providers: providers)
    }
}
