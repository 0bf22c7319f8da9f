import Foundation
import Testing

/// Issue 37 item 6: the server library behaves like a library. It never ends the process (its
/// `run` throws `CommandFailure`; each executable's `main` exits), no type shadows its module
/// (so `StateServer.run(features:)` names the module's function), and the example login's
/// setting is `state-server`'s, not every server's.
@Suite("The server library behaves like one")
struct LibraryShapeTests {
    /// The Swift files of `folder`, with their text.
    static func sources(_ folder: String) throws -> [(path: String, text: String)] {
        let names = try FileManager.default.contentsOfDirectory(atPath: Repository.url(folder).path)
        return try names.filter { $0.hasSuffix(".swift") }.sorted().map { ("\(folder)/\($0)", try Repository.text("\(folder)/\($0)")) }
    }

    /// Lines of Swift that are not comments.
    static func codeLines(_ text: String) -> [String] {
        text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.hasPrefix("//") }
    }

    @Test("Sources/StateServer calls no exit: failures are thrown as CommandFailure")
    func noExit() throws {
        for (path, text) in try Self.sources("Sources/StateServer") {
            for line in Self.codeLines(text) {
                #expect(!line.contains("exit(") && !line.contains("exit(withError"), "\(path): \(line)")
            }
        }
        #expect(try Repository.text("Sources/StateServer/StateServer.swift").contains("throws(CommandFailure)"))
        for main in ["Sources/state-server/main.swift", "Examples/CartServer/Sources/CartServer/main.swift"] {
            let text = try Repository.text(main)
            #expect(text.contains("do throws(CommandFailure)") && text.contains("error.report()") && text.contains("exit(error.status)"), "\(main)")
        }
    }

    @Test("no type of the StateServer module is named StateServer")
    func noTypeShadowsTheModule() throws {
        for (path, text) in try Self.sources("Sources/StateServer") {
            for line in Self.codeLines(text) {
                for kind in ["enum", "struct", "class", "actor", "typealias", "protocol"] {
                    #expect(!line.contains("\(kind) StateServer ") && !line.contains("\(kind) StateServer{") && !line.hasSuffix("\(kind) StateServer"), "\(path): \(line)")
                }
            }
        }
    }

    @Test("login.checkDelay is declared by state-server alone, not by the library")
    func exampleSettingsLiveWithTheExamples() throws {
        for (path, text) in try Self.sources("Sources/StateServer") {
            #expect(!text.contains("\"login."), "\(path) declares a setting of the example login")
        }
        #expect(try Repository.text("Sources/state-server/main.swift").contains("\"login.checkDelay\""))
        #expect(!(try Repository.text("Examples/CartServer/Sources/CartServer/main.swift")).contains("login"))
    }
}
