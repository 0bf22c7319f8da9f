import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Shutdown on SIGTERM and SIGINT")
struct ShutdownTests {
    @Test("SIGTERM with open event streams: the streams end and the process exits 0 within 5 s", arguments: [SIGTERM, SIGINT])
    func signal(_ signal: Int32) async throws {
        let server = try await ServerProcess.start()
        do {
            let session = try await server.api.createSession()
            let (first, _) = try await session.subscribe()
            let (second, _) = try await session.subscribe(query: "feature=counter")
            defer { first.close(); second.close() }
            try await session.dispatchOK("counter", ["type": "increment"])
            #expect(try await first.nextEvent().json?["version"] == 1)
            // A keep-alive connection and a half-sent request are open too.
            let idle = try await HTTPConnection.open(port: server.port)
            defer { idle.close() }
            #expect(try await idle.request("GET", "/healthz").status == 200)
            let partial = try await HTTPConnection.open(port: server.port)
            defer { partial.close() }
            try await partial.send(Array("GET /healthz HTTP/1.1\r\n".utf8))

            let exit = await server.stop(signal: signal, timeout: .seconds(5))
            #expect(exit.exitedByItself, "still running 5 s after the signal: \(exit); stderr: \(server.output.stderrText.suffix(2000))")
            #expect(!exit.bySignal && exit.status == 0, "\(exit)")
            #expect(try await first.waitForEnd(timeout: .seconds(2)), "stream still open after exit")
            #expect(try await second.waitForEnd(timeout: .seconds(2)), "stream still open after exit")
        } catch {
            await server.stop(signal: SIGKILL)
            throw error
        }
    }

    /// Issue 10 §7: a stream told why it ends reconnects at once (to another node, or to this
    /// one restarted) instead of guessing from a closed socket.
    @Test("SIGTERM: each open stream ends with `retry:` and `event: shutdown`, no id, after its changes; exit 0", arguments: [SIGTERM, SIGINT])
    func shutdownEvent(_ signal: Int32) async throws {
        let server = try await ServerProcess.start(environment: ["STATE_SERVER_STREAMS_SHUTDOWN_RETRY": "0.25"])
        do {
            let session = try await server.api.createSession()
            let (all, _) = try await session.subscribe()
            let (filtered, _) = try await session.subscribe(query: "feature=todos")
            defer { all.close(); filtered.close() }
            // A stream that ends for another reason (its session deleted) gets no shutdown event.
            let gone = try await server.api.createSession()
            let (goneStream, _) = try await gone.subscribe()
            defer { goneStream.close() }
            #expect(try await gone.delete().status == 204)
            let goneItems = try await Self.itemsUntilEnd(goneStream)
            #expect(goneItems.allSatisfy { $0.event != "shutdown" }, "\(goneItems)")

            for _ in 0..<3 { try await session.dispatchOK("counter", ["type": "increment"]) }
            kill(server.pid, signal)

            // Every change published before the signal arrives first, then the farewell, then
            // the end: nothing follows it.
            let events = try await Self.itemsUntilEnd(all)
            let changes = events.dropLast()
            #expect(changes.map(\.event) == ["state", "state", "state"], "\(events)")
            #expect(changes.map(\.seq) == [1, 2, 3], "\(events)")
            for (stream, events) in [("all", events), ("filtered", try await Self.itemsUntilEnd(filtered))] {
                let last = try #require(events.last, "\(stream): no event before the end")
                #expect(last.event == "shutdown", "\(stream): \(events)")
                #expect(last.id == nil, "\(stream): the shutdown event must not move Last-Event-ID: \(last)")
                #expect(last.retry == 250, "\(stream): \(last)")
                #expect(last.json == ["reason": "shutdown", "retryAfterMs": 250], "\(stream): \(last)")
            }

            let exit = await server.stop(signal: signal, timeout: .seconds(5))
            #expect(exit.exitedByItself, "still running 5 s after the signal: \(exit); stderr: \(server.output.stderrText.suffix(2000))")
            #expect(!exit.bySignal && exit.status == 0, "\(exit)")
        } catch {
            await server.stop(signal: SIGKILL)
            throw error
        }
    }

    /// The events of `stream` until it ends (comments skipped); fails if it has not ended
    /// within `timeout`.
    static func itemsUntilEnd(_ stream: TestSupport.EventStream, timeout: Duration = .seconds(5)) async throws -> [SSEEvent] {
        let deadline = ContinuousClock.now + timeout
        var events: [SSEEvent] = []
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            guard remaining > .zero else { throw ClientError.timedOut("the end of the stream after \(events)") }
            switch try await stream.next(timeout: remaining) {
            case .event(let event): events.append(event)
            case .comment: continue
            case .end: return events
            }
        }
    }

    @Test("an idle server exits 0 on SIGTERM")
    func idle() async throws {
        let server = try await ServerProcess.start()
        #expect(await server.api.isHealthy())
        let exit = await server.stop(signal: SIGTERM, timeout: .seconds(5))
        #expect(exit.exitedByItself && !exit.bySignal && exit.status == 0, "\(exit)")
        // Nothing listens any more.
        await #expect(throws: (any Error).self) { try await HTTPConnection.open(port: server.port).request("GET", "/healthz") }
    }

    @Test("shutdown runs in reverse order of start: HTTP, then the sweeper, then the storage is closed")
    func order() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("state-server-shutdown-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try await ServerProcess.start(
            arguments: ["--storage", "sqlite:\(directory.path)/state.db", "--log-level", "debug"])
        let session = try await server.api.createSession()
        try await session.dispatchOK("counter", ["type": "increment"])
        let exit = await server.stop(signal: SIGTERM, timeout: .seconds(5))
        #expect(exit.exitedByItself && !exit.bySignal && exit.status == 0, "\(exit)")
        let log = server.output.stderrText
        let positions = ["shutting down", "HTTP stopped", "sweeper stopped", "storage closed", "info stopped"].map {
            log.range(of: $0)?.lowerBound
        }
        #expect(!positions.contains(nil), "missing steps in: \(log.suffix(3000))")
        let found = positions.compactMap { $0 }
        #expect(found == found.sorted(), "out of order: \(log.suffix(3000))")
    }

    /// A shell running a command in the background, or a supervisor, may start the server with
    /// SIGINT or SIGTERM ignored; the server's own handlers replace that, so the signal still
    /// stops it cleanly.
    @Test("a signal ignored by the parent (inherited SIG_IGN) still stops the server cleanly", arguments: [SIGTERM, SIGINT])
    func inheritedIgnore(_ signal: Int32) async throws {
        let binary = try #require(ServerBinary.locate(), "state-server binary not found")
        // `exec` keeps the shell's pid and its ignored signals.
        let (process, output) = try ServerProcess.launch(
            "/bin/sh", arguments: ["-c", #"trap '' TERM INT; exec "$0" --host 127.0.0.1 --port 0"#, binary], environment: [:])
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        let listening = try await eventually(timeout: .seconds(30), every: .milliseconds(10)) {
            output.firstStdoutLine != nil || !process.isRunning
        }
        let line = try #require(listening ? output.firstStdoutLine : nil, "no port line; stderr: \(output.stderrText)")
        #expect(line.hasPrefix("listening on http://127.0.0.1:"), "\(line)")
        kill(process.processIdentifier, signal)
        let exited = try await eventually(timeout: .seconds(5), every: .milliseconds(10)) { !process.isRunning }
        #expect(exited, "still running 5 s after the signal; stderr: \(output.stderrText.suffix(2000))")
        guard exited else { return }
        #expect(process.terminationReason == .exit && process.terminationStatus == 0, "exit \(process.terminationStatus)")
        #expect(output.stderrText.contains("shutting down"), "\(output.stderrText.suffix(2000))")
    }

    @Test("the first stdout line is exactly `listening on http://127.0.0.1:PORT`; logs go to stderr")
    func startupLine() async throws {
        try await withServer { server in
            #expect(server.output.firstStdoutLine == "listening on http://127.0.0.1:\(server.port)")
            for _ in 0..<3 { _ = try await server.api.request("GET", "/v1/nope") }
            #expect(await server.api.isHealthy())
            let stdout = server.output.stdoutText
            #expect(stdout.split(separator: "\n").count <= 1, "only the port line on stdout: \(stdout.prefix(500))")
        }
    }
}
