import Foundation
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Presence where only a socket shows it: a client that vanishes without closing its
/// connection (its network goes away) leaves within the heartbeat interval plus a second.
///
/// The vanishing client is real: `curl` in a network namespace of its own, reaching the server
/// over a veth pair; taking the namespace's end of the pair down drops every packet the server
/// sends it, with no FIN and no RST, as a network that goes away does. Needs root (or
/// CAP_NET_ADMIN) and `ip` and `curl`; skipped without them.
@Suite("Presence over sockets", .serialized)
struct PresenceSocketTests {
    static let available: Bool = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip")
        && FileManager.default.isExecutableFile(atPath: "/usr/bin/curl")

    /// Runs `arguments` (the first is the program) and returns its exit status.
    @discardableResult
    static func run(_ arguments: [String]) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: arguments[0])
        process.arguments = Array(arguments.dropFirst())
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try launchProcess(process)
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// A network namespace joined to this one by a veth pair: this side 10.213.N.1, the
    /// namespace's side 10.213.N.2.
    struct Namespace {
        let name: String
        let subnet: Int

        var inside: String { name + "b" }
        var serverAddress: String { "10.213.\(subnet).1" }

        static func make() throws -> Namespace {
            let subnet = Int(getpid() % 200) + 20
            let namespace = Namespace(name: "prs\(getpid() % 100_000)", subnet: subnet)
            namespace.remove()
            let ip = "/usr/sbin/ip"
            let n = namespace.name
            for command in [
                [ip, "netns", "add", n],
                [ip, "link", "add", n + "a", "type", "veth", "peer", "name", n + "b"],
                [ip, "link", "set", n + "b", "netns", n],
                [ip, "addr", "add", "10.213.\(subnet).1/30", "dev", n + "a"],
                [ip, "link", "set", n + "a", "up"],
                [ip, "netns", "exec", n, ip, "addr", "add", "10.213.\(subnet).2/30", "dev", n + "b"],
                [ip, "netns", "exec", n, ip, "link", "set", n + "b", "up"],
            ] {
                let status = try run(command)
                guard status == 0 else {
                    namespace.remove()
                    throw ServerStartError(description: "\(command.joined(separator: " ")) failed with status \(status)")
                }
            }
            return namespace
        }

        /// The network goes away for whatever runs inside: packets to it are dropped silently.
        func cut() throws {
            try run(["/usr/sbin/ip", "netns", "exec", name, "/usr/sbin/ip", "link", "set", inside, "down"])
        }

        func remove() {
            _ = try? run(["/usr/sbin/ip", "netns", "del", name])
            _ = try? run(["/usr/sbin/ip", "link", "del", name + "a"])
        }
    }

    @Test("a client whose network vanishes leaves within the heartbeat interval plus a second; the others hear it", .enabled(if: available))
    func vanishedClient() async throws {
        let namespace = try Namespace.make()
        defer { namespace.remove() }
        let heartbeat = 2
        try await withServer(arguments: ["--host", "0.0.0.0", "--heartbeat", String(heartbeat)]) { server in
            let session = try await server.api.createSession()
            let (watcher, _) = try await session.subscribe(query: "presence=desk")
            defer { watcher.close() }
            #expect(try await watcher.nextEvent().json?["joined"]?["label"] == "desk")

            // The phone, in the namespace: a real client on a real network path.
            let phone = Process()
            phone.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
            phone.arguments = [
                "netns", "exec", namespace.name, "/usr/bin/curl", "-sN", "-o", "/dev/null",
                "http://\(namespace.serverAddress):\(server.port)\(session.path)/events?presence=phone&access_token=\(session.token)",
            ]
            phone.standardOutput = FileHandle.nullDevice
            phone.standardError = FileHandle.nullDevice
            try launchProcess(phone)
            defer {
                if phone.isRunning { kill(phone.processIdentifier, SIGKILL) }
            }
            let joined = try await watcher.nextEvent()
            #expect(joined.event == "presence" && joined.json?["joined"]?["label"] == "phone", "\(joined)")

            try namespace.cut()
            let cut = ContinuousClock.now
            // Pings are comments: the next event is the phone's `left`.
            let left = try await watcher.nextEvent(timeout: .seconds(60))
            let after = ContinuousClock.now - cut
            #expect(left.event == "presence" && left.json?["left"]?["label"] == "phone", "\(left)")
            // The contract: within the heartbeat interval plus a second (and half a second for
            // a loaded test machine).
            #expect(after < .seconds(heartbeat) + .milliseconds(1500), "the vanished client left after \(after)")
            let present = try await session.request("GET", "/presence")
            #expect(present.json?["present"]?.array?.map { $0["label"] } == ["desk"], "\(present)")
        }
    }
}
