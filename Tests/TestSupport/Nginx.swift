// A real nginx in front of real state-server processes, configured from the repository's own
// template (deploy/nginx/stateserver.conf.template, rendered by deploy/nginx/render.sh --main):
// round robin unless a test asks for hash, no proxy buffering, a long read timeout on event streams. DeploymentTests check
// the proxy itself; PostgresTests' ClusterTests run three nodes on one database behind it.

import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The package's root folder (`Tests/TestSupport/Nginx.swift` → the root).
package let packageRoot: URL = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent()  // TestSupport
    .deletingLastPathComponent()  // Tests
    .deletingLastPathComponent()

/// A finished command.
package struct CommandOutput: Sendable, CustomStringConvertible {
    package var status: Int32
    package var stdout: String
    package var stderr: String
    package var description: String { "exit \(status)\nstdout: \(stdout.suffix(2000))\nstderr: \(stderr.suffix(2000))" }
}

/// Runs a short command to its end, in the test's environment minus any `STATE_SERVER_*`
/// settings, plus `environment`. Standard error goes to a temporary file, so reading standard
/// output to its end cannot deadlock on a full stderr pipe. The waiting happens on a thread of
/// its own: a test blocking Swift's cooperative pool (two threads on two cores) would stall
/// every other test of the process.
package func runCommand(
    _ executable: String, _ arguments: [String], in directory: URL = packageRoot, environment: [String: String] = [:]
) async throws -> CommandOutput {
    try await onThread { try runCommandBlocking(executable, arguments, in: directory, environment: environment) }
}

private func runCommandBlocking(
    _ executable: String, _ arguments: [String], in directory: URL, environment: [String: String]
) throws -> CommandOutput {
    let errorFile = FileManager.default.temporaryDirectory.appendingPathComponent("test-command-\(UUID().uuidString).err")
    guard FileManager.default.createFile(atPath: errorFile.path, contents: nil) else {
        throw CocoaError(.fileWriteUnknown)
    }
    defer { try? FileManager.default.removeItem(at: errorFile) }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    process.currentDirectoryURL = directory
    process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("STATE_SERVER_") }
        .merging(environment) { _, new in new }
    let stdout = Pipe()
    let stderr = try FileHandle(forWritingTo: errorFile)
    defer { try? stderr.close() }
    process.standardOutput = stdout
    process.standardError = stderr
    process.standardInput = FileHandle.nullDevice
    try launchProcess(process)
    let out = stdout.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let err = FileManager.default.contents(atPath: errorFile.path) ?? Data()
    return CommandOutput(
        status: process.terminationStatus,
        stdout: String(decoding: out, as: UTF8.self),
        stderr: String(decoding: err, as: UTF8.self))
}

/// The real nginx (Debian's `nginx` package; `make deps` installs it).
package enum Nginx {
    package struct NotInstalled: Error, CustomStringConvertible {
        package var description: String { "nginx is not installed: run `make deps` (apt-get install nginx-light)" }
    }

    /// `$NGINX_BIN`, else `nginx` on the PATH, else /usr/sbin/nginx.
    package static func locate() throws -> String {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment["NGINX_BIN"], !path.isEmpty { return path }
        let directories = (environment["PATH"] ?? "").split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/local/sbin"]
        for directory in directories {
            let candidate = directory + "/nginx"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw NotInstalled()
    }

    /// deploy/nginx/render.sh's output for these arguments (fails the test when it fails).
    package static func render(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) async throws -> String {
        let output = try await runCommand("/bin/bash", ["deploy/nginx/render.sh"] + arguments)
        try #require(output.status == 0, "render.sh \(arguments): \(output)", sourceLocation: sourceLocation)
        return output.stdout
    }

    /// A fresh prefix folder for a private nginx (`-p`), with the folders the --main form uses.
    package static func makePrefix() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("test-nginx-\(UUID().uuidString)")
        for sub in ["logs", "tmp"] {
            try FileManager.default.createDirectory(at: directory.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        return directory
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
package func freePort() throws -> Int {
    let (fd, port) = try loopbackSocket(listening: false)
    close(fd)
    return port
}

/// Connects the TCP socket `fd` to `port` on 127.0.0.1; the result of `connect` (0, or -1
/// with `errno` set).
package func connectLoopback(_ fd: Int32, port: Int) -> Int32 {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port)).bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return withUnsafePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
}

/// Sends `bytes` from `offset` on the socket `fd` (no SIGPIPE on a closed peer): the count
/// sent, or -1 with `errno` set.
package func sendBytes(_ fd: Int32, _ bytes: [UInt8], from offset: Int) -> Int {
    bytes.withUnsafeBytes { raw in
        guard let base = raw.baseAddress else { return 0 }
        #if canImport(Glibc)
        return Glibc.send(fd, base + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
        #else
        return Darwin.send(fd, base + offset, bytes.count - offset, 0)
        #endif
    }
}

/// A TCP socket bound to 127.0.0.1 on a port the system picks (listening when `listening`),
/// and that port. The caller closes it.
package func loopbackSocket(listening: Bool) throws -> (fd: Int32, port: Int) {
    #if canImport(Glibc)
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
    let fd = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard fd >= 0 else { throw ClientError.system("socket", errno) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ready = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
            bind(fd, raw, length) == 0 && getsockname(fd, raw, &length) == 0 && (!listening || listen(fd, 64) == 0)
        }
    }
    guard ready else {
        let code = errno
        close(fd)
        throw ClientError.system(listening ? "bind/listen" : "bind", code)
    }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

/// A private nginx (`nginx -p DIR -c DIR/nginx.conf -g 'daemon off;'`) with the configuration
/// rendered from deploy/nginx/stateserver.conf.template, listening on a free port of 127.0.0.1
/// in front of the given local ports. `balance` is render.sh's `--balance`: round-robin unless a
/// test asks for hash (the tests count requests per node, which only round robin makes exact).
///
/// `@unchecked Sendable`: `process` is only used for its pid and `isRunning`, which Foundation
/// reads under its own lock; everything else is immutable.
package final class NginxProcess: @unchecked Sendable {
    package let port: Int
    /// The internal listener's port (`/metrics`, `/v1/admin/...`).
    package let internalPort: Int
    package let prefix: URL
    package let output: OutputCollector
    private let process: Process

    package var api: API { API(port: port) }
    /// The internal listener.
    package var internalAPI: API { API(port: internalPort) }
    package var isRunning: Bool { process.isRunning }

    private init(port: Int, internalPort: Int, prefix: URL, process: Process, output: OutputCollector) {
        self.port = port
        self.internalPort = internalPort
        self.prefix = prefix
        self.process = process
        self.output = output
    }

    /// `connectionsPerAddress`: render.sh's `--connections-per-address` (nil: the template's).
    package static func start(
        upstreams: [Int], balance: String = "round-robin", connectionsPerAddress: Int? = nil
    ) async throws -> NginxProcess {
        let binary = try Nginx.locate()
        var lastError = ""
        // Another process may take the free port between our check and nginx's bind: retry.
        for _ in 0..<3 {
            let port = try freePort()
            let internalPort = try freePort()
            let prefix = try Nginx.makePrefix()
            let limit = connectionsPerAddress.map { ["--connections-per-address", String($0)] } ?? []
            let configuration = try await Nginx.render(
                ["--main", "--balance", balance, "--listen", "127.0.0.1:\(port)", "--internal-listen", "127.0.0.1:\(internalPort)"]
                    + limit + upstreams.map { "127.0.0.1:\($0)" })
            let file = prefix.appendingPathComponent("nginx.conf")
            try configuration.write(to: file, atomically: true, encoding: .utf8)
            let (process, output) = try ServerProcess.launch(
                binary, arguments: ["-p", prefix.path, "-c", file.path, "-g", "daemon off;"], environment: [:])
            let nginx = NginxProcess(port: port, internalPort: internalPort, prefix: prefix, process: process, output: output)
            // Ready once nginx wrote its pid file (it does so after binding its sockets): while
            // it retries a bind, the port answers for whoever took it — another test's server.
            let pidFile = prefix.appendingPathComponent("nginx.pid").path
            let ready = try await poll(timeout: .seconds(15), every: .milliseconds(20)) { () -> Bool? in
                if !process.isRunning || output.stderrText.contains("Address already in use") { return false }
                if FileManager.default.fileExists(atPath: pidFile), (try? BlockingSocket(port: port)) != nil { return true }
                return nil
            }
            if ready == true { return nginx }
            await nginx.stop()
            lastError = output.stderrText
            if !lastError.contains("Address already in use") { break }
        }
        throw ServerStartError(description: "nginx did not start: \(lastError)")
    }

    /// SIGTERM (nginx's fast shutdown: the master stops its workers), then SIGKILL after 5 s.
    package func stop() async {
        if process.isRunning { kill(process.processIdentifier, SIGTERM) }
        _ = try? await eventually(timeout: .seconds(5), every: .milliseconds(10)) { !process.isRunning }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        try? FileManager.default.removeItem(at: prefix)
    }
}
