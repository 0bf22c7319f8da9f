import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Issue 24 item 1: a process that dies of a fatal signal (a Swift trap is SIGILL or SIGTRAP)
/// leaves a line on stderr, and still ends by that signal (CTerminationSignals).
@Suite(
    "A fatal signal leaves a line on stderr",
    // In a sanitized build (make test-sanitized) the sanitizer's own handler takes these signals
    // first, writes its report and exits: there is no handler of ours to test.
    .disabled(if: sanitizedWaitScale > 1, "the sanitizer handles fatal signals itself"))
struct FatalSignalTests {
    static let signals: [Int32] = [SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV]
    static let names = ["SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGSEGV"]

    @Test("the line `state-server: fatal signal N (NAME), the process ends`, and the exit is by that signal",
          arguments: zip(signals, names))
    func line(_ signal: Int32, _ name: String) async throws {
        // Without the runtime's backtracer: the handler the signal had before is the default.
        let server = try await ServerProcess.start(environment: ["SWIFT_BACKTRACE": "enable=no"])
        #expect(await server.api.isHealthy())
        let exit = await server.stop(signal: signal, timeout: .seconds(10))
        #expect(exit.exitedByItself && exit.bySignal && exit.status == signal, "\(exit)")
        let expected = "state-server: fatal signal \(signal) (\(name)), the process ends\n"
        let stderr = await Self.stderr(of: server)
        #expect(stderr.contains(expected), "stderr: \(stderr.suffix(2000))")
        #expect(stderr.components(separatedBy: "fatal signal").count == 2, "one line only: \(stderr.suffix(2000))")
    }

    /// The debug build links the Swift runtime dynamically, which finds its backtracer
    /// (swift-backtrace) next to itself: the line comes first, then the runtime's backtrace.
    @Test("with the Swift runtime's backtracer on: the line, then the backtrace; the exit is still SIGSEGV")
    func withBacktracer() async throws {
        let server = try await ServerProcess.start(environment: [
            // Short: the test keeps the last 64 KB of stderr.
            "SWIFT_BACKTRACE": "enable=yes,interactive=no,color=no,threads=crashed,registers=none,images=none,limit=16"
        ])
        #expect(await server.api.isHealthy())
        let exit = await server.stop(signal: SIGSEGV, timeout: .seconds(90))
        #expect(exit.exitedByItself && exit.bySignal && exit.status == SIGSEGV, "\(exit)")
        let stderr = await Self.stderr(of: server)
        let line = try #require(
            stderr.range(of: "state-server: fatal signal 11 (SIGSEGV), the process ends\n"), "stderr: \(stderr.suffix(2000))")
        let backtrace = try #require(stderr.range(of: "Program crashed"), "no backtrace; stderr: \(stderr.suffix(2000))")
        #expect(line.upperBound <= backtrace.lowerBound, "the line must come before the backtrace: \(stderr.prefix(2000))")
    }

    /// The server's stderr once its pipes reached their end (they are drained on other threads,
    /// after the exit), or as it is after 10 s.
    static func stderr(of server: ServerProcess) async -> String {
        _ = try? await eventually(timeout: .seconds(10), every: .milliseconds(20)) { server.output.allClosed }
        return server.output.stderrText
    }
}
