import TestSupport
import Synchronization
import Testing

@Suite("Optimistic concurrency, idempotent retries, ordering", .inProcessServer())
struct ConcurrencyTests {
    static let increment: JSON = ["type": "increment"]

    @Test("If-Match on dispatch: a stale version is 412 version_conflict and nothing is applied")
    func ifMatchDispatch() async throws {
        let session = try await SharedServer.api().createSession()
        let first = try await session.dispatch("counter", Self.increment, headers: [("If-Match", "\"0\"")])
        #expect(first.status == 200, "\(first)")
        #expect(first.json?["version"] == 1)
        let stale = try await session.dispatch("counter", Self.increment, headers: [("If-Match", "\"0\"")])
        expectError(stale, 412, "version_conflict")
        let future = try await session.dispatch("counter", Self.increment, headers: [("If-Match", "\"5\"")])
        expectError(future, 412, "version_conflict")
        #expect(try await session.store("counter") == StoreState(version: 1, state: ["count": 1]))
        let current = try await session.dispatch("counter", Self.increment, headers: [("If-Match", "\"1\"")])
        #expect(current.json?["version"] == 2, "\(current)")
        // The version is the dispatched feature's: todos is still at 0.
        let todos = try await session.dispatch("todos", ["type": "add", "title": "x"], headers: [("If-Match", "\"0\"")])
        #expect(todos.status == 200, "\(todos)")
    }

    @Test("If-Match: * matches any version; a value that does not parse never matches")
    func ifMatchForms() async throws {
        let session = try await SharedServer.api().createSession()
        try await session.dispatchOK("counter", Self.increment)
        let any = try await session.dispatch("counter", Self.increment, headers: [("If-Match", "*")])
        #expect(any.status == 200, "\(any)")
        #expect(any.json?["version"] == 2)
        // Strong comparison: a weak tag or a bare number never matches, even the current version.
        for value in ["garbage", "\"two\"", "\"\"", "\"-1\"", "\"2", "W/\"x\"", "W/\"2\"", "2", "\"2\", \"3\""] {
            let response = try await session.dispatch("counter", Self.increment, headers: [("If-Match", value)])
            expectError(response, 412, "version_conflict", "If-Match \(value)")
        }
        #expect(try await session.store("counter") == StoreState(version: 2, state: ["count": 2]))
    }

    @Test("a stale If-Match is a conflict even when the action would not decode")
    func staleIfMatchComesFirst() async throws {
        let session = try await SharedServer.api().createSession()
        try await session.dispatchOK("counter", Self.increment)
        let response = try await session.dispatch("counter", ["type": "nope"], headers: [("If-Match", "\"0\"")])
        expectError(response, 412, "version_conflict", "stale If-Match with a bad action")
    }

    @Test("If-Match on PUT and DELETE state")
    func ifMatchStateRoutes() async throws {
        let session = try await SharedServer.api().createSession()
        try await session.dispatchOK("counter", Self.increment)
        let body = jsonBytes(["state": ["count": 50]])
        expectError(
            try await session.request("PUT", "/state/counter", headers: [("If-Match", "\"0\"")], body: body),
            412, "version_conflict", "PUT")
        expectError(
            try await session.request("DELETE", "/state/counter", headers: [("If-Match", "\"7\"")]),
            412, "version_conflict", "DELETE")
        expectError(
            try await session.request("DELETE", "/state/counter", headers: [("If-Match", "nonsense")]),
            412, "version_conflict", "DELETE with an unparsable If-Match")
        #expect(try await session.store("counter") == StoreState(version: 1, state: ["count": 1]))
        let put = try await session.request("PUT", "/state/counter", headers: [("If-Match", "\"1\"")], body: body)
        #expect(put.json?["version"] == 2, "\(put)")
        let delete = try await session.request("DELETE", "/state/counter", headers: [("If-Match", "\"2\"")])
        #expect(delete.json?["version"] == 3, "\(delete)")
        let star = try await session.request("DELETE", "/state/counter", headers: [("If-Match", "*")])
        #expect(star.json?["version"] == 4, "\(star)")
    }

    @Test("Idempotency-Key: a repeat returns the first response with Idempotent-Replayed: true and applies nothing")
    func idempotentReplay() async throws {
        let session = try await SharedServer.api().createSession()
        let key = [Header(name: "Idempotency-Key", value: "retry-1")]
        let first = try await session.dispatch("counter", ["type": "increment", "by": 3], headers: key)
        #expect(first.status == 200, "\(first)")
        #expect(first.header("Idempotent-Replayed") == nil || first.header("Idempotent-Replayed") == "false")
        for _ in 0..<3 {
            let again = try await session.dispatch("counter", ["type": "increment", "by": 3], headers: key)
            #expect(again.status == 200, "\(again)")
            #expect(again.header("Idempotent-Replayed") == "true", "\(again)")
            #expect(again.json == first.json)
        }
        #expect(try await session.store("counter") == StoreState(version: 1, state: ["count": 3]))

        // A repeat of the key returns the first response even if the body differs.
        let different = try await session.dispatch("counter", ["type": "set", "value": 99], headers: key)
        #expect(different.status == 200)
        #expect(different.header("Idempotent-Replayed") == "true", "\(different)")
        #expect(different.json == first.json)
        #expect(try await session.store("counter") == StoreState(version: 1, state: ["count": 3]))

        // A new key applies again.
        let other = try await session.dispatch("counter", ["type": "increment", "by": 3], headers: [("Idempotency-Key", "retry-2")])
        #expect(other.json?["version"] == 2)
        #expect(other.header("Idempotent-Replayed") != "true")
    }

    @Test("Idempotency-Key: only 200 responses are remembered")
    func failuresAreRetried() async throws {
        let session = try await SharedServer.api().createSession()
        let key = [Header(name: "Idempotency-Key", value: "after-failure")]
        expectError(try await session.dispatch("counter", ["type": "set"], headers: key), 422, "invalid_action")
        try await session.dispatchOK("counter", Self.increment)
        expectError(
            try await session.dispatch("counter", Self.increment, headers: key + [("If-Match", "\"0\"")]),
            412, "version_conflict")
        let retried = try await session.dispatch("counter", ["type": "set", "value": 5], headers: key)
        #expect(retried.status == 200, "\(retried)")
        #expect(retried.header("Idempotent-Replayed") != "true")
        #expect(retried.json?["state"] == ["count": 5])
        let replayed = try await session.dispatch("counter", ["type": "set", "value": 5], headers: key)
        #expect(replayed.header("Idempotent-Replayed") == "true")
        #expect(try await session.store("counter") == StoreState(version: 2, state: ["count": 5]))
    }

    @Test("Idempotency-Key: keys are per session; longer than 200 characters is 400 invalid_request")
    func keyScopeAndLength() async throws {
        let api = try SharedServer.api()
        let one = try await api.createSession()
        let two = try await api.createSession()
        let key = [Header(name: "Idempotency-Key", value: "shared-key")]
        try await one.dispatchOK("counter", Self.increment, headers: key)
        let elsewhere = try await two.dispatch("counter", Self.increment, headers: key)
        #expect(elsewhere.status == 200)
        #expect(elsewhere.header("Idempotent-Replayed") != "true", "keys are per session: \(elsewhere)")
        #expect(try await two.store("counter").version == 1)

        let longest = String(repeating: "k", count: 200)
        let ok = try await one.dispatch("counter", Self.increment, headers: [("Idempotency-Key", longest)])
        #expect(ok.status == 200, "\(ok)")
        let tooLong = try await one.dispatch(
            "counter", Self.increment, headers: [("Idempotency-Key", String(repeating: "k", count: 201))])
        expectError(tooLong, 400, "invalid_request")
        #expect(try await one.store("counter").version == 2)
    }
}

/// Concurrency: many keep-alive connections at once against one stream.
extension SocketContractTests {
    @Test("200 concurrent increments over 8 connections: count 200, versions 1...200 each once, events in order")
    func concurrentIncrements() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let (stream, snapshot) = try await session.subscribe(query: "feature=counter")
        defer { stream.close() }
        let body = jsonBytes(["feature": "counter", "action": ["type": "increment"]])
        let versions = try await withThrowingTaskGroup(of: [Int].self) { group in
            for _ in 0..<8 {
                group.addTask {
                    let connection = try await HTTPConnection.open(port: api.port)
                    defer { connection.close() }
                    var seen: [Int] = []
                    for _ in 0..<25 {
                        let response = try await connection.request(
                            "POST", session.path + "/dispatch", headers: session.auth, body: body)
                        guard response.status == 200, let version = response.json?["version"]?.int else {
                            throw ClientError.malformedResponse("increment: \(response)")
                        }
                        seen.append(version)
                    }
                    return seen
                }
            }
            var all: [Int] = []
            for try await seen in group { all += seen }
            return all
        }
        #expect(versions.sorted() == Array(1...200))
        #expect(try await session.store("counter") == StoreState(version: 200, state: ["count": 200]))

        var lastSeq = try #require(snapshot.seq)
        for expected in 1...200 {
            let event = try await stream.nextEvent()
            let seq = try #require(event.seq, "\(event)")
            #expect(seq > lastSeq, "ids strictly increase: \(seq) after \(lastSeq)")
            lastSeq = seq
            #expect(event.json?["version"] == .int(expected), "\(event)")
            #expect(event.json?["state"] == ["count": .int(expected)], "\(event)")
            if event.json?["version"] != .int(expected) { break }
        }
    }
}
