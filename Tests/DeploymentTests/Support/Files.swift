import Foundation
import Testing
import Yams

/// The repository's files, found from this source file's path
/// (`Tests/DeploymentTests/Support/Files.swift` → the package root).
enum Repository {
    static let root: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // Support
        .deletingLastPathComponent()  // DeploymentTests
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()

    static func url(_ path: String) -> URL { root.appendingPathComponent(path) }

    static func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: url(path).path) }

    /// The text of a file at `path` (relative to the root).
    static func text(_ path: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let data = try #require(FileManager.default.contents(atPath: url(path).path), "\(path) is missing", sourceLocation: sourceLocation)
        return String(decoding: data, as: UTF8.self)
    }

    /// Every YAML document of a file, parsed (Yams: anchors and merge keys resolved).
    static func yamlDocuments(_ path: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> [[String: Any]] {
        let text = try text(path, sourceLocation: sourceLocation)
        var documents: [[String: Any]] = []
        for document in try Yams.load_all(yaml: text) {
            documents.append(try #require(document as? [String: Any], "\(path): a document is not a mapping", sourceLocation: sourceLocation))
        }
        return documents
    }
}

/// A finished command.
struct CommandOutput: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String
    var description: String { "exit \(status)\nstdout: \(stdout.suffix(2000))\nstderr: \(stderr.suffix(2000))" }
}

/// Runs a short command to its end. Standard error goes to a temporary file, so reading
/// standard output to its end cannot deadlock on a full stderr pipe.
func runCommand(_ executable: String, _ arguments: [String], in directory: URL = Repository.root) throws -> CommandOutput {
    let errorFile = FileManager.default.temporaryDirectory.appendingPathComponent("deploy-tests-\(UUID().uuidString).err")
    guard FileManager.default.createFile(atPath: errorFile.path, contents: nil) else {
        throw CocoaError(.fileWriteUnknown)
    }
    defer { try? FileManager.default.removeItem(at: errorFile) }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    process.currentDirectoryURL = directory
    process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("STATE_SERVER_") }
    let stdout = Pipe()
    let stderr = try FileHandle(forWritingTo: errorFile)
    defer { try? stderr.close() }
    process.standardOutput = stdout
    process.standardError = stderr
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let out = stdout.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let err = FileManager.default.contents(atPath: errorFile.path) ?? Data()
    return CommandOutput(
        status: process.terminationStatus,
        stdout: String(decoding: out, as: UTF8.self),
        stderr: String(decoding: err, as: UTF8.self))
}

/// Nested lookups in parsed YAML.
extension Dictionary where Key == String, Value == Any {
    func map(_ key: String) -> [String: Any]? { self[key] as? [String: Any] }
    func list(_ key: String) -> [Any]? { self[key] as? [Any] }
    func string(_ key: String) -> String? {
        switch self[key] {
        case let value as String: value
        case let value as Int: String(value)
        case let value as Bool: String(value)
        default: nil
        }
    }
}
