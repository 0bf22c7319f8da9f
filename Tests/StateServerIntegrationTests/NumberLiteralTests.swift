import TestSupport
import Testing

/// Issue 11 item 6 (numbers): an integer field takes a literal that is a whole number as
/// written, whatever its spelling (`1e16`), and refuses one that is not (`1.9999999999999999`,
/// which a double rounds to 2). The routes' JSON decoding, in process.
@Suite("Number literals for integer fields", .inProcessServer())
struct NumberLiteralTests {
    func increment(_ session: Session, by literal: String) async throws -> HTTPResponse {
        let body = #"{"feature":"counter","action":{"type":"increment","by":\#(literal)}}"#
        return try await session.request("POST", "/dispatch", headers: [("Content-Type", "application/json")], body: Array(body.utf8))
    }

    @Test("whole numbers written with an exponent or a zero fraction are accepted exactly",
          arguments: [("1e16", 10_000_000_000_000_000), ("2.50e1", 25), ("1.0", 1), ("100E-2", 1), ("9.223372036854775807e18", Int.max)])
    func wholeNumbers(_ literal: String, _ expected: Int) async throws {
        let session = try await SharedServer.api().createSession()
        let response = try await increment(session, by: literal)
        #expect(response.status == 200, "\(literal): \(response)")
        #expect(try await session.store("counter").state["count"]?.int == expected, "\(literal)")
    }

    @Test("numbers that are not whole as written are refused", arguments: ["1.9999999999999999", "1.5", "1e-1", "10000000000000000.5"])
    func notWhole(_ literal: String) async throws {
        let session = try await SharedServer.api().createSession()
        let response = try await increment(session, by: literal)
        #expect(response.status == 422, "\(literal): \(response)")
        #expect(response.errorCode == "invalid_action", "\(literal): \(response)")
        #expect(response.errorMessage?.contains("whole number") == true, "\(literal): \(response)")
        #expect(try await session.store("counter").version == 0, "\(literal)")
    }

    @Test("whole numbers beyond Int are refused as not fitting", arguments: ["1e19", "9.3e18", "-1e30"])
    func tooLarge(_ literal: String) async throws {
        let session = try await SharedServer.api().createSession()
        let response = try await increment(session, by: literal)
        #expect(response.status == 422, "\(literal): \(response)")
        #expect(response.errorMessage?.contains("fits in 64 bits") == true, "\(literal): \(response)")
    }
}
