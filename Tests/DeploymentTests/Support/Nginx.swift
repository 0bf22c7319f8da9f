import Foundation
import TestSupport

// nginx itself (`Nginx`, `NginxProcess`, `freePort`) lives in TestSupport, shared with
// PostgresTests' ClusterTests.

extension Nginx {
    /// `nginx -t` on a complete configuration written into `prefix`.
    static func test(configuration: String, prefix: URL) async throws -> CommandOutput {
        let file = prefix.appendingPathComponent("nginx.conf")
        try configuration.write(to: file, atomically: true, encoding: .utf8)
        return try await runCommand(try locate(), ["-t", "-p", prefix.path, "-c", file.path])
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
