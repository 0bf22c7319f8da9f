import Foundation
import TestSupport
import Testing

/// deploy/nginx: the template renders, nginx accepts it, and it carries what SSE, retries and
/// the body limit need.
@Suite("nginx configuration")
struct NginxConfigTests {
    /// The directives of the rendered configuration, one per entry, without comments.
    static func directives(_ text: String) -> [String] {
        text.split(separator: "\n").map { line in
            let code = line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            return code.trimmingCharacters(in: .whitespaces)
        }.filter { !$0.isEmpty }
    }

    @Test("deploy/nginx/stateserver.conf is the template rendered for compose's node1..node3")
    func committedRendering() async throws {
        let rendered = try await Nginx.render(["--listen", "8080", "node1:8080", "node2:8080", "node3:8080"])
        let committed = try Repository.text("deploy/nginx/stateserver.conf")
        #expect(committed == rendered, "re-render it: deploy/nginx/render.sh --listen 8080 node1:8080 node2:8080 node3:8080 > deploy/nginx/stateserver.conf")
    }

    @Test("nginx -t accepts the rendered configuration", arguments: ["hash", "round-robin"])
    func nginxAccepts(balance: String) async throws {
        let prefix = try Nginx.makePrefix()
        defer { try? FileManager.default.removeItem(at: prefix) }
        let configuration = try await Nginx.render(["--main", "--balance", balance, "--listen", "127.0.0.1:\(try freePort())", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"])
        let result = try await Nginx.test(configuration: configuration, prefix: prefix)
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.contains("test is successful"), "\(result)")
    }

    @Test("render.sh refuses a node that is not host:port (nothing can be injected into the file)")
    func renderRefusesJunk() async throws {
        for node in ["node1", "a:1; include /etc/passwd", "a:1\nb:2", ""] {
            let output = try await runCommand("/bin/bash", ["deploy/nginx/render.sh", node])
            #expect(output.status != 0 && output.stdout.isEmpty, "render.sh accepted \(node.debugDescription): \(output)")
        }
        for balance in ["least_conn", "ip_hash", ""] {
            let output = try await runCommand("/bin/bash", ["deploy/nginx/render.sh", "--balance", balance, "a:1"])
            #expect(output.status != 0 && output.stdout.isEmpty, "render.sh accepted --balance \(balance.debugDescription): \(output)")
        }
    }

    @Test("SSE: no buffering, no cache, HTTP/1.1 keep-alive to the nodes, a long read timeout for streams")
    func sseSettings() async throws {
        let lines = Self.directives(try await Nginx.render(["--listen", "8080", "a:1"]))
        for required in [
            "proxy_http_version 1.1;", "proxy_set_header Connection \"\";", "proxy_buffering off;", "proxy_cache off;",
            "proxy_read_timeout 1h;", "location ~ ^/v1/sessions/[^/]+/events$ {", "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
        ] {
            #expect(lines.contains(required), "missing \(required)")
        }
        #expect(lines.contains { $0.hasPrefix("keepalive ") }, "no upstream keepalive")
    }

    @Test("the forwarding header and its MAC are cleared at the server level, and no location sets headers of its own (that would drop them)", arguments: ["hash", "round-robin"])
    func forwardingHeadersCleared(balance: String) async throws {
        let lines = Self.directives(try await Nginx.render(["--balance", balance, "--listen", "8080", "a:1"]))
        let server = Array(lines.drop { $0 != "server {" })
        var depth = 0
        var atServerLevel: [String] = []
        var inLocations: [String] = []
        for line in server.dropFirst() {
            if line.hasSuffix("{") { depth += 1 } else if line == "}" { if depth == 0 { break }; depth -= 1 }
            if depth == 0 { atServerLevel.append(line) } else { inLocations.append(line) }
        }
        for header in ["StateServer-Forwarded", "StateServer-Forwarded-MAC"] {
            #expect(atServerLevel.contains("proxy_set_header \(header) \"\";"), "\(balance): \(header) is not cleared: \(atServerLevel)")
        }
        #expect(!inLocations.contains { $0.hasPrefix("proxy_set_header") }, "\(balance): a location sets its own headers: \(inLocations)")
    }

    /// The directives of the upstream block, in order.
    static func upstream(_ lines: [String]) -> [String] {
        Array(lines.drop { $0 != "upstream stateserver {" }.dropFirst().prefix { $0 != "}" })
    }

    @Test("round robin (--balance round-robin) with passive health checks; retries never re-send a POST")
    func balancing() async throws {
        let lines = Self.directives(try await Nginx.render(["--balance", "round-robin", "--listen", "8080", "a:1", "b:2"]))
        let servers = lines.filter { $0.hasPrefix("server ") && $0.hasSuffix(";") }
        #expect(servers == ["server a:1 max_fails=2 fail_timeout=10s;", "server b:2 max_fails=2 fail_timeout=10s;"], "\(servers)")
        // No other balancing method than round robin, and no session map.
        #expect(!lines.contains { ["least_conn", "ip_hash", "hash ", "random", "map "].contains(where: $0.hasPrefix) }, "\(lines)")
        #expect(!lines.contains { $0.contains("@HASH@") || $0.contains("@ROUND_ROBIN@") }, "a marker was left: \(lines)")
        #expect(lines.contains("proxy_next_upstream error timeout;"))
        #expect(!lines.contains { $0.contains("non_idempotent") }, "POST must not be retried on another node once sent")
    }

    @Test("by default, consistent hashing on the session id of the path (issue 15); requests without one spread by $request_id")
    func hashBySession() async throws {
        for arguments in [["--listen", "8080", "a:1", "b:2"], ["--balance", "hash", "--listen", "8080", "a:1", "b:2"]] {
            let lines = Self.directives(try await Nginx.render(arguments))
            #expect(!lines.contains { $0.contains("@HASH@") || $0.contains("@ROUND_ROBIN@") }, "a marker was left: \(lines)")
            let sessionMap = Array(lines.drop { $0 != "map $uri $stateserver_session {" }.prefix { $0 != "}" })
            #expect(sessionMap == ["map $uri $stateserver_session {", "~^/v1/sessions/([^/]+) $1;", "default $request_id;"], "\(arguments): \(sessionMap)")
            // The method comes before keepalive (nginx requires it), and it is the only one.
            let upstream = Self.upstream(lines)
            #expect(upstream.first == "hash $stateserver_session consistent;", "\(arguments): \(upstream)")
            #expect(upstream.filter { ["least_conn", "ip_hash", "hash ", "random"].contains(where: $0.hasPrefix) }.count == 1, "\(upstream)")
            let servers = upstream.filter { $0.hasPrefix("server ") }
            #expect(servers == ["server a:1 max_fails=2 fail_timeout=10s;", "server b:2 max_fails=2 fail_timeout=10s;"], "\(servers)")
            #expect(lines.contains("proxy_next_upstream error timeout;"))
            #expect(!lines.contains { $0.contains("non_idempotent") }, "POST must not be retried on another node once sent")
        }
    }

    @Test("client_max_body_size lets the server's own 413 through (at or above its bodyLimit)")
    func bodyLimit() async throws {
        let lines = Self.directives(try await Nginx.render(["--listen", "8080", "a:1"]))
        let size = try #require(lines.first { $0.hasPrefix("client_max_body_size ") }?.dropFirst("client_max_body_size ".count).dropLast())
        let bytes: Int? =
            if size.hasSuffix("k") { Int(size.dropLast()).map { $0 * 1024 } }
            else if size.hasSuffix("m") { Int(size.dropLast()).map { $0 * 1024 * 1024 } }
            else { Int(size) }
        let limit = try #require(bytes, "client_max_body_size \(size)")
        let binary = try #require(ServerBinary.locate())
        let printed = try await runCommand(binary, ["--print-config"])
        let config = try #require(try JSONSerialization.jsonObject(with: Data(printed.stdout.utf8)) as? [String: Any], "\(printed)")
        let serverLimit = try #require(config["bodyLimit"] as? Int)
        #expect(limit >= serverLimit && limit <= 4 * serverLimit, "nginx \(limit) bytes, server \(serverLimit)")
    }
}
