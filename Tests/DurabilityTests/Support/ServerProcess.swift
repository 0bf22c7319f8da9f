// Copied from Tests/StateServerIntegrationTests/Support (test targets cannot share code); the suite-wide server trait is left out.

// Integration tests of the HTTP API v1 contract (shared/contract/http-api-v1.md) over real HTTP.
//
// Each suite starts the real `state-server` binary on a free port (`.localServer` trait: one
// process per suite, stopped with SIGTERM after it; `withServer` for tests that need special
// settings or stop the server). Requests go through a small HTTP/1.1 client over POSIX sockets
// (`HTTPConnection`, `EventStream`) whose every wait has a deadline, and whose blocking calls run
// off Swift's cooperative pool. The binary is `$STATE_SERVER_BIN`, else `state-server` next to
// the test bundle, else `.build/debug/state-server`.
//
//     swift build && swift test --filter StateServerIntegrationTests

import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Why a server could not be started.
struct ServerStartError: Error, CustomStringConvertible {
    var description: String
}

/// How a server process ended.
struct ServerExit: Sendable, CustomStringConvertible {
    /// Exit status, or the signal number when `bySignal`.
    var status: Int32
    var bySignal: Bool
    /// From the signal (or the stop request) to the exit.
    var elapsed: Duration
    /// False when it had to be killed with SIGKILL.
    var exitedByItself: Bool

    var description: String {
        "\(bySignal ? "signal" : "status") \(status) after \(elapsed)\(exitedByItself ? "" : " (SIGKILLed)")"
    }
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
        // Tests/StateServerIntegrationTests/Support/ServerProcess.swift → package root.
        let root = URL(fileURLWithPath: filePath)
            .deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let fallback = root.appendingPathComponent(".build/debug/state-server").path
        return fileManager.isExecutableFile(atPath: fallback) ? fallback : nil
    }
}

/// Collected output of a child process (thread-safe).
final class OutputCollector: Sendable {
    private struct State {
        var stdout: [UInt8] = []
        var stderrTail: [UInt8] = []
        var stdoutClosed = false
    }

    private let state = Mutex(State())
    private static let tailLimit = 64 * 1024

    func appendStdout(_ bytes: [UInt8]) {
        state.withLock { state in
            if state.stdout.count < Self.tailLimit { state.stdout += bytes }
        }
    }

    func appendStderr(_ bytes: [UInt8]) {
        state.withLock { state in
            state.stderrTail += bytes
            if state.stderrTail.count > Self.tailLimit {
                state.stderrTail.removeFirst(state.stderrTail.count - Self.tailLimit)
            }
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
    var stdoutText: String { state.withLock { String(decoding: $0.stdout, as: UTF8.self) } }
    var stderrText: String { state.withLock { String(decoding: $0.stderrTail, as: UTF8.self) } }

    /// Reads `handle` on a thread of its own until end of file, so the pipe never fills.
    static func drain(_ handle: FileHandle, into sink: @escaping @Sendable ([UInt8]) -> Void, atEnd: @escaping @Sendable () -> Void) {
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

/// A `state-server` child process listening on a free port of 127.0.0.1.
///
/// `@unchecked Sendable`: `process` is only used for its pid, `isRunning` and termination
/// properties, which Foundation reads under its own lock; all other state is immutable or
/// behind `Mutex`.
final class ServerProcess: @unchecked Sendable {
    let port: Int
    let output: OutputCollector
    private let process: Process
    private let exitResult = Mutex<ServerExit?>(nil)

    var pid: Int32 { process.processIdentifier }
    var api: API { API(port: port) }

    private init(port: Int, process: Process, output: OutputCollector) {
        self.port = port
        self.process = process
        self.output = output
    }

    /// Starts the binary with `--host 127.0.0.1 --port 0` plus `arguments`, in the test's
    /// environment minus any `STATE_SERVER_*` settings, plus `environment`.
    static func start(
        arguments: [String] = [], environment: [String: String] = [:],
        timeout: Duration = .seconds(30)
    ) async throws -> ServerProcess {
        guard let binary = ServerBinary.locate() else {
            throw ServerStartError(
                description: "state-server binary not found (set STATE_SERVER_BIN or run `swift build`)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["--host", "127.0.0.1", "--port", "0"] + arguments
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
                guard line.hasPrefix(prefix), let port = Int(line.dropFirst(prefix.count)), port > 0 else {
                    kill(process.processIdentifier, SIGKILL)
                    throw ServerStartError(description: "unexpected first stdout line: \(line.debugDescription)")
                }
                return ServerProcess(port: port, process: process, output: output)
            }
            if !process.isRunning || output.stdoutClosed {
                kill(process.processIdentifier, SIGKILL)
                throw ServerStartError(
                    description: "state-server ended before printing its port; stderr: \(output.stderrText)")
            }
            if ContinuousClock.now >= deadline {
                kill(process.processIdentifier, SIGKILL)
                throw ServerStartError(
                    description: "state-server printed no port within \(timeout); stderr: \(output.stderrText)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    var isRunning: Bool { process.isRunning }

    /// Sends `signal` and waits up to `timeout` for the exit; then SIGKILLs. Idempotent: a second
    /// call returns the first result.
    @discardableResult
    func stop(signal: Int32 = SIGTERM, timeout: Duration = .seconds(5)) async -> ServerExit {
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

    private func waitForExit(until deadline: ContinuousClock.Instant) async -> Bool {
        while process.isRunning {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return true
    }
}

