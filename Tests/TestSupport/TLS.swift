// HTTPS to a real `state-server` serving TLS itself (`--tls-cert`, `--tls-key`), through clients
// that are not ours: curl (Debian's, OpenSSL) for requests and event streams, verifying the
// server's certificate against the test's own CA file, and `openssl s_client` for raw bytes over
// TLS. The certificate is a throwaway self-signed one that openssl makes in the test's
// temporary folder.

import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A self-signed certificate for `localhost` and `127.0.0.1` (EC P-256, valid two days) and its
/// key, as PEM files in `directory`, made by `openssl req`.
package struct TestCertificate: Sendable {
    package let certificatePath: String
    package let keyPath: String

    private init(certificatePath: String, keyPath: String) {
        self.certificatePath = certificatePath
        self.keyPath = keyPath
    }

    package static func make(in directory: TemporaryDirectory, name: String = "server") async throws -> TestCertificate {
        let certificate = TestCertificate(certificatePath: directory.path("\(name).crt.pem"), keyPath: directory.path("\(name).key.pem"))
        _ = try await onThread {
            try runTool(
                "openssl",
                [
                    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", certificate.keyPath, "-out", certificate.certificatePath, "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                ])
        }
        return certificate
    }

    /// The arguments that make a server serve HTTPS with this certificate.
    package var serverArguments: [String] { ["--tls-cert", certificatePath, "--tls-key", keyPath] }
}

/// Runs a command-line tool found on PATH to its end; throws with its stderr when it fails.
/// Blocks: call it through `onThread`.
@discardableResult
package func runTool(_ tool: String, _ arguments: [String], input: [UInt8] = [], timeout: Duration = .seconds(60)) throws -> [UInt8] {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = [tool] + arguments
    let stdin = Pipe()
    let stdout = Pipe()
    let stderr = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = stderr
    let output = OutputCollector()
    try launchProcess(process)
    OutputCollector.drain(stdout.fileHandleForReading, into: { output.appendStdout($0) }, atEnd: { output.closeStdout() })
    OutputCollector.drain(stderr.fileHandleForReading, into: { output.appendStderr($0) }, atEnd: { output.closeStderr() })
    if !input.isEmpty { stdin.fileHandleForWriting.write(Data(input)) }
    try? stdin.fileHandleForWriting.close()
    let deadline = ContinuousClock.now + timeout
    while process.isRunning || !output.allClosed {
        if ContinuousClock.now >= deadline {
            kill(process.processIdentifier, SIGKILL)
            throw ClientError.timedOut("\(tool) \(arguments.joined(separator: " ")) to end")
        }
        usleep(2_000)
    }
    process.waitUntilExit()
    guard process.terminationReason == .exit, process.terminationStatus == 0 else {
        throw ServerStartError(description: "\(tool) \(arguments.joined(separator: " ")) failed (\(process.terminationStatus)): \(output.stderrText)")
    }
    return Array(output.stdoutText.utf8)
}

/// A child process whose stdout is read as it comes (curl on an event stream, `openssl
/// s_client`), and whose stdin stays open for writing.
///
/// `@unchecked Sendable`: `process` is only used for its pid and `isRunning`, which Foundation
/// reads under its own lock; the output sits behind a `Mutex`; `input` is a file handle written
/// from one task at a time.
package final class StreamingProcess: @unchecked Sendable {
    private let process: Process
    private let input: FileHandle
    private struct Output {
        var bytes: [UInt8] = []
        var ended = false
        var stderr: [UInt8] = []
    }
    private let output = Mutex(Output())

    package init(_ tool: String, _ arguments: [String]) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [tool] + arguments
        let stdin = Pipe()
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        input = stdin.fileHandleForWriting
        try launchProcess(process)
        // The drain threads hold the object until the pipes end (the process exits).
        OutputCollector.drain(
            stdout.fileHandleForReading, into: { bytes in self.output.withLock { $0.bytes += bytes } },
            atEnd: { self.output.withLock { $0.ended = true } })
        OutputCollector.drain(stderr.fileHandleForReading, into: { bytes in self.output.withLock { $0.stderr += bytes } }, atEnd: {})
    }

    package var stderrText: String { output.withLock { String(decoding: $0.stderr, as: UTF8.self) } }
    package var isRunning: Bool { process.isRunning }

    /// Writes to the process's stdin.
    package func write(_ bytes: [UInt8]) throws {
        try input.write(contentsOf: Data(bytes))
    }

    /// Closes its stdin.
    package func closeInput() { try? input.close() }

    /// Takes the bytes read so far, waiting (polling, up to `deadline`) until there are some;
    /// `nil` once stdout has ended and everything was taken.
    package func take(deadline: ContinuousClock.Instant) async throws -> [UInt8]? {
        // Some bytes, or .some(nil) once stdout has ended; nil (keep polling) while there are none.
        let taken = try await poll(until: deadline, every: .milliseconds(5)) { () -> [UInt8]?? in
            let (bytes, ended) = output.withLock { output -> ([UInt8], Bool) in
                defer { output.bytes.removeAll() }
                return (output.bytes, output.ended)
            }
            if !bytes.isEmpty { return bytes }
            return ended ? .some(nil) : nil
        }
        guard let taken else { throw ClientError.timedOut("output of \(process.arguments?.first ?? "a process")") }
        return taken
    }

    /// Every byte until stdout ends (the process closed it, usually by exiting).
    package func readToEnd(timeout: Duration = .seconds(10)) async throws -> [UInt8] {
        let deadline = ContinuousClock.now + timeout
        var all: [UInt8] = []
        while let bytes = try await take(deadline: deadline) { all += bytes }
        return all
    }

    /// Ends it (SIGKILL: the test process may ignore SIGTERM, and a child inherits that).
    package func terminate() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        closeInput()
    }
}

/// Requests to a server that serves HTTPS, through curl: `--cacert` verifies its certificate
/// (and its name, 127.0.0.1) as any client would. HTTP/1.1, a fresh connection each.
package struct CurlTransport: HTTPTransport {
    package let socketPort: Int
    /// The CA file curl trusts: the server's self-signed certificate.
    package let caFile: String

    package init(port: Int, caFile: String) {
        self.socketPort = port
        self.caFile = caFile
    }

    package var port: Int? { socketPort }
    package var baseURL: String { "https://127.0.0.1:\(socketPort)" }

    /// curl's arguments for `method target` with `headers`; `-i` puts the response head first.
    func arguments(_ method: String, _ target: String, headers: [Header], timeout: Duration?) -> [String] {
        var arguments = ["-sS", "--http1.1", "-i", "--cacert", caFile, "-X", method, "-H", "Expect:"]
        if let timeout { arguments += ["--max-time", String(Double(timeout.components.seconds) + 1)] }
        for header in headers { arguments += ["-H", "\(header.name): \(header.value)"] }
        return arguments
    }

    package func request(
        _ method: String, _ target: String, headers: [Header], body: [UInt8]?, timeout: Duration
    ) async throws -> HTTPResponse {
        var arguments = arguments(method, target, headers: headers, timeout: timeout)
        if body != nil { arguments += ["--data-binary", "@-"] }
        arguments.append(baseURL + target)
        let input = body ?? []
        let command = arguments
        let output = try await onThread { try runTool("curl", command, input: input, timeout: timeout + .seconds(5)) }
        let (head, rest) = try Self.parseHead(output)
        return HTTPResponse(head: head, body: rest)
    }

    package func openEvents(_ target: String, headers: [Header], receiveBufferSize: Int?) async throws -> EventStream {
        // -N: every byte as it comes.
        let process = try StreamingProcess("curl", ["-N"] + arguments("GET", target, headers: headers, timeout: nil) + [baseURL + target])
        let deadline = ContinuousClock.now + .seconds(10)
        var received: [UInt8] = []
        while true {
            if Self.headEnd(received) != nil {
                let (head, rest) = try Self.parseHead(received)
                return EventStream(head: head, body: CurlEventStreamBody(process: process, first: rest))
            }
            guard let bytes = try await process.take(deadline: deadline) else {
                throw ClientError.closedEarly("a response head from curl; stderr: \(process.stderrText)")
            }
            received += bytes
        }
    }

    static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        return (0...(bytes.count - 4)).first { bytes[$0] == 13 && bytes[$0 + 1] == 10 && bytes[$0 + 2] == 13 && bytes[$0 + 3] == 10 }
    }

    /// The head curl printed with `-i`, and the bytes after it.
    static func parseHead(_ bytes: [UInt8]) throws -> (HTTPHead, [UInt8]) {
        guard let end = headEnd(bytes) else {
            throw ClientError.malformedResponse("no response head in curl's output: \(String(decoding: bytes.prefix(300), as: UTF8.self))")
        }
        let lines = String(decoding: bytes[..<end], as: UTF8.self).components(separatedBy: "\r\n")
        let parts = lines[0].split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw ClientError.malformedResponse("status line \(lines[0].debugDescription)")
        }
        let headers: [Header] = lines.dropFirst().compactMap { line in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (
                String(line[..<colon]).trimmingCharacters(in: .whitespaces),
                String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
            )
        }
        return (HTTPHead(status: status, headers: headers), Array(bytes[(end + 4)...]))
    }
}

/// An event stream's body as curl prints it (already out of its chunks).
final class CurlEventStreamBody: EventStreamBody {
    let process: StreamingProcess
    private let first: Mutex<[UInt8]>

    init(process: StreamingProcess, first: [UInt8]) {
        self.process = process
        self.first = Mutex(first)
    }

    func nextBytes(deadline: ContinuousClock.Instant) async throws -> [UInt8]? {
        let first = self.first.withLock { first in
            defer { first.removeAll() }
            return first
        }
        if !first.isEmpty { return first }
        return try await process.take(deadline: deadline)
    }

    func readAll(deadline: ContinuousClock.Instant) async throws -> [UInt8] {
        var all: [UInt8] = []
        while let bytes = try await nextBytes(deadline: deadline) { all += bytes }
        return all
    }

    func close() { process.terminate() }
}

/// A raw TLS connection through `openssl s_client`, which verifies the server's certificate
/// against `caFile`: bytes written go to the server as they are, inside TLS.
package struct TLSPipe: Sendable {
    package let process: StreamingProcess

    package init(port: Int, caFile: String) throws {
        process = try StreamingProcess(
            "openssl",
            ["s_client", "-quiet", "-connect", "127.0.0.1:\(port)", "-CAfile", caFile, "-verify_return_error", "-verify_ip", "127.0.0.1"])
    }

    package func send(_ bytes: [UInt8]) throws { try process.write(bytes) }

    /// Everything the server sends until it closes the connection (s_client then ends).
    package func readUntilClosed(timeout: Duration = .seconds(10)) async throws -> [UInt8] {
        try await process.readToEnd(timeout: timeout)
    }

    package func close() { process.terminate() }
}
