import Foundation
import Testing

/// What a newcomer relies on: the CI entry, the README's quick start, the ignore list.
@Suite("Repository files")
struct RepositoryFilesTests {
    /// Lines of a shell script or Makefile that are not comments.
    static func commandLines(_ text: String) -> [String] {
        text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
    }

    @Test(".ci/run runs make test")
    func ciRunsMakeTest() throws {
        let script = try Repository.text(".ci/run")
        let runsMakeTest = Self.commandLines(script).contains { line in
            line.components(separatedBy: "&&").contains { words($0) == ["make", "test"] }
        }
        #expect(runsMakeTest, ".ci/run does not call 'make test':\n\(script)")
        #expect(FileManager.default.isExecutableFile(atPath: Repository.url(".ci/run").path), ".ci/run is not executable")
    }

    @Test("the Makefile has the run and test targets the README promises")
    func makefileTargets() throws {
        let makefile = try Repository.text("Makefile")
        let targets = makefile.split(separator: "\n").compactMap { line -> String? in
            guard let colon = line.firstIndex(of: ":"), !line.hasPrefix("\t"), !line.hasPrefix("#") else { return nil }
            let name = line[..<colon]
            return name.contains(" ") || name.contains("=") ? nil : String(name)
        }
        #expect(targets.contains("run"), "targets: \(targets)")
        #expect(targets.contains("test"), "targets: \(targets)")
    }

    @Test("README.md shows the two quick-start commands and links to docs/API.md")
    func readmeQuickStart() throws {
        let readme = try Repository.text("README.md")
        #expect(readme.contains("make run"))
        #expect(readme.contains("make test"))
        #expect(readme.contains("docs/API.md"))
        #expect(FileManager.default.fileExists(atPath: Repository.url("docs/API.md").path), "docs/API.md is missing")
    }

    @Test(".gitignore ignores .build/ and Package.resolved")
    func gitignore() throws {
        let patterns = Set(Self.commandLines(try Repository.text(".gitignore")))
        #expect(!patterns.isDisjoint(with: [".build/", ".build", "/.build/", "/.build"]), "patterns: \(patterns.sorted())")
        #expect(!patterns.isDisjoint(with: ["Package.resolved", "/Package.resolved"]), "patterns: \(patterns.sorted())")
    }
}
