import Foundation

/// The repository's files, found from this source file's path
/// (`Tests/RepositoryTests/Support/Repository.swift` → the package root).
enum Repository {
    static let root: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // Support
        .deletingLastPathComponent()  // RepositoryTests
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()

    static func url(_ path: String) -> URL {
        root.appendingPathComponent(path)
    }

    /// Whether a file or folder exists at `path` (relative to the root).
    static func exists(_ path: String) -> Bool {
        FileManager.default.fileExists(atPath: url(path).path)
    }

    /// The text of a file at `path` (relative to the root).
    static func text(_ path: String) throws -> String {
        let url = url(path)
        guard let data = FileManager.default.contents(atPath: url.path) else {
            throw MissingFile(path: path, lookedAt: url.path)
        }
        return String(decoding: data, as: UTF8.self)
    }

    struct MissingFile: Error, CustomStringConvertible {
        let path: String
        let lookedAt: String
        var description: String { "\(path) is missing (looked at \(lookedAt))" }
    }
}

/// Splits shell-like text into words on whitespace.
func words<S: StringProtocol>(_ text: S) -> [String] {
    String(text).split(whereSeparator: { (character: Character) in character.isWhitespace }).map(String.init)
}
