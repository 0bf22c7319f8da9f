import Foundation
import TestSupport
import StatePersistence
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension ServerProcess {
    /// A server on the SQLite database at `database`.
    static func durable(
        _ database: String, environment: [String: String] = [:], timeout: Duration = .seconds(30)
    ) async throws -> ServerProcess {
        try await start(arguments: ["--storage", "sqlite:\(database)"], environment: environment, timeout: timeout)
    }

    /// Sends SIGKILL and waits for the process to be gone.
    @discardableResult
    func crash() async -> ServerExit {
        await stop(signal: SIGKILL, timeout: .seconds(5))
    }

    /// Stops with SIGTERM and records an issue unless the exit is clean.
    func stopCleanly(sourceLocation: SourceLocation = #_sourceLocation) async {
        let exit = await stop()
        #expect(!exit.bySignal && exit.status == 0 && exit.exitedByItself,
            "the server did not stop cleanly: \(exit); stderr: \(output.stderrText.suffix(2000))",
            sourceLocation: sourceLocation)
    }
}

/// How a process that was expected to refuse to start ended.
struct FinishedRun: Sendable {
    var status: Int32
    var bySignal: Bool
    var stdout: String
    var stderr: String
}

/// Runs `state-server` with `arguments` until it exits by itself; after `timeout` it is killed
/// and the test fails (a server that should refuse to start ran on instead). The timeout is a
/// safety net, not a speed check: at the start of `swift test` a start-up was seen taking 12 s.
func runServerToExit(
    arguments: [String], environment: [String: String] = [:], timeout: Duration = .seconds(60)
) async throws -> FinishedRun {
    let binary = try #require(ServerBinary.locate(), "state-server binary not found (set STATE_SERVER_BIN or run `swift build`)")
    let (process, output) = try ServerProcess.launch(
        binary, arguments: ["--host", "127.0.0.1", "--port", "0"] + arguments, environment: environment)
    // eventually scales the timeout for sanitizers.
    let exited = try await eventually(timeout: timeout, every: .milliseconds(10)) { !process.isRunning }
    if !exited {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        Issue.record("state-server was still running after \(timeout); stdout: \(output.stdoutText)")
    }
    // Wait for the drain threads to take the last bytes of both pipes.
    _ = try await eventually { output.allClosed }
    return FinishedRun(
        status: process.terminationStatus, bySignal: process.terminationReason == .uncaughtSignal,
        stdout: output.stdoutText, stderr: output.stderrText)
}

/// Thread-safe counters and lists for concurrent clients.
final class Tally<Value: Sendable>: Sendable {
    private let values = Mutex<[Value]>([])

    func append(_ value: Value) { values.withLock { $0.append(value) } }
    var all: [Value] { values.withLock { $0 } }
    var count: Int { values.withLock { $0.count } }
}

/// Seconds as text with milliseconds, for printed measurements.
func seconds(_ duration: Duration) -> String {
    let (whole, atto) = duration.components
    return String(format: "%.3f s", Double(whole) + Double(atto) / 1e18)
}

/// Runs `body` against a server on the SQLite database at `database`, and stops the server
/// afterwards (SIGTERM, then SIGKILL) whatever happens. `body` may stop or crash it itself.
func withDurableServer<T>(
    _ database: String, environment: [String: String] = [:], _ body: (ServerProcess) async throws -> T
) async throws -> T {
    try await ServerProcess.durable(database, environment: environment).stopping(after: body)
}

/// A flag shared by concurrent tasks.
final class Flag: Sendable {
    private let value = Atomic<Bool>(false)

    func set() { value.store(true, ordering: .relaxed) }
    var isSet: Bool { value.load(ordering: .relaxed) }
}
