import Foundation
import StatePersistence
import StatePostgres
import TestSupport
import Synchronization
import Testing

/// A throwaway PostgreSQL started by scripts/postgres-test-server.sh in a temporary folder.
///
/// The server is destroyed by `destroy()`, and in any case by the script's watcher once this
/// test process exits (even if it crashed). Missing PostgreSQL binaries fail the start with the
/// script's message: the suites never skip silently.
final class TestPostgres: Sendable {
    let directory: String
    /// The URL of the server's main database (with its password).
    let url: String
    private let databases = Atomic<Int>(0)

    static let script: String = {
        // Tests/PostgresTests/Support/TestPostgres.swift → the repository root.
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent("scripts/postgres-test-server.sh").path
    }()

    private init(directory: String, url: String) {
        self.directory = directory
        self.url = url
    }

    static func start() throws -> TestPostgres {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("state-server-postgres-\(UUID().uuidString)").path
        let url = try run(["start", directory, "--watch", "\(getpid())"])
        return TestPostgres(directory: directory, url: url)
    }

    /// Stops the server, keeping its data and port (`start()` brings it back).
    func stop() throws { _ = try Self.run(["stop", directory]) }

    /// Starts the stopped server again on the same port.
    func startAgain() throws { _ = try Self.run(["start", directory]) }

    func destroy() { _ = try? Self.run(["destroy", directory]) }

    /// A new, empty database on this server; returns its URL.
    func makeDatabase() throws -> String {
        let name = "t\(databases.wrappingAdd(1, ordering: .relaxed).newValue)_\(UUID().uuidString.prefix(8).lowercased())"
        return try Self.run(["createdb", directory, name])
    }

    /// Runs one SQL statement in the database of `url`; returns psql's output.
    @discardableResult
    func sql(_ statement: String, in url: String) throws -> String {
        let database = String(url.split(separator: "/").last ?? "")
        return try Self.run(["sql", directory, database, statement])
    }

    /// Settings for a storage on `url`, waiting at most 2 s for a connection.
    static func settings(_ url: String, poolSize: Int = 4) throws(StorageError) -> PostgresStorage.Settings {
        var settings = try PostgresStorage.Settings(url: url)
        settings.poolSize = poolSize
        settings.tls = .disable
        // Generous: the PostgreSQL suites run in parallel on one server, several clusters of
        // nodes among them, and a loaded 2-core machine was seen to need more than 2 s.
        settings.connectionWait = .seconds(10)
        return settings
    }

    struct ScriptFailed: Error, CustomStringConvertible {
        let description: String
    }

    /// Runs the script; returns its stdout's last line, or throws with its stderr.
    ///
    /// Output goes to files, not pipes: the server and the watcher the script leaves running
    /// would inherit a pipe's write end and no end of file would ever come.
    private static func run(_ arguments: [String]) throws -> String {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("pg-script-\(UUID().uuidString)")
        let outPath = base.path + ".out"
        let errPath = base.path + ".err"
        guard FileManager.default.createFile(atPath: outPath, contents: nil), FileManager.default.createFile(atPath: errPath, contents: nil) else {
            throw CocoaError(.fileWriteUnknown)
        }
        defer {
            try? FileManager.default.removeItem(atPath: outPath)
            try? FileManager.default.removeItem(atPath: errPath)
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [script] + arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outPath))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errPath))
        try launchProcess(process)
        process.waitUntilExit()
        let out = FileManager.default.contents(atPath: outPath) ?? Data()
        let err = FileManager.default.contents(atPath: errPath) ?? Data()
        let text = String(decoding: out, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard process.terminationStatus == 0 else {
            throw ScriptFailed(
                description: "scripts/postgres-test-server.sh \(arguments.first ?? "") failed (\(process.terminationStatus)): "
                    + String(decoding: err, as: UTF8.self))
        }
        return String(text.split(separator: "\n").last ?? "")
    }
}

/// One PostgreSQL server for a whole suite, reached through `TestPostgres.current`.
struct PostgresServerTrait: SuiteTrait, TestScoping {
    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let server = try TestPostgres.start()
        do {
            try await TestPostgres.$current.withValue(server) { try await function() }
        } catch {
            server.destroy()
            throw error
        }
        server.destroy()
    }
}

extension TestPostgres {
    @TaskLocal static var current: TestPostgres?

    /// The suite's server (fails the test when the suite has none).
    static func shared(sourceLocation: SourceLocation = #_sourceLocation) throws -> TestPostgres {
        try #require(current, "the suite has no PostgreSQL: add the .postgres trait", sourceLocation: sourceLocation)
    }
}

extension Trait where Self == PostgresServerTrait {
    /// A throwaway PostgreSQL for the suite.
    static var postgres: Self { PostgresServerTrait() }
}

/// Opens a storage on a fresh database of the suite's server, runs `body`, closes it.
func withPostgresStorage<T>(poolSize: Int = 4, _ body: (PostgresStorage, _ url: String) async throws -> T) async throws -> T {
    let server = try TestPostgres.shared()
    let url = try server.makeDatabase()
    let storage = try await PostgresStorage.open(settings: TestPostgres.settings(url, poolSize: poolSize))
    do {
        let result = try await body(storage, url)
        await storage.close()
        return result
    } catch {
        await storage.close()
        throw error
    }
}

