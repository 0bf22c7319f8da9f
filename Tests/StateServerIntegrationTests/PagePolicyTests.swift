import Foundation
import TestSupport
import Testing

/// Issue 25 item 3: the pages' Content-Security-Policy allows no inline script and no framing,
/// and the pages hold no inline script for it to block (their scripts are files). The static
/// routes' replies, in process.
@Suite("The pages' Content-Security-Policy", .inProcessServer())
struct PagePolicyTests {
    /// The directives of a policy, by name.
    static func directives(_ policy: String) -> [String: [String]] {
        var result: [String: [String]] = [:]
        for part in policy.split(separator: ";") {
            let words = part.split(separator: " ").map(String.init)
            if let name = words.first { result[name.lowercased()] = Array(words.dropFirst()) }
        }
        return result
    }

    @Test("/ and /devtools: script-src 'self' without inline, frame-ancestors 'none'; every <script> has a src; /app.js and /devtools.js are served")
    func pages() async throws {
        let api = try SharedServer.api()
        for (page, script) in [("/", "/app.js"), ("/devtools", "/devtools.js")] {
            let response = try await api.request("GET", page)
            #expect(response.status == 200, "\(page): \(response.head)")
            let policy = try #require(response.header("Content-Security-Policy"), "\(page): \(response.head)")
            let directives = Self.directives(policy)
            #expect(directives["script-src"] == ["'self'"], "\(page): \(policy)")
            #expect(directives["frame-ancestors"] == ["'none'"], "\(page): \(policy)")
            #expect(!(directives["default-src"] ?? []).contains("'unsafe-inline'"), "\(page): \(policy)")
            #expect(directives["object-src"] == ["'none'"] && directives["base-uri"] == ["'none'"], "\(page): \(policy)")
            let html = response.text
            // Every script element loads a file; no attribute runs code (onclick=...).
            let scripts = html.components(separatedBy: "<script").dropFirst()
            #expect(!scripts.isEmpty)
            for tag in scripts {
                let head = tag.prefix { $0 != ">" }
                #expect(head.contains("src=\"/"), "\(page): an inline script: <script\(tag.prefix(80))")
                #expect(tag.dropFirst(head.count + 1).hasPrefix("</script>"), "\(page): a script with a body")
            }
            let handler = try Regex(#"<[^>]*\son[a-z]+\s*="#)
            #expect(html.firstMatch(of: handler) == nil, "\(page) has an inline event handler")
            #expect(html.contains("<script src=\"\(script)\"></script>"), "\(page) does not load \(script)")
            let file = try await api.request("GET", script)
            #expect(file.status == 200 && file.header("Content-Type") == "text/javascript; charset=utf-8", "\(script): \(file.head)")
            #expect(file.header("X-Content-Type-Options") == "nosniff", "\(file.head)")
            #expect(file.text.contains("\"use strict\""), "\(script)")
        }
    }
}
