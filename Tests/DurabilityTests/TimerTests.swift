import Foundation
import TestSupport
import Testing

/// Timers a reducer schedules (the todos example's `remind`), over real HTTP: they fire once
/// after their delay, survive a SIGKILL and the session leaving memory, and a cancelled one never
/// fires.
@Suite("Timers: scheduled actions fire exactly once")
struct TimerTests {
    /// The todos item `id` of `session`, as its store has it now.
    static func item(_ session: Session, _ id: String) async throws -> JSON? {
        try await session.store("todos").state["items"]?.array?.first { $0["id"]?.string == id }
    }

    /// The session's changes of cause `timer`, from its history.
    static func timerChanges(_ session: Session) async throws -> [JSON] {
        let history = try await session.request("GET", "/history?limit=1000")
        #expect(history.status == 200, "\(history)")
        return (history.json?["changes"]?.array ?? []).filter { $0["cause"]?.string == "timer" }
    }

    static func pendingTimers(_ session: Session) async throws -> [JSON] {
        let listed = try await session.request("GET", "/timers")
        #expect(listed.status == 200, "\(listed)")
        #expect(listed.header("Cache-Control") == "no-store")
        return listed.json?["timers"]?.array ?? []
    }

    static func nowMilliseconds() -> Int { Int(Date().timeIntervalSince1970 * 1000) }

    /// The value of an unlabelled sample of `name` on `/metrics`.
    static func metric(_ server: ServerProcess, _ name: String) async throws -> Double? {
        let metrics = try await server.api.request("GET", "/metrics")
        let text = String(decoding: metrics.body, as: UTF8.self)
        for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.dropFirst(name.count + 1))
        }
        return nil
    }

    @Test("a reminder fires once after its delay: listed while pending, then a change of cause timer (memory and SQLite)", arguments: [false, true])
    func firesOnce(sqlite: Bool) async throws {
        try await withTemporaryDirectory { directory in
            let arguments = sqlite ? ["--storage", "sqlite:\(directory.path("state.db"))"] : ["--storage", "memory"]
            let server = try await ServerProcess.start(arguments: arguments)
            try await server.stopping { server in
                let session = try await server.api.createSession()
                try await session.dispatchOK("todos", ["type": "add", "title": "call Ada"])
                let events = try await session.events(query: "features=todos")
                defer { events.close() }
                let before = Self.nowMilliseconds()
                // Listed while pending: an hour away, so a loaded machine cannot see it fire first.
                try await session.dispatchOK("todos", ["type": "remind", "id": "1", "after": 3_600])
                let listed = try await Self.pendingTimers(session)
                #expect(listed.count == 1, "\(listed)")
                let hourly = try #require(listed.first)
                #expect(hourly["feature"] == "todos")
                #expect(hourly["id"] == "remind-1")
                #expect(try #require(hourly["due"]?.int) - (try #require(hourly["scheduledAt"]?.int)) == 3_600_000, "\(hourly)")
                #expect(try #require(hourly["scheduledAt"]?.int) >= before - 5, "\(hourly)")
                #expect(hourly["action"]?["type"]?.string != nil, "\(hourly)")
                #expect(try await Self.item(session, "1")?["reminded"] == .bool(false))

                // Scheduling the id again replaces it: due in a second now.
                try await session.dispatchOK("todos", ["type": "remind", "id": "1", "after": 1])

                // The firing reaches the stream as a change of cause timer, with its effect.
                var fired: JSON?
                for _ in 0..<10 {
                    let event = try await events.nextEvent()
                    guard event.event == "state", let data = event.json, data["cause"] == "timer" else { continue }
                    fired = data
                    break
                }
                let change = try #require(fired, "no change of cause timer on the stream")
                #expect(change["timer"]?["id"] == hourly["id"])
                let due = try #require(change["timer"]?["due"]?.int)
                let scheduledAt = try #require(change["timer"]?["scheduledAt"]?.int)
                #expect(due - scheduledAt == 1000, "\(change)")
                #expect(scheduledAt > (hourly["scheduledAt"]?.int ?? .max) - 1, "the replacing schedule, not the first: \(change)")
                #expect(change["action"] == hourly["action"])
                #expect(change["effect"]?["type"] == "toast", "\(change)")
                #expect(Self.nowMilliseconds() >= due)
                #expect(try await Self.item(session, "1")?["reminded"] == .bool(true))
                #expect(try await Self.pendingTimers(session).isEmpty)

                let history = try await Self.timerChanges(session)
                #expect(history.count == 1, "\(history)")
                #expect(history.first?["timer"]?["id"] == hourly["id"])
                #expect((history.first?["time"]?.int ?? 0) >= due)
                #expect(try await Self.metric(server, "stateserver_timers_fired_total") == 1)
            }
        }
    }

    @Test("a cancelled reminder never fires, nor one whose item was removed or whose store was reset; a later one does")
    func cancelledNeverFires() async throws {
        let server = try await ServerProcess.start(arguments: ["--storage", "memory"])
        try await server.stopping { server in
            let session = try await server.api.createSession()
            for title in ["one", "two", "three"] { try await session.dispatchOK("todos", ["type": "add", "title": .string(title)]) }
            // Delays long enough that a loaded machine cannot fire them before they are cancelled:
            // what the scheduler may fire is what storage lists, so a cancelled timer that left
            // the list never fires.
            try await session.dispatchOK("todos", ["type": "remind", "id": "1", "after": 3_600])
            try await session.dispatchOK("todos", ["type": "remind", "id": "2", "after": 3_600])
            try await session.dispatchOK("todos", ["type": "remind", "id": "3", "after": 3_600])
            #expect(try await Self.pendingTimers(session).count == 3)
            try await session.dispatchOK("todos", ["type": "cancelReminder", "id": "1"])
            try await session.dispatchOK("todos", ["type": "remove", "id": "2"])
            #expect(try await Self.pendingTimers(session).map { $0["id"] } == ["remind-3"])
            // The one left, rescheduled to a second from now, fires; nothing else does.
            try await session.dispatchOK("todos", ["type": "remind", "id": "3", "after": 1])
            #expect(try await eventually { try await Self.item(session, "3")?["reminded"] == .bool(true) })
            #expect(try await Self.item(session, "1")?["reminded"] == .bool(false))
            let fired = try await Self.timerChanges(session)
            #expect(fired.count == 1, "\(fired)")

            // A reset cancels every timer of its store.
            try await session.dispatchOK("todos", ["type": "add", "title": "four"])
            try await session.dispatchOK("todos", ["type": "remind", "id": "4", "after": 3_600])
            #expect(try await Self.pendingTimers(session).count == 1)
            let reset = try await session.request("DELETE", "/state/todos")
            #expect(reset.status == 200, "\(reset)")
            #expect(try await Self.pendingTimers(session).isEmpty)
        }
    }

    @Test("limits: a delay out of range and a store past timers.maxPerStore are refused, changing nothing")
    func limits() async throws {
        let server = try await ServerProcess.start(
            arguments: ["--storage", "memory"], environment: ["STATE_SERVER_TIMERS_MAX_PER_STORE": "2"])
        try await server.stopping { server in
            let session = try await server.api.createSession()
            for title in ["one", "two", "three"] { try await session.dispatchOK("todos", ["type": "add", "title": .string(title)]) }
            let version = try await session.store("todos").version
            for after in [0, -5, 30 * 86_400 + 1] {
                let refused = try await session.dispatch("todos", ["type": "remind", "id": "1", "after": .int(after)])
                expectError(refused, 422, "action_rejected")
            }
            try await session.dispatchOK("todos", ["type": "remind", "id": "1", "after": 3600])
            try await session.dispatchOK("todos", ["type": "remind", "id": "2", "after": 3600])
            let third = try await session.dispatch("todos", ["type": "remind", "id": "3", "after": 3600])
            expectError(third, 422, "action_rejected")
            #expect(third.json?["error"]?["message"]?.string?.contains("limit of 2") == true, "\(third)")
            // Reminding one again replaces its timer: still two.
            try await session.dispatchOK("todos", ["type": "remind", "id": "2", "after": 7200])
            let pending = try await Self.pendingTimers(session)
            #expect(pending.count == 2, "\(pending)")
            #expect(try await session.store("todos").version == version + 3)
        }
    }

    @Test("a reminder due while the server is SIGKILLed fires once after the restart, late, and never again")
    func firesAfterCrash() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            let (session, due) = try await withDurableServer(database) { first in
                let session = try await first.api.createSession()
                try await session.dispatchOK("todos", ["type": "add", "title": "call Ada"])
                try await session.dispatchOK("todos", ["type": "remind", "id": "1", "after": 4])
                let due = try #require(try await Self.pendingTimers(session).first?["due"]?.int)
                let exit = await first.crash()
                #expect(exit.bySignal)
                return (session, due)
            }
            // Down past its due time.
            #expect(try await eventually { Self.nowMilliseconds() > due + 200 })
            try await withDurableServer(database) { second in
                let again = Session(api: second.api, id: session.id, token: session.token)
                // Fired by the new process without any request for the session.
                #expect(try await eventually { try await Self.metric(second, "stateserver_timers_fired_total") == 1 })
                #expect(try await Self.item(again, "1")?["reminded"] == .bool(true))
                let fired = try await Self.timerChanges(again)
                #expect(fired.count == 1, "\(fired)")
                let late = (fired.first?["time"]?.int ?? 0) - due
                #expect(late >= 200, "fired \(late) ms after it was due")
                #expect(fired.first?["timer"]?["due"]?.int == due)
                #expect(try await Self.pendingTimers(again).isEmpty)
            }
            try await withDurableServer(database) { third in
                let again = Session(api: third.api, id: session.id, token: session.token)
                let fired = try await Self.timerChanges(again)
                #expect(fired.count == 1, "\(fired)")
            }
        }
    }

    @Test("a reminder of a session that left memory fires: its session is loaded for it")
    func firesAfterEviction() async throws {
        try await withTemporaryDirectory { directory in
            let environment = ["STATE_SERVER_SESSIONS_IDLE_TIMEOUT": "0.2", "STATE_SERVER_SESSIONS_SWEEP_INTERVAL": "0.1"]
            try await withDurableServer(directory.path("state.db"), environment: environment) { server in
                let session = try await server.api.createSession()
                try await session.dispatchOK("todos", ["type": "add", "title": "call Ada"])
                try await session.dispatchOK("todos", ["type": "remind", "id": "1", "after": 5])
                #expect(try await eventually { try await Self.metric(server, "stateserver_sessions_in_memory") == 0 })
                #expect(try await Self.metric(server, "stateserver_timers_fired_total") ?? 0 == 0)
                #expect(try await eventually { try await Self.metric(server, "stateserver_timers_fired_total") == 1 })
                #expect(try await Self.item(session, "1")?["reminded"] == .bool(true))
                #expect(try await Self.timerChanges(session).count == 1)
            }
        }
    }
}
