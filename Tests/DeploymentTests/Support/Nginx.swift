import Foundation
import HTTPTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The real nginx (Debian's `nginx` package; `make deps` installs it).
enum Nginx {
    struct NotInstalled: Error, CustomStringConvertible {
        var description: String { "nginx is not installed: run `make deps` (apt-get install nginx-light)" }
    }

    /// `$NGINX_BIN`, else `nginx` on the PATH, else /usr/sbin/nginx.
    static func locate() throws -> String {
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
    static func render(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let output = try runCommand("/bin/bash", ["deploy/nginx/render.sh"] + arguments)
        try #require(output.status == 0, "render.sh \(arguments): \(output)", sourceLocation: sourceLocation)
        return output.stdout
    }

    /// A fresh prefix folder for a private nginx (`-p`), with the folders the --main form uses.
    static func makePrefix() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("deploy-nginx-\(UUID().uuidString)")
        for sub in ["logs", "tmp"] {
            try FileManager.default.createDirectory(at: directory.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        return directory
    }

    /// `nginx -t` on a complete configuration written into `prefix`.
    static func test(configuration: String, prefix: URL) throws -> CommandOutput {
        let file = prefix.appendingPathComponent("nginx.conf")
        try configuration.write(to: file, atomically: true, encoding: .utf8)
        return try runCommand(try locate(), ["-t", "-p", prefix.path, "-c", file.path])
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
func freePort() throws -> Int {
    #if canImport(Glibc)
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
    let fd = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard fd >= 0 else { throw ClientError.system("socket", errno) }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
            bind(fd, raw, length) == 0 && getsockname(fd, raw, &length) == 0
        }
    }
    guard bound else { throw ClientError.system("bind", errno) }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// A private nginx (`nginx -p DIR -c DIR/nginx.conf -g 'daemon off;'`) with the configuration
/// rendered from deploy/nginx/stateserver.conf.template, listening on a free port of 127.0.0.1
/// in front of the given local ports.
///
/// `@unchecked Sendable`: `process` is only used for its pid and `isRunning`, which Foundation
/// reads under its own lock; everything else is immutable.
final class NginxProcess: @unchecked Sendable {
    let port: Int
    let prefix: URL
    let output: OutputCollector
    private let process: Process

    var api: API { API(port: port) }
    var isRunning: Bool { process.isRunning }

    private init(port: Int, prefix: URL, process: Process, output: OutputCollector) {
        self.port = port
        self.prefix = prefix
        self.process = process
        self.output = output
    }

    static func start(upstreams: [Int]) async throws -> NginxProcess {
        let binary = try Nginx.locate()
        var lastError = ""
        // Another process may take the free port between our check and nginx's bind: retry.
        for _ in 0..<3 {
            let port = try freePort()
            let prefix = try Nginx.makePrefix()
            let configuration = try Nginx.render(
                ["--main", "--listen", "127.0.0.1:\(port)"] + upstreams.map { "127.0.0.1:\($0)" })
            let file = prefix.appendingPathComponent("nginx.conf")
            try configuration.write(to: file, atomically: true, encoding: .utf8)
            let (process, output) = try ServerProcess.launch(
                binary, arguments: ["-p", prefix.path, "-c", file.path, "-g", "daemon off;"], environment: [:])
            let nginx = NginxProcess(port: port, prefix: prefix, process: process, output: output)
            let deadline = ContinuousClock.now + .seconds(15)
            while process.isRunning, ContinuousClock.now < deadline {
                if (try? BlockingSocket(port: port)) != nil { return nginx }
                try await Task.sleep(for: .milliseconds(20))
            }
            await nginx.stop()
            lastError = output.stderrText
            if !lastError.contains("Address already in use") { break }
        }
        throw ServerStartError(description: "nginx did not start: \(lastError)")
    }

    /// SIGTERM (nginx's fast shutdown: the master stops its workers), then SIGKILL after 5 s.
    func stop() async {
        if process.isRunning { kill(process.processIdentifier, SIGTERM) }
        let deadline = ContinuousClock.now + .seconds(5)
        while process.isRunning, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        try? FileManager.default.removeItem(at: prefix)
    }
}

/// Runs `body` with `nodes` state-servers (memory storage) behind one nginx, and stops them all.
func withCluster<T>(
    nodes: Int = 1, _ body: (_ nginx: NginxProcess, _ servers: [ServerProcess]) async throws -> T
) async throws -> T {
    var servers: [ServerProcess] = []
    var nginx: NginxProcess?
    func stopAll() async {
        await nginx?.stop()
        for server in servers { await server.stop() }
    }
    do {
        for _ in 0..<nodes {
            servers.append(try await ServerProcess.start(arguments: ["--storage", "memory"]))
        }
        let proxy = try await NginxProcess.start(upstreams: servers.map(\.port))
        nginx = proxy
        let result = try await body(proxy, servers)
        await stopAll()
        return result
    } catch {
        await stopAll()
        throw error
    }
}
