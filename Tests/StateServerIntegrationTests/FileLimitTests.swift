import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The open-file limit at start-up: the server raises the soft limit toward the hard one;
/// `http.connectionLimit: 0` (the default) takes what fits, silently; a limit set by the user is
/// kept, raised for where the process may, and otherwise warned about, saying what to do.
/// The server runs under `prlimit` (util-linux) with a small limit; as root, also as `nobody`
/// through `setpriv`, which may not raise a hard limit (no CAP_SYS_RESOURCE).
private let fileLimitToolsPresent = FileManager.default.isExecutableFile(atPath: "/usr/bin/prlimit")
    && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")

@Suite("Open-file limit at start-up", .enabled(if: fileLimitToolsPresent))
struct FileLimitTests {
    static let warning = "open-file limit too low for http.connectionLimit"

    /// Starts the server under `prlimit --nofile=SOFT:HARD` (and `setpriv` to `nobody` when
    /// `unprivileged` and root), waits for its `listening on` log line (logged after the
    /// file-limit check, from the same queue) and returns its stderr and its soft and hard
    /// open-file limits, read from /proc.
    private func start(soft: Int, hard: Int, connectionLimit: Int?, unprivileged: Bool) async throws
        -> (stderr: String, soft: Int, hard: Int)
    {
        let binary = try #require(ServerBinary.locate())
        var command = ["/usr/bin/prlimit", "--nofile=\(soft):\(hard)", binary, "--host", "127.0.0.1", "--port", "0", "--storage", "memory"]
        if unprivileged && getuid() == 0 {
            command = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + command
        }
        let (process, output) = try ServerProcess.launch(
            command[0], arguments: Array(command.dropFirst()),
            environment: connectionLimit.map { ["STATE_SERVER_HTTP_CONNECTION_LIMIT": String($0)] } ?? [:])
        defer {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        let listening = try await poll(timeout: .seconds(30), every: .milliseconds(10)) { () -> Bool? in
            if output.stderrText.contains("listening on http://127.0.0.1:") { return true }
            return process.isRunning ? nil : false
        }
        guard listening == true else {
            Issue.record("no 'listening on' log line; stderr: \(output.stderrText)")
            return (output.stderrText, -1, -1)
        }
        // prlimit and setpriv exec the server: the pid is the server's.
        let limits = try String(contentsOfFile: "/proc/\(process.processIdentifier)/limits", encoding: .utf8)
        let line = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max open files") })
        let numbers = line.split(separator: " ").compactMap { Int($0) }
        try #require(numbers.count == 2, "\(line)")
        return (output.stderrText, numbers[0], numbers[1])
    }

    /// Whether this process (and so the server it starts) has CAP_SYS_RESOURCE, which allows
    /// raising a hard limit: bit 24 of `CapEff` in /proc/self/status.
    static var mayRaiseHardLimit: Bool {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("CapEff:") }),
            let mask = UInt64(line.dropFirst("CapEff:".count).trimmingCharacters(in: .whitespaces), radix: 16)
        else { return false }
        return mask & (1 << 24) != 0
    }

    /// Whether the server logged a warning. Under AddressSanitizer (make test-sanitized) its
    /// allocator replaces glibc's, and the warning that `mallopt` refused its settings is expected.
    static func warns(_ stderr: String) -> Bool {
        stderr.split(separator: "\n").contains { line in
            line.contains("warning") && !(sanitizedWaitScale > 1 && line.contains("the allocator refused its settings"))
        }
    }

    /// The connection limit the `listening on` line reports.
    static func connectionLimit(in stderr: String) -> Int? {
        guard let line = stderr.split(separator: "\n").first(where: { $0.contains("listening on") }),
            let range = line.range(of: "http.connectionLimit=")
        else { return nil }
        return Int(line[range.upperBound...].prefix { $0.isNumber })
    }

    @Test("the default (0) fits the connection limit to a low limit, with no warning")
    func automaticLowLimit() async throws {
        let result = try await start(soft: 256, hard: 256, connectionLimit: nil, unprivileged: true)
        #expect(result.soft == 256)
        #expect(!Self.warns(result.stderr), "\(result.stderr)")
        #expect(Self.connectionLimit(in: result.stderr) == 256 - 64, "\(result.stderr)")
    }

    @Test("the default (0) raises the soft limit to the hard one and takes what fits, at most 20000")
    func automaticRaised() async throws {
        let low = try await start(soft: 128, hard: 4096, connectionLimit: 0, unprivileged: true)
        #expect(low.soft == 4096, "\(low)")
        #expect(!Self.warns(low.stderr), "\(low.stderr)")
        #expect(Self.connectionLimit(in: low.stderr) == 4096 - 64, "\(low.stderr)")

        // A hard limit above 20000 + 64 where this process may set one (CAP_SYS_RESOURCE), else
        // this process's own hard limit.
        var own = rlimit()
        try #require(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &own) == 0)
        let hard = Self.mayRaiseHardLimit ? 65536 : Int(min(own.rlim_max, 1 << 20))
        let high = try await start(soft: 1024, hard: hard, connectionLimit: nil, unprivileged: !Self.mayRaiseHardLimit)
        #expect(high.soft == hard, "\(high)")
        #expect(Self.connectionLimit(in: high.stderr) == min(20_000, hard - 64), "\(high.stderr)")
        #expect(!Self.warns(high.stderr), "\(high.stderr)")
    }

    @Test("a soft limit below the need is raised to the hard limit, silently")
    func softRaised() async throws {
        let result = try await start(soft: 128, hard: 4096, connectionLimit: 1000, unprivileged: true)
        #expect(result.soft == 4096)
        #expect(!result.stderr.contains(Self.warning), "\(result.stderr)")
    }

    @Test("a hard limit below the need: raised where allowed, else a warning that says what to do")
    func hardTooLow() async throws {
        let result = try await start(soft: 256, hard: 256, connectionLimit: 1000, unprivileged: false)
        if Self.mayRaiseHardLimit {
            // A process with CAP_SYS_RESOURCE may raise its hard limit: connections plus the
            // server's own files, no warning.
            #expect(result.soft >= 1000 + 64 && result.hard >= 1000 + 64, "\(result)")
            #expect(!result.stderr.contains(Self.warning), "\(result.stderr)")
        } else {
            #expect(result.stderr.contains(Self.warning), "\(result.stderr)")
        }
    }

    @Test("a warning names the limit, what is needed, and the connection limit that would fit")
    func warningSaysWhatToDo() async throws {
        let result = try await start(soft: 256, hard: 256, connectionLimit: 1000, unprivileged: true)
        #expect(result.soft == 256)
        let line = try #require(result.stderr.split(separator: "\n").first { $0.contains(Self.warning) }, "\(result.stderr)")
        #expect(line.contains("ulimit -n"))
        #expect(line.contains("nofile=256"))
        #expect(line.contains("nofile.needed=1064"))
        #expect(line.contains("http.connectionLimit=1000"))
        #expect(line.contains("http.connectionLimit.fitting=192"))
    }
}
