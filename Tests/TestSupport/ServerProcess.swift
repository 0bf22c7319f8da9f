// The real `state-server` binary as a child process, for the suites that test over real HTTP
// (StateServerIntegrationTests' socket suites, DurabilityTests, StateClientTests,
// RepositoryTests). The contract suites that need no socket run in process instead
// (InProcessServer.swift's `.inProcessServer` trait), through the same `API`.
//
// A suite starts one server on a free port (`.localServer` trait: one process per suite, stopped
// with SIGTERM after it; `withServer` for tests that need special settings or stop the server).
// Requests go through a small HTTP/1.1 client over POSIX sockets (`HTTPConnection`,
// `EventStream`) whose every wait has a deadline, and whose blocking calls run off Swift's
// cooperative pool. The binary is `$STATE_SERVER_BIN`, else `state-server` next to the test
// bundle, else `.build/debug/state-server`. With STATE_SERVER_TEST_STORAGE=sqlite, every
// server started without `--storage` gets a fresh SQLite database of its own (`make test` runs
// StateServerIntegrationTests a second time that way).
//
//     swift build && swift test --filter StateServerIntegrationTests

import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a server could not be started.
package struct ServerStartError: Error, CustomStringConvertible {
    package var description: String

    package init(description: String) { self.description = description }
}

/// How a server process ended.
package struct ServerExit: Sendable, CustomStringConvertible {
    /// Exit status, or the signal number when `bySignal`.
    package var status: Int32
    package var bySignal: Bool
    /// From the signal (or the stop request) to the exit.
    package var elapsed: Duration
    /// False when it had to be killed with SIGKILL.
    package var exitedByItself: Bool

    package var description: String {
        "\(bySignal ? "signal" : "status") \(status) after \(elapsed)\(exitedByItself ? "" : " (SIGKILLed)")"
    }
}

/// Where the `state-server` binary is.
package enum ServerBinary {
    package static func locate() -> String? {
        let fileManager = FileManager.default
        if let path = ProcessInfo.processInfo.environment["STATE_SERVER_BIN"], !path.isEmpty {
            return path
        }
        var starts: [URL] = []
        if let first = CommandLine.arguments.first {
            starts.append(URL(fileURLWithPath: first).resolvingSymlinksInPath())
        }
        starts.append(Bundle.main.bundleURL)
        if let executable = Bundle.main.executableURL { starts.append(executable) }
        for start in starts {
            var directory = start.deletingLastPathComponent()
            for _ in 0..<5 {
                let candidate = directory.appendingPathComponent("state-server").path
                var isDirectory: ObjCBool = false
                if fileManager.fileExists(atPath: candidate, isDirectory: &isDirectory), !isDirectory.boolValue,
                    fileManager.isExecutableFile(atPath: candidate)
                {
                    return candidate
                }
                directory = directory.deletingLastPathComponent()
            }
        }
        // Tests/TestSupport/ServerProcess.swift → package root.
        let root = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let fallback = root.appendingPathComponent(".build/debug/state-server").path
        return fileManager.isExecutableFile(atPath: fallback) ? fallback : nil
    }
}

/// Collected output of a child process (thread-safe).
package final class OutputCollector: Sendable {
    private struct State {
        var stdout: [UInt8] = []
        var stderrTail: [UInt8] = []
        var stdoutClosed = false
        var stderrClosed = false
    }

    private let state = Mutex(State())
    private static let tailLimit = 64 * 1024

    package init() {}

    package func appendStdout(_ bytes: [UInt8]) {
        state.withLock { state in
            if state.stdout.count < Self.tailLimit { state.stdout += bytes }
        }
    }

    package func appendStderr(_ bytes: [UInt8]) {
        state.withLock { state in
            state.stderrTail += bytes
            if state.stderrTail.count > Self.tailLimit {
                state.stderrTail.removeFirst(state.stderrTail.count - Self.tailLimit)
            }
        }
    }

    package func closeStdout() { state.withLock { $0.stdoutClosed = true } }
    package func closeStderr() { state.withLock { $0.stderrClosed = true } }

    package var firstStdoutLine: String? {
        state.withLock { state in
            guard let newline = state.stdout.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
            return String(decoding: state.stdout[..<newline], as: UTF8.self)
        }
    }

    package var stdoutClosed: Bool { state.withLock { $0.stdoutClosed } }
    /// Both pipes reached end of file: every byte the process wrote is here.
    package var allClosed: Bool { state.withLock { $0.stdoutClosed && $0.stderrClosed } }
    package var stdoutText: String { state.withLock { String(decoding: $0.stdout, as: UTF8.self) } }
    package var stderrText: String { state.withLock { String(decoding: $0.stderrTail, as: UTF8.self) } }

    /// Reads `handle` on a thread of its own until end of file, so the pipe never fills.
    package static func drain(_ handle: FileHandle, into sink: @escaping @Sendable ([UInt8]) -> Void, atEnd: @escaping @Sendable () -> Void) {
        let thread = Thread {
            while true {
                let data = handle.availableData
                if data.isEmpty { break }
                sink([UInt8](data))
            }
            atEnd()
        }
        thread.start()
    }
}

/// A `state-server` child process listening on 127.0.0.1 (on a free port unless one is given).
///
/// `@unchecked Sendable`: `process` is only used for its pid, `isRunning` and termination
/// properties, which Foundation reads under its own lock; all other state is immutable or
/// behind `Mutex`.
package final class ServerProcess: @unchecked Sendable {
    package let port: Int
    package let output: OutputCollector
    private let process: Process
    private let exitResult = Mutex<ServerExit?>(nil)

    package var pid: Int32 { process.processIdentifier }
    package var api: API { API(port: port) }
    /// `http://127.0.0.1:<port>`, for clients that take a URL.
    package var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }

    private init(port: Int, process: Process, output: OutputCollector) {
        self.port = port
        self.process = process
        self.output = output
    }

    /// The cluster secret (`cluster.secret`) of every server a test starts, unless the test
    /// gives its own: a node on PostgreSQL refuses to start without one.
    package static let clusterSecret = "test-cluster-secret-0123456789abcdef-0123456789abcdef"

    /// Starts the binary with `--host 127.0.0.1 --port <port>` plus `arguments`, in the test's
    /// environment minus any `STATE_SERVER_*` settings, plus ``clusterSecret`` and `environment`.
    /// Port 0 (the default) takes a free port; a fixed one lets a test restart a server where
    /// clients expect it.
    package static func start(
        port: Int = 0, arguments: [String] = [], environment: [String: String] = [:],
        timeout: Duration = .seconds(30)
    ) async throws -> ServerProcess {
        guard let binary = ServerBinary.locate() else {
            throw ServerStartError(
                description: "state-server binary not found (set STATE_SERVER_BIN or run `swift build`)")
        }
        let environment = ["STATE_SERVER_CLUSTER_SECRET": clusterSecret].merging(environment) { $1 }
        var arguments = arguments
        // The same behaviour suite runs against both storages: STATE_SERVER_TEST_STORAGE=sqlite
        // gives every server its own fresh SQLite database.
        if ProcessInfo.processInfo.environment["STATE_SERVER_TEST_STORAGE"] == "sqlite", !arguments.contains("--storage") {
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("state-server-tests-\(UUID().uuidString)")
            arguments += ["--storage", "sqlite:\(directory.path)/state.db"]
        }
        let (process, output) = try launch(
            binary, arguments: ["--host", "127.0.0.1", "--port", String(port)] + arguments, environment: environment)

        let started = try await poll(timeout: timeout, every: .milliseconds(10)) { () throws -> ServerProcess? in
            if let line = output.firstStdoutLine {
                // https:// when the server serves TLS itself (`--tls-cert`, `--tls-key`).
                // (`--host 0.0.0.0` added to `arguments`: every address, 127.0.0.1 included.)
                let prefix = ["listening on http://127.0.0.1:", "listening on https://127.0.0.1:", "listening on http://0.0.0.0:"]
                    .first { line.hasPrefix($0) } ?? ""
                guard !prefix.isEmpty, let bound = Int(line.dropFirst(prefix.count)), bound > 0 else {
                    kill(process.processIdentifier, SIGKILL)
                    throw ServerStartError(description: "unexpected first stdout line: \(line.debugDescription)")
                }
                return ServerProcess(port: bound, process: process, output: output)
            }
            if !process.isRunning || output.stdoutClosed {
                kill(process.processIdentifier, SIGKILL)
                throw ServerStartError(
                    description: "state-server ended before printing its port; stderr: \(output.stderrText)")
            }
            return nil
        }
        guard let started else {
            kill(process.processIdentifier, SIGKILL)
            throw ServerStartError(
                description: "state-server printed no port within \(timeout); stderr: \(output.stderrText)")
        }
        return started
    }

    /// Runs `binary` with exactly `arguments`, in the test's environment minus any
    /// `STATE_SERVER_*` settings, plus `environment`; stdin is empty and stdout and stderr are
    /// drained, on threads of their own, into the returned collector.
    package static func launch(
        _ binary: String, arguments: [String], environment: [String: String]
    ) throws -> (process: Process, output: OutputCollector) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("STATE_SERVER_") }
        env.merge(environment) { _, new in new }
        process.environment = env
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        process.standardInput = FileHandle.nullDevice
        let output = OutputCollector()
        try launchProcess(process)
        OutputCollector.drain(stdout.fileHandleForReading, into: { output.appendStdout($0) }, atEnd: { output.closeStdout() })
        OutputCollector.drain(stderr.fileHandleForReading, into: { output.appendStderr($0) }, atEnd: { output.closeStderr() })
        return (process, output)
    }

    package var isRunning: Bool { process.isRunning }

    /// Sends `signal` and waits up to `timeout` for the exit; then SIGKILLs. Idempotent: a second
    /// call returns the first result. The 30 s are a safety net, not a speed check: in the
    /// crowded first minute of `swift test`, a server that logged `stopped` 7 ms after SIGTERM
    /// was seen only after 5 s.
    @discardableResult
    package func stop(signal: Int32 = SIGTERM, timeout: Duration = .seconds(30)) async -> ServerExit {
        if let result = exitResult.withLock({ $0 }) { return result }
        let start = ContinuousClock.now
        if process.isRunning { kill(pid, signal) }
        var exitedByItself = await waitForExit(until: start + timeout)
        if !exitedByItself {
            kill(pid, SIGKILL)
            _ = await waitForExit(until: ContinuousClock.now + .seconds(5))
            exitedByItself = false
        }
        let elapsed = start.duration(to: .now)
        let result: ServerExit
        if process.isRunning {
            result = ServerExit(status: -1, bySignal: true, elapsed: elapsed, exitedByItself: false)
        } else {
            result = ServerExit(
                status: process.terminationStatus,
                bySignal: process.terminationReason == .uncaughtSignal,
                elapsed: elapsed, exitedByItself: exitedByItself)
        }
        exitResult.withLock { $0 = result }
        return result
    }

    /// Runs `body` against this server, then stops it (SIGTERM, then SIGKILL) whatever happens.
    /// `body` may stop or crash it itself.
    package func stopping<T>(after body: (ServerProcess) async throws -> T) async throws -> T {
        try await runThenStop({ try await body(self) }, stop: { _ = await stop() })
    }

    private func waitForExit(until deadline: ContinuousClock.Instant) async -> Bool {
        _ = try? await eventually(until: deadline, every: .milliseconds(10)) { !process.isRunning }
        return !process.isRunning
    }
}

/// The server a suite shares, set by the `.localServer` trait (a real process) or the
/// `.inProcessServer` trait of InProcessServer.swift (the responder in the test process).
package enum SharedServer {
    @TaskLocal package static var current: ServerProcess?
    /// An in-process server's API, when the suite runs in process.
    @TaskLocal package static var inProcess: API?

    /// The suite's server (fails the test when the suite has none).
    package static func api(sourceLocation: SourceLocation = #_sourceLocation) throws -> API {
        if let inProcess { return inProcess }
        return try #require(
            current, "the suite needs the .localServer or .inProcessServer trait", sourceLocation: sourceLocation
        ).api
    }
}

/// Starts one server for a whole suite and stops it (SIGTERM, then SIGKILL) after the suite.
package struct LocalServerTrait: SuiteTrait, TestScoping {
    package var arguments: [String]
    package var environment: [String: String]

    package var isRecursive: Bool { false }

    package func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let server = try await ServerProcess.start(arguments: arguments, environment: environment)
        do {
            try await SharedServer.$current.withValue(server) { try await function() }
        } catch {
            await server.stop()
            throw error
        }
        let exit = await server.stop()
        if exit.bySignal || exit.status != 0 {
            Issue.record("the suite's server did not exit cleanly on SIGTERM: \(exit); stderr: \(server.output.stderrText.suffix(2000))")
        }
    }
}

extension Trait where Self == LocalServerTrait {
    /// One `state-server` for the whole suite, with extra arguments and environment.
    package static func localServer(arguments: [String] = [], environment: [String: String] = [:]) -> Self {
        LocalServerTrait(arguments: arguments, environment: environment)
    }
}

/// Runs `body` against a server of its own and stops it afterwards.
package func withServer<T>(
    arguments: [String] = [], environment: [String: String] = [:],
    _ body: (ServerProcess) async throws -> T
) async throws -> T {
    try await ServerProcess.start(arguments: arguments, environment: environment).stopping(after: body)
}

/// Runs `body`, then `stop`, whether `body` threw or not; `body`'s result or error.
package func runThenStop<T>(_ body: () async throws -> T, stop: () async -> Void) async throws -> T {
    do {
        let result = try await body()
        await stop()
        return result
    } catch {
        await stop()
        throw error
    }
}
