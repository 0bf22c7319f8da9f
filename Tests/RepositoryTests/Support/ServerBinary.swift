import Foundation
import TestSupport
import Testing

// `ServerBinary.locate()` (TestSupport) finds the built `state-server` executable:
// `STATE_SERVER_BIN`, else the file next to this test bundle in the build folder (this target
// depends on the executable, so it is built first), else `.build/debug/state-server` under the
// repository root.
extension ServerBinary {
    struct Output {
        let status: Int32
        let stdout: String
        let stderr: String
    }

    struct NotFound: Error, CustomStringConvertible {
        var description: String {
            "the state-server binary was not found: build it (swift build) or set STATE_SERVER_BIN"
        }
    }

    /// Runs the binary with `arguments` from the repository root, with no `STATE_SERVER_*`
    /// variables in its environment but `environment` (so only flags, the given file, those
    /// variables and defaults count).
    static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> Output {
        guard let path = locate() else { throw NotFound() }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.currentDirectoryURL = Repository.root
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("STATE_SERVER_") }
            .merging(environment) { _, new in new }
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        // --print-config output is small: reading to the end before waiting cannot deadlock.
        let out = stdout.fileHandleForReading.readDataToEndOfFile()
        let err = stderr.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Output(
            status: process.terminationStatus,
            stdout: String(decoding: out, as: UTF8.self),
            stderr: String(decoding: err, as: UTF8.self))
    }

    /// The JSON object printed by `--print-config` with `extra` arguments.
    static func printedConfig(_ extra: [String] = []) throws -> [String: Any] {
        let output = try run(["--print-config"] + extra)
        try #require(output.status == 0, "state-server --print-config \(extra) exited \(output.status): \(output.stderr)")
        let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8))
        return try #require(object as? [String: Any], "--print-config did not print a JSON object: \(output.stdout)")
    }
}
