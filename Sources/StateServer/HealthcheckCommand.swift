import ArgumentParser
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `state-server healthcheck`: asks a running server whether it is ready — `GET /readyz` on the
/// host and port the settings give (the same flags, environment and config file as the server
/// reads, so `STATE_SERVER_PORT` in a container is followed) — and exits 0 when it answers 200,
/// 1 otherwise. The Docker image's HEALTHCHECK and deploy/compose.yaml use it, so the runtime
/// image needs no curl. With `tls.cert` set it speaks HTTPS and accepts only the certificate in
/// that file (HealthProbe+TLS.swift).
struct HealthcheckCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "healthcheck",
        abstract: "Exit 0 when the server on the configured host and port answers GET /readyz with 200, else 1.",
        discussion: """
            The host and port come from the same places as the server's: the server's --host, \
            --port and --config (`state-server healthcheck --port 9000`), STATE_SERVER_HOST and \
            STATE_SERVER_PORT, the file given by --config or STATE_SERVER_CONFIG. A wildcard host \
            (0.0.0.0, ::) is asked on loopback. When the server serves HTTPS (tls.cert and tls.key, \
            or --tls-cert and --tls-key), so does the check, and it accepts only the certificate \
            in the tls.cert file.
            """)

    /// `--host`, `--port` and `--config` are the server command's own: ArgumentParser gives an
    /// option to the command that declares it, wherever it stands on the line.
    @ParentCommand var server: StateServerCommand

    @Option(help: "The route to ask: /readyz (ready to serve) or /healthz (the process answers).")
    var path = "/readyz"

    @Option(help: "Seconds to wait for the connection and for each read.")
    var timeout = 3.0

    func run() async throws {
        var flags = FlagValues()
        flags.set(HTTPSettings.host, server.host)
        flags.set(HTTPSettings.port, server.port)
        flags.set(TLSSettings.certificate, server.tlsCert)
        flags.set(TLSSettings.key, server.tlsKey)
        let file = server.config ?? ProcessInfo.processInfo.environment["STATE_SERVER_CONFIG"]
        let settings: ServerSettings
        do {
            settings = try ServerSettings(try await Settings.reader(flags: flags, file: file), features: HostedFeatures.settings)
        } catch {
            throw ValidationError("\(error)")
        }
        let target = HealthProbe.Target(host: settings.http.server.host, port: settings.http.server.port)
        guard target.port > 0 else {
            throw ValidationError("the server's port is 0 (a free one, printed at start): give it with --port")
        }
        var pinned: HealthProbe.PinnedCertificate?
        if settings.tls.isEnabled {
            do {
                pinned = try HealthProbe.PinnedCertificate(
                    pem: try TLSSettings.read(settings.tls.certificatePath, setting: TLSSettings.certificate.key))
            } catch {
                FileHandle.standardError.write(Data("healthcheck: \(error)\n".utf8))
                throw ExitCode(1)
            }
        }
        let url = "\(pinned == nil ? "http" : "https")://\(target.displayHost):\(target.port)\(path)"
        switch HealthProbe.status(of: target, path: path, timeout: timeout, pinned: pinned) {
        case .success(200):
            print("\(url): 200")
        case .success(let status):
            FileHandle.standardError.write(Data("healthcheck: \(url) answered \(status)\n".utf8))
            throw ExitCode(1)
        case .failure(let problem):
            // A port that serves HTTPS closes a plain request's connection unanswered.
            let hint = pinned == nil && problem.message.contains("without a reply")
                ? " (a server with tls.cert and tls.key speaks HTTPS only: give the healthcheck the same settings)" : ""
            FileHandle.standardError.write(Data("healthcheck: \(url): \(problem.message)\(hint)\n".utf8))
            throw ExitCode(1)
        }
    }
}

/// One `GET` over a plain socket (Foundation's URLSession would need libcurl in the image).
enum HealthProbe {
    struct Target {
        /// The address to connect to: a wildcard listen address becomes loopback.
        let host: String
        let port: Int

        init(host: String, port: Int) {
            switch host {
            case "", "0.0.0.0", "*": self.host = "127.0.0.1"
            case "::", "[::]": self.host = "::1"
            default: self.host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
            }
            self.port = port
        }

        var displayHost: String { host.contains(":") ? "[\(host)]" : host }
    }

    struct Problem: Error {
        let message: String
    }

    /// The status code of `GET path` on `target` (over TLS when `pinned`, accepting only that
    /// certificate), or why there is none.
    static func status(of target: Target, path: String, timeout: Double, pinned: PinnedCertificate? = nil) -> Result<Int, Problem> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>?
        let resolved = getaddrinfo(target.host, String(target.port), &hints, &found)
        guard resolved == 0, let first = found else {
            return .failure(Problem(message: "cannot resolve \(target.host): \(String(cString: gai_strerror(resolved)))"))
        }
        defer { freeaddrinfo(first) }
        var problem = Problem(message: "no address for \(target.host)")
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let address = entry {
            entry = address.pointee.ai_next
            let fd = socket(address.pointee.ai_family, address.pointee.ai_socktype, address.pointee.ai_protocol)
            guard fd >= 0 else {
                problem = Problem(message: "socket: \(String(cString: strerror(errno)))")
                continue
            }
            defer { close(fd) }
            // On Linux the send timeout also bounds connect().
            var limit = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1_000_000))
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            guard connect(fd, address.pointee.ai_addr, address.pointee.ai_addrlen) == 0 else {
                problem = Problem(message: "cannot connect: \(String(cString: strerror(errno)))")
                continue
            }
            let request = "GET \(path) HTTP/1.1\r\nHost: \(target.displayHost):\(target.port)\r\nConnection: close\r\n\r\n"
            if let pinned { return exchangeTLS(fd, request: request, pinned: pinned, timeout: timeout) }
            return exchange(
                request: request,
                send: { bytes in
                    let count = send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
                    return count > 0 ? .success(count) : .failure(Problem(message: "cannot send: \(String(cString: strerror(errno)))"))
                },
                receive: { buffer in
                    let count = recv(fd, buffer.baseAddress, buffer.count, 0)
                    return count >= 0 ? .success(count) : .failure(Problem(message: "no reply: \(String(cString: strerror(errno)))"))
                })
        }
        return .failure(problem)
    }

    /// Sends the request and reads the status line of the reply, through `send` and `receive`
    /// (bytes sent or received, 0 at the end of the reply).
    static func exchange(
        request: String, send: (UnsafeRawBufferPointer) -> Result<Int, Problem>,
        receive: (UnsafeMutableRawBufferPointer) -> Result<Int, Problem>
    ) -> Result<Int, Problem> {
        let bytes = Array(request.utf8)
        var sent = 0
        while sent < bytes.count {
            switch bytes[sent...].withUnsafeBytes(send) {
            case .success(let count): sent += count
            case .failure(let problem): return .failure(problem)
            }
        }
        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        reading: while !reply.contains(UInt8(ascii: "\n")) && reply.count < 8192 {
            switch buffer.withUnsafeMutableBytes(receive) {
            case .failure(let problem): return .failure(problem)
            case .success(0): break reading
            case .success(let count): reply += buffer[..<count]
            }
        }
        // "HTTP/1.1 200 OK"
        let line = String(decoding: reply.prefix { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        let parts = line.split(separator: " ")
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/"), let status = Int(parts[1]) else {
            return .failure(Problem(message: reply.isEmpty ? "the connection closed without a reply" : "not an HTTP reply: \(line)"))
        }
        return .success(status)
    }
}
