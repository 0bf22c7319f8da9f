import Foundation
import TestSupport
import Testing

/// `GET /v1/sessions/{id}/history`, in process: on memory storage, and on SQLite in the suite's
/// second pass (STATE_SERVER_TEST_STORAGE=sqlite).
@Suite("History: a session's changes in order", .inProcessServer())
struct HistoryTests {
    /// The changes of one page, and the page's cursor fields.
    struct Page {
        let changes: [JSON]
        let next: Int?
        let truncated: Bool
        let keptFrom: Int?

        var seqs: [Int] { changes.compactMap { $0["seq"]?.int } }
    }

    static func page(_ session: Session, _ query: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> Page {
        let response = try await session.request("GET", "/history\(query)")
        try #require(response.status == 200, "GET history\(query): \(response)", sourceLocation: sourceLocation)
        #expect(response.header("Cache-Control") == "no-store", sourceLocation: sourceLocation)
        let body = try #require(response.json, sourceLocation: sourceLocation)
        #expect(body["session"] == .string(session.id), sourceLocation: sourceLocation)
        return Page(
            changes: try #require(body["changes"]?.array, sourceLocation: sourceLocation),
            next: body["next"]?.int, truncated: body["truncated"] == true, keptFrom: body["keptFrom"]?.int)
    }

    @Test("every change in order: seq, feature, version, cause, the public action, effect, time; paged by a cursor")
    func changesInOrder() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let before = Int(Date().timeIntervalSince1970 * 1000)
        try await session.dispatchOK("counter", ["type": "increment"])
        try await session.dispatchOK("todos", ["type": "add", "title": "milk"])
        try await session.dispatchOK("counter", ["type": "increment", "by": 5])
        // A password is masked as in events; a check that fails sends a toast effect.
        try await session.dispatchOK("login", ["type": "submit", "username": "ada", "password": "short"])
        let settled = try await eventually(timeout: .seconds(60)) { try await session.store("login").version == 2 }
        #expect(settled)
        let after = Int(Date().timeIntervalSince1970 * 1000)

        let all = try await Self.page(session, "")
        #expect(all.seqs == [1, 2, 3, 4, 5])
        #expect(all.next == nil && !all.truncated && all.keptFrom == nil)
        #expect(all.changes.map { $0["feature"] } == ["counter", "todos", "counter", "login", "login"])
        #expect(all.changes.map { $0["version"] } == [1, 1, 2, 1, 2])
        #expect(all.changes.allSatisfy { $0["cause"] == "dispatch" })
        #expect(all.changes[0]["action"] == ["type": "increment"])
        #expect(all.changes[2]["action"] == ["type": "increment", "by": 5])
        #expect(all.changes[3]["action"]?["password"] == "********", "masked: \(all.changes[3])")
        #expect(all.changes[4]["action"]?["type"] == "failed")
        #expect(all.changes[4]["effect"]?["type"] == "toast", "\(all.changes[4])")
        #expect(all.changes[0]["effect"] == .null)
        for change in all.changes {
            let time = try #require(change["time"]?.int, "\(change)")
            #expect(time >= before && time <= after, "\(change)")
        }

        // Pages of two: the cursor is the last seq looked at.
        let first = try await Self.page(session, "?limit=2")
        #expect(first.seqs == [1, 2] && first.next == 2)
        let second = try await Self.page(session, "?after=2&limit=2")
        #expect(second.seqs == [3, 4] && second.next == 4)
        let last = try await Self.page(session, "?after=4&limit=2")
        #expect(last.seqs == [5] && last.next == nil)
        let beyond = try await Self.page(session, "?after=99")
        #expect(beyond.seqs.isEmpty && beyond.next == nil && !beyond.truncated)

        // One feature: the others are skipped, the cursor still walks the session.
        let counter = try await Self.page(session, "?feature=counter&limit=3")
        #expect(counter.seqs == [1, 3] && counter.next == 3)
        let rest = try await Self.page(session, "?feature=counter&after=3")
        #expect(rest.seqs.isEmpty && rest.next == nil)
    }

    @Test("rehydrate and reset are in the history with their causes and no action")
    func otherCauses() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let put = try await session.request("PUT", "/state/counter", body: JSON.object(["state": ["count": 7]]).bytes)
        #expect(put.status == 200, "\(put)")
        let reset = try await session.request("DELETE", "/state/counter")
        #expect(reset.status == 200, "\(reset)")
        let page = try await Self.page(session, "")
        #expect(page.changes.map { $0["cause"] } == ["rehydrate", "reset"])
        #expect(page.changes.map { $0["action"] } == [.null, .null])
        #expect(page.changes.map { $0["version"] } == [1, 2])
    }

    @Test("a query out of bounds is 400 invalid_request, an unknown feature 404, and nothing changes")
    func badQueries() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        try await session.dispatchOK("counter", ["type": "increment"])
        for query in ["?limit=0", "?limit=1001", "?limit=", "?after=-1", "?after=1.5", "?after=x", "?after=99999999999999999999",
            "?limit=1&limit=2", "?after=1&after=2", "?feature=counter&feature=todos"]
        {
            let response = try await session.request("GET", "/history\(query)")
            expectError(response, 400, "invalid_request")
        }
        expectError(try await session.request("GET", "/history?feature=nope"), 404, "unknown_feature")
        expectError(try await api.request("GET", "/v1/sessions/\(session.id)/history"), 401, "unauthorized")
        expectError(
            try await api.request("GET", "/v1/sessions/\(session.id)/history", headers: [("Authorization", "Bearer wrong")]),
            404, "session_not_found")
        let post = try await session.request("POST", "/history", body: Array("{}".utf8))
        #expect(post.status == 405, "\(post)")
        #expect(try await Self.page(session, "").seqs == [1])
    }

    @Test("past what is kept, the page says so and names the oldest change kept")
    func truncated() async throws {
        let (server, session) = try await InProcessServer.twelveIncrementsThreeKept()
        let page = try await Self.page(session, "")
        #expect(page.truncated, "12 changes with 3 kept: \(page.seqs)")
        let kept = try #require(page.keptFrom)
        #expect(kept > 1 && kept <= 10, "\(kept)")
        #expect(page.seqs == Array(kept...12))
        #expect(page.changes.last?["version"] == 12)
        // From inside what is kept: nothing is missing.
        let inside = try await Self.page(session, "?after=\(kept)")
        #expect(!inside.truncated && inside.keptFrom == nil && inside.seqs == Array((kept + 1)...12))
        await server.stop()
    }
}
