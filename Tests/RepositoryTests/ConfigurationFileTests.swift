import Foundation
import TestSupport
import Testing

/// `config/state-server.yaml` restates the built-in defaults, and every setting is documented
/// in the file and in docs/CONFIGURATION.md's table.
@Suite("Configuration file and defaults")
struct ConfigurationFileTests {
    static let configPath = "config/state-server.yaml"

    @Test("the committed config file gives exactly the built-in defaults")
    func fileEqualsDefaults() async throws {
        let defaults = try await ServerBinary.printedConfig()
        let fromFile = try await ServerBinary.printedConfig(["--config", Self.configPath])
        #expect(!defaults.isEmpty)
        let keys = Set(defaults.keys).union(fromFile.keys).sorted()
        for key in keys {
            let expected = defaults[key].map { "\($0)" } ?? "(absent)"
            let actual = fromFile[key].map { "\($0)" } ?? "(absent)"
            #expect(expected == actual, "\(key): built-in default \(expected), \(Self.configPath) gives \(actual)")
        }
        // Values are compared above as text: Linux Foundation's NSDictionary does not find a
        // Swift `false` equal to the NSNumber it bridges to (the first boolean setting).
        #expect(Set(defaults.keys) == Set(fromFile.keys))
    }

    @Test("every setting printed by --print-config is a key of the config file, and the reverse")
    func everyKeyInFile() async throws {
        let printed = Set(try await ServerBinary.printedConfig().keys)
        let inFile = try YAMLKeys.leafKeys(Repository.text(Self.configPath))
        for key in printed.sorted() {
            #expect(inFile.contains(key), "\(key) is missing from \(Self.configPath)")
        }
        // A key the server does not know is silently ignored: catch typos in the file.
        for key in inFile.subtracting(printed).sorted() {
            Issue.record("\(Self.configPath) has '\(key)', which the server does not read")
        }
    }

    static let documentPath = "docs/CONFIGURATION.md"

    @Test("every setting has a row in docs/CONFIGURATION.md's table, with its environment variable and default")
    func everyKeyDocumented() async throws {
        let printed = try await ServerBinary.printedConfig()
        let document = try Repository.text(Self.documentPath)
        let tableRows = document.split(separator: "\n").filter { $0.hasPrefix("| `") }
        for key in printed.keys.sorted() {
            let row = tableRows.first { $0.hasPrefix("| `\(key)` |") }
            guard let row else {
                Issue.record("\(Self.documentPath) has no table row for `\(key)`")
                continue
            }
            let variable = YAMLKeys.environmentVariable(for: key)
            #expect(row.contains(variable), "\(Self.documentPath)'s row for `\(key)` does not name \(variable): \(row)")
            // The default column: the value --print-config gives with no settings.
            let columns = row.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            if columns.count >= 3, let value = printed[key] {
                var accepted = ["`\(value)`"]
                if let number = value as? Double { accepted.append("`\(Self.number(number))`") }
                if let flag = value as? Bool { accepted.append("`\(flag)`") }
                if let text = value as? String, text.isEmpty { accepted.append("`\"\"`") }
                #expect(
                    accepted.contains(columns[2]),
                    "\(Self.documentPath)'s default for `\(key)` is \(columns[2]), the server's is \(value)")
            }
        }
    }

    /// 15.0 as 15, 0.2 as 0.2.
    static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(value)
    }

    @Test("environment variable names follow the STATE_SERVER_ + upper snake case rule")
    func environmentVariableNames() {
        #expect(YAMLKeys.environmentVariable(for: "port") == "STATE_SERVER_PORT")
        #expect(YAMLKeys.environmentVariable(for: "streams.bufferLimit") == "STATE_SERVER_STREAMS_BUFFER_LIMIT")
        #expect(
            YAMLKeys.environmentVariable(for: "http.connectionMemoryLimit")
                == "STATE_SERVER_HTTP_CONNECTION_MEMORY_LIMIT")
    }

    @Test("an environment variable named by that rule really sets its key")
    func environmentVariableWorks() async throws {
        let output = try await ServerBinary.run(
            ["--print-config"], environment: [YAMLKeys.environmentVariable(for: "streams.bufferLimit"): "4096"])
        let data = Data(output.stdout.utf8)
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(object["streams.bufferLimit"] as? Int == 4096, "\(object)")
    }
}

/// Layering and refusals, through `--print-config` of the real binary.
@Suite("Settings: layers and refusals")
struct SettingsLayerTests {
    /// Runs the binary with a YAML file holding `yaml`, `environment` and `arguments`.
    static func run(yaml: String, environment: [String: String] = [:], _ arguments: [String] = []) async throws -> ServerBinary.Output {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("state-server-settings-\(UUID().uuidString).yaml")
        try yaml.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        return try await ServerBinary.run(["--print-config", "--config", file.path] + arguments, environment: environment)
    }

    @Test("issue 16 item 13: a password in an invalid PostgreSQL URL is not echoed, in the userinfo or as ?password=")
    func invalidPostgresURLHidesPassword() async throws {
        for url in [
            "postgres://alice:hunter2@127.0.0.1:5432/db?sslmode=bogus",
            "postgres://alice@127.0.0.1:5432/db?password=hunter2&sslmode=bogus",
            "postgresql://alice@127.0.0.1:5432/db?sslmode=bogus&PASSWORD=hunter2",
        ] {
            let output = try await ServerBinary.run(["--print-config", "--storage", url])
            #expect(output.status != 0, "\(url): \(output.stdout)")
            #expect(output.stderr.contains("storage"), "\(url): \(output.stderr)")
            #expect(!output.stderr.contains("hunter2") && !output.stdout.contains("hunter2"), "\(url): \(output.stderr)")
        }
    }

    @Test("cluster.secret: --print-config shows *** (never the secret, from the environment or the file); one shorter than 32 characters is refused without being echoed")
    func clusterSecretHidden() async throws {
        let secret = "a-cluster-secret-0123456789abcdef-0123456789"
        for output in [
            try await Self.run(yaml: "port: 8080\n", environment: ["STATE_SERVER_CLUSTER_SECRET": secret]),
            try await Self.run(yaml: "cluster:\n  secret: \"\(secret),\(secret.uppercased())\"\n"),
        ] {
            try #require(output.status == 0, "\(output.stderr)")
            let object = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any])
            #expect(object["cluster.secret"] as? String == "***", "\(object)")
            #expect(!output.stdout.contains(secret) && !output.stdout.lowercased().contains(secret), "\(output.stdout)")
        }
        let short = try await Self.run(yaml: "port: 8080\n", environment: ["STATE_SERVER_CLUSTER_SECRET": "hunter2-short"])
        #expect(short.status != 0 && short.stderr.contains("cluster.secret"), "\(short.stderr)")
        #expect(!short.stderr.contains("hunter2") && !short.stdout.contains("hunter2"), "\(short.stderr)")
    }

    @Test("a flag beats the environment, which beats the file, which beats the default")
    func precedence() async throws {
        let output = try await Self.run(
            yaml: "port: 1111\nheartbeat: 3\nreplayBuffer: 7\nlog:\n  format: json\n",
            environment: ["STATE_SERVER_PORT": "2222", "STATE_SERVER_HEARTBEAT": "4"], ["--port", "3333"])
        try #require(output.status == 0, "\(output.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any])
        #expect(object["port"] as? Int == 3333, "flag: \(object)")
        #expect(object["heartbeat"] as? Double == 4, "environment over file: \(object)")
        #expect(object["replayBuffer"] as? Int == 7, "file: \(object)")
        #expect(object["log.format"] as? String == "json", "file: \(object)")
        #expect(object["bodyLimit"] as? Int == 65_536, "default: \(object)")
    }

    @Test(
        "a value of the wrong type, out of range or not one of the allowed words is refused, naming its key",
        arguments: [
            ("port: abc\n", "port"), ("port: 70000\n", "port"), ("heartbeat: soon\n", "heartbeat"),
            ("storage: disk\n", "storage"), ("persistence:\n  sync: fast\n", "persistence.sync"),
            ("log:\n  format: xml\n", "log.format"), ("log:\n  level: loud\n", "log.level"),
            ("sessions:\n  ttl: 0\n", "sessions.ttl"),
        ])
    func refused(_ yaml: String, _ key: String) async throws {
        let output = try await Self.run(yaml: yaml)
        #expect(output.status != 0, "\(yaml) was accepted: \(output.stdout)")
        #expect(output.stderr.contains("setting '\(key)' must be"), "\(output.stderr)")
    }
}

/// The little YAML this project's config file uses: nested mappings of scalars, `#` comments.
enum YAMLKeys {
    /// Dotted paths of every key that holds a value (`host`, `streams.bufferLimit`).
    static func leafKeys(_ text: String) -> Set<String> {
        var stack: [(indent: Int, key: String)] = []
        var leaves = Set<String>()
        for raw in text.split(separator: "\n") {
            let line = String(raw)
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            let indent = line.prefix { $0 == " " }.count
            guard let colon = trimmed.firstIndex(of: ":") else { continue }
            let key = String(trimmed[..<colon])
            var value = String(trimmed[trimmed.index(after: colon)...])
            if let hash = value.firstIndex(of: "#") { value = String(value[..<hash]) }
            value = value.trimmingCharacters(in: .whitespaces)
            while let last = stack.last, last.indent >= indent { stack.removeLast() }
            let path = (stack.map(\.key) + [key]).joined(separator: ".")
            if value.isEmpty {
                stack.append((indent, key))
            } else {
                leaves.insert(path)
            }
        }
        return leaves
    }

    /// `streams.bufferLimit` → `STATE_SERVER_STREAMS_BUFFER_LIMIT`.
    static func environmentVariable(for key: String) -> String {
        var name = "STATE_SERVER_"
        for (index, part) in key.split(separator: ".").enumerated() {
            if index > 0 { name += "_" }
            var previousWasLower = false
            for character in part {
                if character.isUppercase, previousWasLower { name += "_" }
                name += character.uppercased()
                previousWasLower = character.isLowercase || character.isNumber
            }
        }
        return name
    }
}
