import Foundation
import TestSupport
import Testing
import Yams

/// The repository's files, under TestSupport's `packageRoot`.
enum Repository {
    static let root: URL = packageRoot

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

// `runCommand` and `CommandOutput` come from TestSupport (run in the package root).

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
