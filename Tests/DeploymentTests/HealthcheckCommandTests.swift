import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `state-server healthcheck`, the Docker image's HEALTHCHECK and compose's node health check:
/// the real binary asking a real server (started on a free port) and places where nothing
/// healthy answers.
@Suite("state-server healthcheck")
struct HealthcheckCommandTests {
    /// Runs `state-server healthcheck ARGUMENTS` with `environment` (no other STATE_SERVER_*
    /// variable) and returns its exit status and output once it has exited.
    func healthcheck(_ arguments: [String], environment: [String: String] = [:]) async throws -> (status: Int32, stdout: String, stderr: String) {
        let binary = try #require(ServerBinary.locate(), "state-server binary not found (swift build)")
        let (process, output) = try ServerProcess.launch(binary, arguments: ["healthcheck"] + arguments, environment: environment)
        // Its own time limit is 3 s a step; this one only keeps a broken test from hanging.
        let ended = try await eventually(timeout: .seconds(30), every: .milliseconds(10)) { !process.isRunning && output.allClosed }
        if !ended {
            kill(process.processIdentifier, SIGKILL)
            Issue.record("state-server healthcheck did not exit; stderr: \(output.stderrText)")
        }
        process.waitUntilExit()
        return (process.terminationStatus, output.stdoutText, output.stderrText)
    }

    @Test("exits 0 for a ready server, found by --port, by STATE_SERVER_PORT or by the config file")
    func ready() async throws {
        let server = try await ServerProcess.start()
        try await server.stopping { server in
            let byFlag = try await healthcheck(["--port", String(server.port)])
            #expect(byFlag.status == 0, "\(byFlag)")
            #expect(byFlag.stdout.contains("http://127.0.0.1:\(server.port)/readyz: 200"), "\(byFlag)")

            // As in the image: the port from the environment, a wildcard host asked on loopback.
            let byEnvironment = try await healthcheck([], environment: ["STATE_SERVER_PORT": String(server.port), "STATE_SERVER_HOST": "0.0.0.0"])
            #expect(byEnvironment.status == 0, "\(byEnvironment)")

            let file = FileManager.default.temporaryDirectory.appendingPathComponent("healthcheck-\(UUID().uuidString).yaml")
            try "port: \(server.port)\n".write(to: file, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: file) }
            let byFile = try await healthcheck([], environment: ["STATE_SERVER_CONFIG": file.path])
            #expect(byFile.status == 0, "\(byFile)")

            let liveness = try await healthcheck(["--port", String(server.port), "--path", "/healthz"])
            #expect(liveness.status == 0, "\(liveness)")
        }
    }

    @Test("exits 1, saying why, for a status other than 200")
    func notOK() async throws {
        let server = try await ServerProcess.start()
        try await server.stopping { server in
            let result = try await healthcheck(["--port", String(server.port), "--path", "/no-such-route"])
            #expect(result.status == 1, "\(result)")
            #expect(result.stderr.contains("answered 404"), "\(result)")
        }
    }

    @Test("exits 1 when nothing listens on the port")
    func refused() async throws {
        let (fd, port) = try loopbackSocket(listening: false)  // bound, not listening: refused
        defer { close(fd) }
        let result = try await healthcheck(["--port", String(port)])
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("cannot connect"), "\(result)")
    }

    @Test("exits 1 when the server closes the connection without answering")
    func noReply() async throws {
        let node = try DeadNode()
        defer { node.stop() }
        let result = try await healthcheck(["--port", String(node.port)])
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("without a reply"), "\(result)")
        #expect(node.requestLines == ["GET /readyz HTTP/1.1"], "\(node.requestLines)")
    }
}
