import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// HTTPS served by the server itself (issue 25 item 5): the real binary with `--tls-cert` and
/// `--tls-key` (a throwaway self-signed certificate openssl makes for each test), spoken to by
/// clients that are not ours — curl and `openssl s_client`, both verifying the certificate and
/// its name (127.0.0.1) — and by `state-server healthcheck`.
@Suite("TLS served by the server")
struct TLSTests {
    /// Starts a server with a fresh certificate (and `arguments`, `environment`), runs `body` with
    /// it, the certificate and an API over curl, then stops it and requires a clean exit.
    func withTLSServer(
        arguments: [String] = [], environment: [String: String] = [:],
        _ body: (ServerProcess, TestCertificate, API) async throws -> Void
    ) async throws {
        try await withTemporaryDirectory { directory in
            let certificate = try await TestCertificate.make(in: directory)
            let server = try await ServerProcess.start(arguments: certificate.serverArguments + arguments, environment: environment)
            try await server.stopping { server in
                try await body(server, certificate, API(transport: CurlTransport(port: server.port, caFile: certificate.certificatePath)))
                let exit = await server.stop()
                #expect(exit.exitedByItself && !exit.bySignal && exit.status == 0, "\(exit); stderr: \(server.output.stderrText.suffix(2000))")
            }
        }
    }

    @Test("over HTTPS (curl, verifying the certificate): the port line says https, sessions are created, dispatched to and read")
    func requests() async throws {
        try await withTLSServer { server, _, api in
            #expect(server.output.firstStdoutLine == "listening on https://127.0.0.1:\(server.port)")
            // The log line comes on stderr, read apart from stdout's port line: wait for it.
            let logged = try await eventually { server.output.stderrText.contains("tls.notAfter=") }
            #expect(logged, "the listening line says when the certificate expires: \(server.output.stderrText)")
            #expect(await api.isHealthy())
            let session = try await api.createSession()
            try await session.dispatchOK("counter", ["type": "increment"])
            let reply = try await session.dispatchOK("counter", ["type": "increment", "by": 2])
            #expect(reply["version"] == 2)
            #expect(try await session.store("counter") == StoreState(version: 2, state: ["count": 3]))
            // An error from the contract comes back over TLS the same way.
            expectError(try await session.dispatch("counter", ["type": "no-such-action"]), 422, "invalid_action")
            expectError(try await Session(api: api, id: session.id, token: "wrong").request("GET", "/state"), 404, "session_not_found")
        }
    }

    @Test("an event stream over HTTPS: the snapshot, each change as it happens, heartbeats, and at SIGTERM the shutdown event")
    func eventStream() async throws {
        try await withTLSServer(arguments: ["--heartbeat", "0.2"], environment: ["STATE_SERVER_STREAMS_SHUTDOWN_RETRY": "0.25"]) { server, _, api in
            let session = try await api.createSession()
            let (stream, snapshot) = try await session.subscribe()
            defer { stream.close() }
            #expect(snapshot.seq == 0)
            #expect(stream.header("Content-Type")?.hasPrefix("text/event-stream") == true, "\(stream.head)")
            for expected in 1...3 {
                try await session.dispatchOK("counter", ["type": "increment"])
                let event = try await stream.nextEvent()
                #expect(event.event == "state" && event.seq == expected, "\(event)")
                #expect(event.json?["state"] == ["count": .int(expected)], "\(event)")
            }
            // Nothing to send: the heartbeat comes through TLS too.
            var heartbeat = false
            for _ in 0..<20 where !heartbeat {
                if case .comment("ping") = try await stream.next(timeout: .seconds(5)) { heartbeat = true }
            }
            #expect(heartbeat, "no `: ping` on the idle stream")
            // Graceful stop with the TLS stream open: the farewell, then the end.
            kill(server.pid, SIGTERM)
            var events: [SSEEvent] = []
            reading: while true {
                switch try await stream.next(timeout: .seconds(5)) {
                case .event(let event): events.append(event)
                case .comment: continue
                case .end: break reading
                }
            }
            #expect(events.last?.event == "shutdown", "\(events)")
            #expect(events.last?.retry == 250, "\(events)")
        }
    }

    @Test("a TLS client that leaves its event stream frees the slot before the next heartbeat (the hang-up watcher)")
    func hangUp() async throws {
        // Heartbeat 60 s: within the bound below only the hang-up watcher can free the slot.
        try await withTLSServer(arguments: ["--heartbeat", "60"], environment: ["STATE_SERVER_STREAMS_PER_SESSION": "1"]) { _, _, api in
            let session = try await api.createSession()
            let (first, _) = try await session.subscribe()
            let refused = try await session.events()
            expectError(try await refused.readErrorBody(), 429, "too_many_streams")
            first.close()
            var reopened: EventStream?
            let freed = try await eventually(timeout: .seconds(20), every: .milliseconds(100)) {
                let attempt = try await session.events()
                if attempt.status == 200 {
                    reopened = attempt
                    return true
                }
                attempt.close()
                return false
            }
            defer { reopened?.close() }
            #expect(freed, "the closed stream's slot was not freed before the next heartbeat")
        }
    }

    @Test("plain HTTP to the HTTPS port gets no HTTP reply and its connection is closed; HTTPS keeps working")
    func plainHTTPRefused() async throws {
        try await withTLSServer { server, _, api in
            for _ in 0..<5 {
                let connection = try await HTTPConnection.open(port: server.port)
                defer { connection.close() }
                try await connection.send(Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
                let (bytes, closed) = try await connection.readUntilClosed(timeout: .seconds(10))
                #expect(closed, "the server closes the connection")
                #expect(!bytes.starts(with: Array("HTTP/".utf8)), "no HTTP reply in the clear: \(String(decoding: bytes, as: UTF8.self))")
            }
            #expect(await api.isHealthy())
            let session = try await api.createSession()
            try await session.dispatchOK("counter", ["type": "increment"])
        }
    }

    @Test("a connection that never finishes its TLS handshake is closed after http.connectionTimeout")
    func stalledHandshake() async throws {
        try await withTLSServer(environment: ["STATE_SERVER_HTTP_CONNECTION_TIMEOUT": "1"]) { server, _, api in
            let connection = try await HTTPConnection.open(port: server.port)
            defer { connection.close() }
            // Half a TLS record header, then nothing.
            try await connection.send([0x16, 0x03])
            let (_, closed) = try await connection.readUntilClosed(timeout: .seconds(15))
            #expect(closed, "a stalled handshake is not held open")
            #expect(await api.isHealthy())
        }
    }

    @Test("a TLS handshake trickled a byte every 200 ms (never idle) is closed at http.headTimeout, with no 408 in the clear")
    func trickledHandshake() async throws {
        try await withTLSServer(environment: ["STATE_SERVER_HTTP_HEAD_TIMEOUT": "1"]) { server, _, api in
            let connection = try await HTTPConnection.open(port: server.port)
            defer { connection.close() }
            // A handshake record's header announcing 512 bytes, then its bytes one at a time:
            // at most 150 of them (30 s at this pace, far past the deadline of 1 s).
            let record: [UInt8] = [0x16, 0x03, 0x01, 0x02, 0x00] + [UInt8](repeating: 0x01, count: 512)
            var sent = 0
            while sent < 150 {
                do {
                    try await connection.send([record[sent]])
                } catch ClientError.closedEarly {
                    break
                }
                sent += 1
                let ended = try await connection.run { socket -> Bool in
                    do {
                        return try !socket.fill(deadline: ContinuousClock.now + .milliseconds(200), what: "the close") || !socket.buffer.isEmpty
                    } catch ClientError.timedOut {
                        return false
                    }
                }
                if ended { break }
            }
            let (bytes, closed) = try await connection.readUntilClosed(timeout: .seconds(10))
            #expect(sent < 150, "the trickled handshake was still open after \(sent) bytes")
            #expect(closed, "the trickled handshake was not closed")
            #expect(!String(decoding: bytes, as: UTF8.self).hasPrefix("HTTP/"), "an answer in the clear on the TLS port")
            #expect(await api.isHealthy())
        }
    }

    @Test("the framing checks hold inside TLS: ambiguous heads (two Content-Length values, an empty field name) are refused and what they hide never runs")
    func framingInsideTLS() async throws {
        try await withTLSServer { server, certificate, api in
            let session = try await api.createSession()
            let body = #"{"feature":"counter","action":{"type":"increment"}}"#
            let dispatch = "POST \(session.path)/dispatch HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\n"
                + "Authorization: Bearer \(session.token)\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"

            // The control: pipelined behind a good request, the same dispatch runs.
            let control = try TLSPipe(port: server.port, caFile: certificate.certificatePath)
            defer { control.close() }
            try control.send(Array(("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + dispatch).utf8))
            let both = String(decoding: try await control.readUntilClosed(), as: UTF8.self)
            #expect(both.components(separatedBy: "HTTP/1.1 200").count == 3, "two replies: \(both)")
            #expect(try await session.store("counter").version == 1)

            // The empty field names are caught in libmicrohttpd's read buffer, where TLS puts the
            // decrypted head as plain HTTP has it.
            for head in [
                "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: \(dispatch.utf8.count)\r\n\r\n",
                "GET /healthz HTTP/1.1\r\nHost: x\r\n: x\r\n", "GET /healthz HTTP/1.1\r\nHost: x\r\n\u{0}: x\r\n",
            ] {
                let pipe = try TLSPipe(port: server.port, caFile: certificate.certificatePath)
                defer { pipe.close() }
                try pipe.send(Array((head + dispatch).utf8))
                let reply = String(decoding: try await pipe.readUntilClosed(), as: UTF8.self)
                #expect(reply.hasPrefix("HTTP/1.1 400"), "\(head.debugDescription): \(reply)")
                #expect(reply.contains("invalid_request"), "\(head.debugDescription): \(reply)")
                #expect(reply.components(separatedBy: "HTTP/1.1").count == 2, "one reply, then the close: \(reply)")
                #expect(try await session.store("counter").version == 1, "\(head.debugDescription): the hidden dispatch did not run")
            }
        }
    }

    @Test("TLS 1.2 and 1.3 are served, TLS 1.1 is not (tls.priorities); GnuTLS's NORMAL alone would")
    func protocolVersions() async throws {
        /// Whether `openssl s_client` completes a handshake with only `version` offered (security
        /// level 0, so that the client itself allows TLS 1.1).
        func handshakes(_ port: Int, _ certificate: TestCertificate, _ version: String) async throws -> Bool {
            let pipe = try StreamingProcess(
                "openssl",
                ["s_client", "-quiet", "-connect", "127.0.0.1:\(port)", "-CAfile", certificate.certificatePath, "-verify_return_error",
                 version, "-cipher", "DEFAULT@SECLEVEL=0"])
            defer { pipe.terminate() }
            try pipe.write(Array("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8))
            let reply = String(decoding: try await pipe.readToEnd(), as: UTF8.self)
            return reply.hasPrefix("HTTP/1.1 200")
        }
        try await withTLSServer { server, certificate, _ in
            let tls13 = try await handshakes(server.port, certificate, "-tls1_3")
            let tls12 = try await handshakes(server.port, certificate, "-tls1_2")
            let tls11 = try await handshakes(server.port, certificate, "-tls1_1")
            #expect(tls13 && tls12, "TLS 1.3: \(tls13), TLS 1.2: \(tls12)")
            #expect(!tls11, "TLS 1.1 is refused")
        }
        // The control: the same client gets TLS 1.1 from GnuTLS's NORMAL, so the refusal above is
        // the setting's doing.
        try await withTLSServer(environment: ["STATE_SERVER_TLS_PRIORITIES": "NORMAL"]) { server, certificate, _ in
            let tls11 = try await handshakes(server.port, certificate, "-tls1_1")
            #expect(tls11, "GnuTLS's NORMAL serves TLS 1.1")
        }
    }

    // MARK: Start-up refusals

    /// Runs the server with `arguments` to its exit; requires a refusal (no port line, exit
    /// status 64 as for any unusable setting) whose stderr contains every piece of `message`.
    func expectRefusal(
        _ arguments: [String], environment: [String: String] = [:], message: [String],
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let binary = try #require(ServerBinary.locate(), "state-server binary not found (swift build)")
        let (process, output) = try ServerProcess.launch(
            binary, arguments: ["--host", "127.0.0.1", "--port", "0"] + arguments, environment: environment)
        let ended = try await eventually(timeout: .seconds(20), every: .milliseconds(10)) { !process.isRunning && output.allClosed }
        if !ended { kill(process.processIdentifier, SIGKILL) }
        #expect(ended, "still running: \(output.stdoutText)", sourceLocation: sourceLocation)
        guard ended else { return }
        #expect(process.terminationReason == .exit && process.terminationStatus == 64, "exit \(process.terminationStatus); stderr: \(output.stderrText)", sourceLocation: sourceLocation)
        #expect(!output.stdoutText.contains("listening"), "\(output.stdoutText)", sourceLocation: sourceLocation)
        for piece in message {
            #expect(output.stderrText.contains(piece), "stderr should say \(piece.debugDescription): \(output.stderrText)", sourceLocation: sourceLocation)
        }
    }

    @Test("a certificate without a key, or a key without a certificate, stops the server at start naming the missing one")
    func bothOrNeither() async throws {
        try await withTemporaryDirectory { directory in
            let certificate = try await TestCertificate.make(in: directory)
            try await expectRefusal(["--tls-cert", certificate.certificatePath], message: ["setting 'tls.key' must be set together with 'tls.cert'"])
            try await expectRefusal([], environment: ["STATE_SERVER_TLS_KEY": certificate.keyPath], message: ["setting 'tls.cert' must be set together with 'tls.key'"])
        }
    }

    @Test("unreadable, non-PEM, mismatched or encrypted files, bad priorities and a cluster.caFile without certificates stop the server at start with the setting, the file and the reason")
    func badFiles() async throws {
        try await withTemporaryDirectory { directory in
            let certificate = try await TestCertificate.make(in: directory)
            let other = try await TestCertificate.make(in: directory, name: "other")
            let cert = certificate.certificatePath
            let key = certificate.keyPath

            let missing = directory.path("missing.pem")
            try await expectRefusal(["--tls-cert", missing, "--tls-key", key], message: ["setting 'tls.cert' ('\(missing)')", "no such file"])
            try await expectRefusal(["--tls-cert", cert, "--tls-key", directory.url.path], message: ["setting 'tls.key'", "is a directory"])

            let garbage = directory.path("garbage.pem")
            try Data("not a certificate\n".utf8).write(to: URL(fileURLWithPath: garbage))
            try await expectRefusal(["--tls-cert", garbage, "--tls-key", key], message: ["setting 'tls.cert' ('\(garbage)')", "not a PEM X.509 certificate"])
            // The certificate given as the key.
            try await expectRefusal(["--tls-cert", cert, "--tls-key", cert], message: ["setting 'tls.key' ('\(cert)')", "not a PEM private key"])
            // Another certificate's key.
            try await expectRefusal(
                ["--tls-cert", cert, "--tls-key", other.keyPath], message: ["setting 'tls.key' ('\(other.keyPath)')", "does not belong to the certificate"])

            let encrypted = directory.path("encrypted.pem")
            _ = try await onThread {
                try runTool("openssl", ["pkey", "-in", key, "-aes256", "-passout", "pass:secret", "-out", encrypted])
            }
            try await expectRefusal(["--tls-cert", cert, "--tls-key", encrypted], message: ["setting 'tls.key' ('\(encrypted)')", "encrypted with a passphrase"])

            try await expectRefusal(
                ["--tls-cert", cert, "--tls-key", key], environment: ["STATE_SERVER_TLS_PRIORITIES": "NORMAL:+NO-SUCH-THING"],
                message: ["setting 'tls.priorities'", "NO-SUCH-THING"])
            // The certificates a node trusts for the others' https:// URLs.
            try await expectRefusal([], environment: ["STATE_SERVER_CLUSTER_CA_FILE": garbage], message: ["setting 'cluster.caFile' ('\(garbage)')"])
            try await expectRefusal([], environment: ["STATE_SERVER_CLUSTER_CA_FILE": missing], message: ["setting 'cluster.caFile' ('\(missing)')", "no such file"])
        }
    }

    // MARK: The healthcheck

    @Test("state-server healthcheck speaks HTTPS with the server's TLS settings and accepts only the certificate in tls.cert")
    func healthcheck() async throws {
        let check = HealthcheckCommandTests()
        try await withTLSServer { server, certificate, _ in
            let port = String(server.port)
            let byFlags = try await check.healthcheck(["--port", port, "--tls-cert", certificate.certificatePath, "--tls-key", certificate.keyPath])
            #expect(byFlags.status == 0, "\(byFlags)")
            #expect(byFlags.stdout.contains("https://127.0.0.1:\(server.port)/readyz: 200"), "\(byFlags)")
            // As in the image: everything from the environment, a wildcard host asked on loopback.
            let byEnvironment = try await check.healthcheck([], environment: [
                "STATE_SERVER_PORT": port, "STATE_SERVER_HOST": "0.0.0.0",
                "STATE_SERVER_TLS_CERT": certificate.certificatePath, "STATE_SERVER_TLS_KEY": certificate.keyPath,
            ])
            #expect(byEnvironment.status == 0, "\(byEnvironment)")

            // Without the TLS settings it asks in plain HTTP, which the port does not answer.
            let plain = try await check.healthcheck(["--port", port])
            #expect(plain.status == 1, "\(plain)")
            #expect(plain.stderr.contains("speaks HTTPS only"), "\(plain)")

            // Another certificate than the server's is not believed.
            try await withTemporaryDirectory { directory in
                let other = try await TestCertificate.make(in: directory, name: "other")
                let wrong = try await check.healthcheck(["--port", port, "--tls-cert", other.certificatePath, "--tls-key", other.keyPath])
                #expect(wrong.status == 1, "\(wrong)")
                #expect(wrong.stderr.contains("not the one in tls.cert"), "\(wrong)")
            }
        }
    }
}
