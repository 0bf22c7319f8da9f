import Foundation
import Testing

/// The README stays short and true: its project layout is the tree's folders, its list of
/// `make test` steps is scripts/test.sh's, and its links (and the docs') lead somewhere.
@Suite("README")
struct ReadmeTests {
    let readme: String

    init() throws {
        readme = try Repository.text("README.md")
    }

    /// The lines of the section under `## title`, up to the next `## `.
    static func section(_ title: String, of text: String) -> [Substring] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(where: { $0 == "## \(title)" }) else { return [] }
        let rest = lines[(start + 1)...]
        let end = rest.firstIndex { $0.hasPrefix("## ") } ?? rest.endIndex
        return Array(rest[..<end])
    }

    /// The folders (`Sources/StateJSON/`) and files (`Package.swift`) the layout block names.
    /// An entry is the first column of a line (up to two spaces), which may name several
    /// (`CSQLite/, CGnuTLS/`); an indented entry is inside the last unindented folder.
    static func layoutEntries(_ section: [Substring]) -> [String] {
        guard let open = section.firstIndex(where: { $0.hasPrefix("```") }),
            let close = section[(open + 1)...].firstIndex(where: { $0.hasPrefix("```") })
        else { return [] }
        var entries: [String] = []
        var parent = ""
        for line in section[(open + 1)..<close] {
            let indented = line.hasPrefix(" ")
            let text = line.drop { $0 == " " }
            // A continuation of the description column starts far to the right.
            if indented && line.prefix(while: { $0 == " " }).count > 4 { continue }
            guard let column = text.components(separatedBy: "  ").first, !column.isEmpty else { continue }
            for name in column.components(separatedBy: ", ") {
                let name = name.trimmingCharacters(in: .whitespaces)
                guard !name.isEmpty else { continue }
                if indented {
                    entries.append(parent + name)
                } else {
                    entries.append(name)
                    if name.hasSuffix("/") { parent = name }
                }
            }
        }
        return entries
    }

    /// Folders of the tree a newcomer should find in the layout: every top-level folder that is
    /// not hidden nor ignored by .gitignore, every folder of Sources/ and Tests/, scripts/lib/.
    static func treeFolders() throws -> Set<String> {
        let ignored = Set(
            try Repository.text(".gitignore").split(separator: "\n")
                .map { $0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "/")) }
                .filter { !$0.isEmpty && !$0.hasPrefix("#") && !$0.contains("*") })
        func folders(_ path: String) throws -> [String] {
            let url = path.isEmpty ? Repository.root : Repository.url(path)
            return try FileManager.default.contentsOfDirectory(atPath: url.path).filter { name in
                var isDirectory: ObjCBool = false
                return !name.hasPrefix(".") && !ignored.contains(name)
                    && FileManager.default.fileExists(atPath: url.appendingPathComponent(name).path, isDirectory: &isDirectory)
                    && isDirectory.boolValue
            }
        }
        var result = Set(try folders("").map { "\($0)/" })
        for parent in ["Sources", "Tests"] {
            result.formUnion(try folders(parent).map { "\(parent)/\($0)/" })
        }
        result.insert("scripts/lib/")
        return result
    }

    @Test("the README is what a newcomer reads in ten minutes: under 400 lines")
    func short() {
        let count = readme.split(separator: "\n", omittingEmptySubsequences: false).count
        #expect(count < 400, "README.md has \(count) lines; move reference into docs/")
    }

    @Test("Project layout names every folder of Sources/, Tests/ and the top level, and nothing that does not exist")
    func layout() throws {
        let entries = Self.layoutEntries(Self.section("Project layout", of: readme))
        try #require(!entries.isEmpty, "README.md has no '## Project layout' with a text block")
        let listed = Set(entries)
        for folder in try Self.treeFolders().sorted() {
            #expect(listed.contains(folder), "README.md's Project layout does not list \(folder)")
        }
        for entry in entries {
            #expect(Repository.exists(entry), "README.md's Project layout lists \(entry), which does not exist")
        }
    }

    @Test("Tests lists the steps of scripts/test.sh, in its order")
    func testSteps() throws {
        let script = try Repository.text("scripts/test.sh")
        // `step "NAME" COMMAND...` lines (not the function's own definition).
        let steps = script.split(separator: "\n").compactMap { line -> String? in
            let line = line.trimmingCharacters(in: .whitespaces)
            guard line.hasPrefix("step \""), let end = line.dropFirst(6).firstIndex(of: "\"") else { return nil }
            return String(line[line.index(line.startIndex, offsetBy: 6)..<end])
        }
        try #require(steps.count >= 2, "no `step \"NAME\"` lines in scripts/test.sh")
        // `N. **NAME**: ...` items of the README's Tests section.
        let listed = Self.section("Tests", of: readme).compactMap { line -> String? in
            guard let dot = line.firstIndex(of: "."), Int(line[..<dot]) != nil else { return nil }
            let rest = line[line.index(after: dot)...].trimmingCharacters(in: .whitespaces)
            guard rest.hasPrefix("**"), let end = rest.dropFirst(2).range(of: "**") else { return nil }
            return String(rest[rest.index(rest.startIndex, offsetBy: 2)..<end.lowerBound])
        }
        #expect(listed == steps, "README.md's Tests lists \(listed); scripts/test.sh runs \(steps)")
    }

    @Test("every relative link of the README and docs/*.md leads to a file that exists")
    func links() throws {
        let documents = ["README.md"] + (try FileManager.default.contentsOfDirectory(atPath: Repository.url("docs").path))
            .filter { $0.hasSuffix(".md") }.map { "docs/\($0)" }
        for document in documents {
            let text = try Repository.text(document)
            let folder = URL(fileURLWithPath: document).deletingLastPathComponent().relativePath
            var rest = text[...]
            while let open = rest.range(of: "](") {
                rest = rest[open.upperBound...]
                guard let close = rest.firstIndex(of: ")") else { break }
                let target = String(rest[..<close]).split(separator: "#", omittingEmptySubsequences: false).first.map(String.init) ?? ""
                rest = rest[close...]
                guard !target.isEmpty, !target.contains("://"), !target.hasPrefix("mailto:"), !target.contains(" ") else { continue }
                let path = folder == "." ? target : "\(folder)/\(target)"
                let resolved = Repository.url(path).standardized.path
                #expect(FileManager.default.fileExists(atPath: resolved), "\(document) links to \(target), which does not exist")
            }
        }
    }
}
