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
