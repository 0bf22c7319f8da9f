import Foundation

/// A temporary directory for one test's files (a database, a config file), removed by
/// `remove()`. One definition for every suite.
package struct TemporaryDirectory: Sendable {
    package let url: URL

    package init(_ label: String = "tests") throws {
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("state-server-\(label)-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    package func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    package func remove() {
        // A test may have made parts of the tree read-only.
        if let paths = FileManager.default.subpaths(atPath: url.path) {
            for sub in paths {
                _ = try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: path(sub))
            }
        }
        try? FileManager.default.removeItem(at: url)
    }
}

/// Runs `body` with a fresh temporary directory, removed afterwards.
package func withTemporaryDirectory<T>(_ body: (TemporaryDirectory) async throws -> T) async throws -> T {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    return try await body(directory)
}
