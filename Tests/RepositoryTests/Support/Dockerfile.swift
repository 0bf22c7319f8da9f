import Foundation

/// A Dockerfile read into stages of instructions, enough to check its shape without a Docker
/// engine. Handles comments, blank lines and `\` line continuations; not heredocs.
struct Dockerfile {
    struct Instruction: CustomStringConvertible {
        /// Upper-cased keyword: `FROM`, `RUN`, `COPY`, ...
        let keyword: String
        /// Everything after the keyword, continuation lines joined with a space.
        let arguments: String

        var description: String { "\(keyword) \(arguments)" }
    }

    struct Stage {
        /// The `FROM` instruction that starts the stage.
        let from: Instruction
        /// The instructions after `FROM`, up to the next `FROM`.
        let instructions: [Instruction]

        /// The base image (`swift:6.3.1-bookworm`), without `--platform=` options.
        var image: String {
            words(from.arguments).first { !$0.hasPrefix("--") } ?? ""
        }

        /// The name after `AS`, if any.
        var name: String? {
            let parts = words(from.arguments)
            guard let index = parts.firstIndex(where: { $0.uppercased() == "AS" }), index + 1 < parts.count else {
                return nil
            }
            return parts[index + 1]
        }

        func all(_ keyword: String) -> [Instruction] {
            instructions.filter { $0.keyword == keyword }
        }
    }

    let instructions: [Instruction]

    init(_ text: String) {
        var result: [Instruction] = []
        var pending = ""
        for rawLine in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("#") || (line.isEmpty && pending.isEmpty) { continue }
            if line.hasSuffix("\\") {
                pending += line.dropLast() + " "
                continue
            }
            let logical = (pending + line).trimmingCharacters(in: .whitespaces)
            pending = ""
            guard !logical.isEmpty else { continue }
            let keyword = logical.prefix { !$0.isWhitespace }
            let arguments = logical.dropFirst(keyword.count).trimmingCharacters(in: .whitespaces)
            result.append(Instruction(keyword: keyword.uppercased(), arguments: arguments))
        }
        instructions = result
    }

    var stages: [Stage] {
        var stages: [Stage] = []
        var from: Instruction?
        var body: [Instruction] = []
        for instruction in instructions {
            if instruction.keyword == "FROM" {
                if let from { stages.append(Stage(from: from, instructions: body)) }
                from = instruction
                body = []
            } else {
                body.append(instruction)
            }
        }
        if let from { stages.append(Stage(from: from, instructions: body)) }
        return stages
    }
}

/// A `.dockerignore` read as Docker reads it, enough for the paths the tests ask about: one
/// pattern a line (`#` comments), `*` and `?` within a path component, `!` re-including; the
/// last pattern that matches a path or one of its parent folders decides.
struct DockerIgnore {
    let patterns: [(pattern: [Substring], include: Bool)]

    init(_ text: String) {
        patterns = text.split(separator: "\n").compactMap { raw in
            var line = raw.trimmingCharacters(in: .whitespaces)
            guard !line.isEmpty, !line.hasPrefix("#") else { return nil }
            let include = line.hasPrefix("!")
            if include { line.removeFirst() }
            while line.hasPrefix("/") || line.hasPrefix("./") { line.removeFirst(line.hasPrefix("/") ? 1 : 2) }
            while line.hasSuffix("/") { line.removeLast() }
            return (line.split(separator: "/"), include)
        }
    }

    /// Whether `path` (relative to the context) is left out of the build context.
    func excludes(_ path: String) -> Bool {
        let components = path.split(separator: "/")
        var excluded = false
        for (pattern, include) in patterns {
            // The pattern matches the path itself or one of its parents.
            let matches = (1...max(1, components.count)).contains { length in
                length <= components.count && length == pattern.count
                    && zip(pattern, components.prefix(length)).allSatisfy { Self.glob(Array($0), Array($1)) }
            }
            if matches { excluded = !include }
        }
        return excluded
    }

    /// `*` (any run) and `?` (one character) within one path component.
    static func glob(_ pattern: [Character], _ name: [Character]) -> Bool {
        guard let first = pattern.first else { return name.isEmpty }
        switch first {
        case "*":
            return (0...name.count).contains { glob(Array(pattern.dropFirst()), Array(name.dropFirst($0))) }
        case "?":
            return !name.isEmpty && glob(Array(pattern.dropFirst()), Array(name.dropFirst()))
        default:
            return name.first == first && glob(Array(pattern.dropFirst()), Array(name.dropFirst()))
        }
    }
}
