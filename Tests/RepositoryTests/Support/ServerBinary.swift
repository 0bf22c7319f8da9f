import Foundation
import TestSupport
import Testing

// `ServerBinary.locate()` (TestSupport) finds the built `state-server` executable:
// `STATE_SERVER_BIN`, else the file next to this test bundle in the build folder (this target
// depends on the executable, so it is built first), else `.build/debug/state-server` under the
// repository root.
extension ServerBinary {
    typealias Output = CommandOutput

    struct NotFound: Error, CustomStringConvertible {
        var description: String {
            "the state-server binary was not found: build it (swift build) or set STATE_SERVER_BIN"
        }
    }

    /// Runs the binary with `arguments` from the repository root, with no `STATE_SERVER_*`
    /// variables in its environment but `environment` (so only flags, the given file, those
    /// variables and defaults count). It runs to its end on a thread of its own (`runCommand`).
    static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> Output {
        guard let path = locate() else { throw NotFound() }
        return try await runCommand(path, arguments, in: Repository.root, environment: environment)
    }

    /// The JSON object printed by `--print-config` with `extra` arguments.
    static func printedConfig(_ extra: [String] = []) async throws -> [String: Any] {
        let output = try await run(["--print-config"] + extra)
        try #require(output.status == 0, "state-server --print-config \(extra) exited \(output.status): \(output.stderr)")
        let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8))
        return try #require(object as? [String: Any], "--print-config did not print a JSON object: \(output.stdout)")
    }
}
