import TestSupport
import Testing

/// `If-Match` judged strictly (issue 11 §6): tags compare by characters, and repeated header
/// lines form one list (RFC 9110 §5.3) instead of the first line winning.
@Suite("Preconditions: If-Match lines and tag comparison", .localServer())
struct PreconditionTests {
    @Test("\"08\" is not the tag of version 8")
    func leadingZeroDoesNotMatch() async throws {
        let session = try await SharedServer.api().createSession()
        for _ in 0..<8 { try await session.dispatchOK("counter", ["type": "increment"]) }
        let padded = try await session.dispatch("counter", ["type": "increment"], headers: [("If-Match", "\"08\"")])
        #expect(padded.status == 412, "\(padded)")
        #expect(padded.header("ETag") == "\"8\"")
        #expect(try await session.store("counter").version == 8, "nothing applied")
        let exact = try await session.dispatch("counter", ["type": "increment"], headers: [("If-Match", "\"8\"")])
        #expect(exact.status == 200, "\(exact)")
    }

    @Test("a second If-Match line joins the list: a list of two versions never matches")
    func repeatedLinesAreOneList() async throws {
        let session = try await SharedServer.api().createSession()
        try await session.dispatchOK("counter", ["type": "increment"])
        let twoLines = try await session.dispatch(
            "counter", ["type": "increment"], headers: [("If-Match", "\"1\""), ("If-Match", "\"7\"")])
        #expect(twoLines.status == 412, "the second line was ignored: \(twoLines)")
        #expect(try await session.store("counter").version == 1, "nothing applied")
        // A weak tag on the first line does not count (strong comparison); the strong tag on
        // the second line does.
        let weakThenStrong = try await session.dispatch(
            "counter", ["type": "increment"], headers: [("If-Match", "W/\"1\""), ("If-Match", "\"1\"")])
        #expect(weakThenStrong.status == 200, "\(weakThenStrong)")
    }

    @Test("If-None-Match on a second line is read too, by characters")
    func ifNoneMatchLines() async throws {
        let session = try await SharedServer.api().createSession()
        try await session.dispatchOK("counter", ["type": "increment"])
        let second = try await session.request("GET", "/state/counter", headers: [("If-None-Match", "\"9\""), ("If-None-Match", "\"1\"")])
        #expect(second.status == 304, "\(second)")
        let padded = try await session.request("GET", "/state/counter", headers: [("If-None-Match", "\"01\"")])
        #expect(padded.status == 200, "\(padded)")
    }
}
