// Starts the real `state-server` binary for the client's tests (a trimmed copy of the
// integration tests' helper: test targets cannot share code).
//
// The binary is `$STATE_SERVER_BIN`, else `state-server` next to the test bundle, else
// `.build/debug/state-server`. It listens on 127.0.0.1, on a free port unless one is given, and
// prints the port on its first stdout line. Every wait has a deadline.

import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

struct ServerStartError: Error, CustomStringConvertible {
    var description: String
}

/// Where the `state-server` binary is.
enum ServerBinary {
    static func locate(filePath: String = #filePath) -> String? {
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
        // Tests/StateClientTests/Support/ServerProcess.swift → package root.
        let root = URL(fileURLWithPath: filePath)
            .deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let fallback = root.appendingPathComponent(".build/debug/state-server").path
        return fileManager.isExecutableFile(atPath: fallback) ? fallback : nil
    }
}

/// Output of a child process, collected on threads of their own (thread-safe).
final class OutputCollector: Sendable {
    private struct State {
        var stdout: [UInt8] = []
        var stderrTail: [UInt8] = []
        var stdoutClosed = false
    }

    private let state = Mutex(State())
    private static let limit = 64 * 1024

    func appendStdout(_ bytes: [UInt8]) {
        state.withLock { if $0.stdout.count < Self.limit { $0.stdout += bytes } }
    }

    func appendStderr(_ bytes: [UInt8]) {
        state.withLock { state in
            state.stderrTail += bytes
            if state.stderrTail.count > Self.limit { state.stderrTail.removeFirst(state.stderrTail.count - Self.limit) }
        }
    }

    func closeStdout() { state.withLock { $0.stdoutClosed = true } }

    var firstStdoutLine: String? {
        state.withLock { state in
            guard let newline = state.stdout.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
            return String(decoding: state.stdout[..<newline], as: UTF8.self)
        }
    }

    var stdoutClosed: Bool { state.withLock { $0.stdoutClosed } }
    var stderrText: String { state.withLock { String(decoding: $0.stderrTail, as: UTF8.self) } }

    /// Reads `handle` on a thread of its own until end of file, so the pipe never fills.
    static func drain(_ handle: FileHandle, into sink: @escaping @Sendable ([UInt8]) -> Void, atEnd: @escaping @Sendable () -> Void) {
        Thread {
            while true {
                let data = handle.availableData
                if data.isEmpty { break }
                sink([UInt8](data))
            }
            atEnd()
        }.start()
    }
}

/// A `state-server` child process on 127.0.0.1.
///
/// `@unchecked Sendable`: `process` is only used for its pid and `isRunning`, which Foundation
/// reads under its own lock; everything else is immutable or behind `Mutex`.
final class ServerProcess: @unchecked Sendable {
    let port: Int
    let output: OutputCollector
    private let process: Process
    private let stopped = Mutex(false)

    var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }

    private init(port: Int, process: Process, output: OutputCollector) {
        self.port = port
        self.process = process
        self.output = output
    }

    /// Starts the binary with `--host 127.0.0.1 --port <port>` plus `arguments`, in the test's
    /// environment minus any `STATE_SERVER_*` settings, plus `environment`.
    static func start(
        port: Int = 0, arguments: [String] = [], environment: [String: String] = [:], timeout: Duration = .seconds(30)
    ) async throws -> ServerProcess {
        guard let binary = ServerBinary.locate() else {
            throw ServerStartError(description: "state-server binary not found (set STATE_SERVER_BIN or run `swift build`)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["--host", "127.0.0.1", "--port", String(port)] + arguments
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("STATE_SERVER_") }
        env.merge(environment) { _, new in new }
        process.environment = env
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        process.standardInput = FileHandle.nullDevice
        let output = OutputCollector()
        try process.run()
        OutputCollector.drain(stdout.fileHandleForReading, into: { output.appendStdout($0) }, atEnd: { output.closeStdout() })
        OutputCollector.drain(stderr.fileHandleForReading, into: { output.appendStderr($0) }, atEnd: {})

        let deadline = ContinuousClock.now + timeout
        while true {
            if let line = output.firstStdoutLine {
                let prefix = "listening on http://127.0.0.1:"
                guard line.hasPrefix(prefix), let bound = Int(line.dropFirst(prefix.count)), bound > 0 else {
                    kill(process.processIdentifier, SIGKILL)
                    throw ServerStartError(description: "unexpected first stdout line: \(line.debugDescription)")
                }
                return ServerProcess(port: bound, process: process, output: output)
            }
            if !process.isRunning || output.stdoutClosed {
                kill(process.processIdentifier, SIGKILL)
                throw ServerStartError(description: "state-server ended before printing its port; stderr: \(output.stderrText)")
            }
            if ContinuousClock.now >= deadline {
                kill(process.processIdentifier, SIGKILL)
                throw ServerStartError(description: "state-server printed no port within \(timeout); stderr: \(output.stderrText)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// SIGTERM, then SIGKILL after `timeout`; waits for the exit. Idempotent.
    func stop(timeout: Duration = .seconds(5)) async {
        guard stopped.withLock({ stopped in defer { stopped = true }; return !stopped }) else { return }
        if process.isRunning { kill(process.processIdentifier, SIGTERM) }
        if await waitForExit(until: .now + timeout) { return }
        kill(process.processIdentifier, SIGKILL)
        _ = await waitForExit(until: .now + .seconds(5))
    }

    private func waitForExit(until deadline: ContinuousClock.Instant) async -> Bool {
        while process.isRunning {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return true
    }
}

/// Runs `body` against a server of its own and stops the server afterwards.
func withServer<T>(
    arguments: [String] = [], environment: [String: String] = [:], _ body: (ServerProcess) async throws -> T
) async throws -> T {
    let server = try await ServerProcess.start(arguments: arguments, environment: environment)
    do {
        let result = try await body(server)
        await server.stop()
        return result
    } catch {
        await server.stop()
        throw error
    }
}

/// A fresh directory under the system's temporary directory, for a SQLite database.
func temporaryDirectory() throws -> URL {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("state-client-tests-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    return directory
}
