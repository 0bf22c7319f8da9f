import Logging
import StateJSON
import StateServerHTTP
import StateSessions
import StateStore
import Synchronization
import TestSupport
import Testing

/// Dispatch middleware, in process: memory storage, and SQLite in the suite's second pass.
@Suite("Middleware around dispatch")
struct MiddlewareTests {
    /// Records what it saw, before and after the reducer; may rewrite counter increments.
    /// Logs each action's cause and type.
    struct CauseRecorder: DispatchMiddleware {
        let log: Log

        func handle(
            _ action: JSONValue, context: DispatchContext,
            next: (JSONValue) throws(StoreError) -> PreparedChange
        ) throws(StoreError) -> PreparedChange {
            if case .object(let fields) = action, case .string(let type)? = fields["type"] { log.add("\(context.cause) \(type)") }
            return try next(action)
        }
    }

    struct Recorder: DispatchMiddleware {
        let name: String
        let log: Log
        var double = false

        func handle(
            _ action: JSONValue, context: DispatchContext,
            next: (JSONValue) throws(StoreError) -> PreparedChange
        ) throws(StoreError) -> PreparedChange {
            log.add("\(name) before \(context.feature)@\(context.version)")
            var action = action
            if double, case .object(var fields) = action, case .int(let by)? = fields["by"] {
                fields["by"] = .int(by * 2)
                action = .object(fields)
            }
            do {
                let change = try next(action)
                log.add("\(name) after v\(change.encoded.version)")
                return change
            } catch {
                log.add("\(name) saw \(error.kind)")
                throw error
            }
        }
    }

    final class Log: Sendable {
        private let lines = Mutex<[String]>([])
        func add(_ line: String) { lines.withLock { $0.append(line) } }
        var all: [String] { lines.withLock { $0 } }
    }

    static func server(_ chain: MiddlewareChain) throws -> InProcessServer {
        var settings = InProcessServer.Settings()
        settings.sessions.middleware = chain
        return try InProcessServer(settings: settings)
    }

    @Test("in registration order, around the reducer: each sees the context and the result; a feature's only its own")
    func order() async throws {
        let log = Log()
        var chain = MiddlewareChain()
        chain.use(Recorder(name: "outer", log: log))
        chain.use(Recorder(name: "counter-only", log: log), for: "counter")
        chain.use(Recorder(name: "inner", log: log))
        let server = try Self.server(chain)
        let session = try await server.api.createSession()
        try await session.dispatchOK("counter", ["type": "increment"])
        try await session.dispatchOK("todos", ["type": "add", "title": "milk"])
        #expect(log.all == [
            "outer before counter@0", "counter-only before counter@0", "inner before counter@0",
            "inner after v1", "counter-only after v1", "outer after v1",
            "outer before todos@0", "inner before todos@0", "inner after v1", "outer after v1",
        ])
        // A refusal of the reducer travels back through the chain.
        let rejected = try await session.dispatch("todos", ["type": "toggle", "id": "99"])
        expectError(rejected, 422, "action_rejected")
        #expect(log.all.suffix(2) == ["inner saw action_rejected", "outer saw action_rejected"])
        await server.stop()
    }

    @Test("a middleware may rewrite the action: the reducer, the reply and the history see the new one")
    func transform() async throws {
        var chain = MiddlewareChain()
        chain.use(Recorder(name: "double", log: Log(), double: true), for: "counter")
        let server = try Self.server(chain)
        let session = try await server.api.createSession()
        let reply = try await session.dispatchOK("counter", ["type": "increment", "by": 5])
        #expect(reply["state"] == ["count": 10])
        let history = try await session.request("GET", "/history")
        #expect(history.json?["changes"]?.array?.first?["action"] == ["type": "increment", "by": 10], "\(history)")
        await server.stop()
    }

    @Test("refusals: 403 forbidden from an allow-list, 422 action_rejected from a rule; nothing applied; other changes untouched")
    func refusals() async throws {
        var chain = MiddlewareChain()
        chain.use(ActionAllowList(["counter.increment", "todos.*", "settings.*", "login.*"]))
        let server = try Self.server(chain)
        let session = try await server.api.createSession()
        try await session.dispatchOK("counter", ["type": "increment"])
        let forbidden = try await session.dispatch("counter", ["type": "set", "value": 99])
        expectError(forbidden, 403, "forbidden")
        #expect(forbidden.json?["error"]?["message"]?.string?.contains("'set'") == true, "\(forbidden)")
        try await session.dispatchOK("todos", ["type": "add", "title": "milk"])
        #expect(try await session.store("counter") == StoreState(version: 1, state: ["count": 1]))
        // Not a dispatch: PUT and DELETE do not go through middleware.
        let put = try await session.request("PUT", "/state/counter", body: JSON.object(["state": ["count": 7]]).bytes)
        #expect(put.status == 200, "\(put)")
        // Follow-ups of asynchronous work neither (login's `succeeded` is not on the list by name,
        // `login.*` lets the client's submit through; the check's result is the server's own).
        var strict = MiddlewareChain()
        strict.use(ActionAllowList(["login.submit"]))
        let strictServer = try Self.server(strict)
        let other = try await strictServer.api.createSession()
        try await other.dispatchOK("login", ["type": "submit", "username": "ada", "password": "long enough"])
        let settled = try await eventually(timeout: .seconds(60)) { try await other.store("login").version == 2 }
        #expect(settled, "the check's follow-up went through")
        #expect(try await other.store("login").state["isLoggedIn"] == true)
        await strictServer.stop()
        await server.stop()
    }

    @Test("a timer's action goes through middleware with cause timer, and an allow list for clients lets it pass")
    func timersPassTheAllowList() async throws {
        let log = Log()
        var chain = MiddlewareChain()
        chain.use(CauseRecorder(log: log), for: "todos")
        // `reminderDue` is not on the list: clients may not send it, the timer may.
        chain.use(ActionAllowList(["todos.add", "todos.remind"]))
        let server = try Self.server(chain)
        let scheduler = Task { await server.sessions.timers.run() }
        defer { scheduler.cancel() }
        let session = try await server.api.createSession()
        try await session.dispatchOK("todos", ["type": "add", "title": "call Ada"])
        expectError(try await session.dispatch("todos", ["type": "cancelReminder", "id": "1"]), 403, "forbidden")
        try await session.dispatchOK("todos", ["type": "remind", "id": "1", "after": 1])
        let fired = try await eventually(timeout: .seconds(30)) {
            try await session.store("todos").state["items"]?[0]?["reminded"] == true
        }
        #expect(fired, "the timer's reminderDue was refused or never fired")
        #expect(try await session.store("todos").version == 3)
        #expect(log.all == ["dispatch add", "dispatch cancelReminder", "dispatch remind", "timer reminderDue"], "\(log.all)")
        await server.stop()
    }

    @Test("AuditLog: one line per dispatch with its outcome, no action fields")
    func auditLog() async throws {
        let lines = Log()
        let logger = Logger(label: "audit") { _ in LineHandler(lines: lines) }
        var chain = MiddlewareChain()
        chain.use(AuditLog(logger: logger))
        chain.use(ActionAllowList(["counter.increment", "login.*"]))
        let server = try Self.server(chain)
        let session = try await server.api.createSession()
        try await session.dispatchOK("counter", ["type": "increment"])
        _ = try await session.dispatch("counter", ["type": "set", "value": 3])
        try await session.dispatchOK("login", ["type": "submit", "username": "ada", "password": "secret words"])
        #expect(lines.all == [
            "audit action=increment applied=1 feature=counter session=\(session.id) version=0",
            "audit action=set feature=counter refused=forbidden session=\(session.id) version=1",
            "audit action=submit applied=1 feature=login session=\(session.id) version=0",
        ])
        #expect(!lines.all.joined().contains("secret"))
        await server.stop()
    }

    /// Keeps each line as `message key=value…` (keys sorted).
    struct LineHandler: LogHandler {
        let lines: Log
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let fields = (event.metadata ?? [:]).map { "\($0.key)=\($0.value)" }.sorted()
            lines.add(([event.message.description] + fields).joined(separator: " "))
        }
    }
}

/// An import as a client goes through the middleware like any client dispatch.
@Suite("Middleware around imported dispatches")
struct ImportMiddlewareTests {
    @Test("the allow-list refuses an imported dispatch it does not list: 403 forbidden and no session; the audit log sees every imported dispatch")
    func allowList() async throws {
        let lines = MiddlewareTests.Log()
        var chain = MiddlewareChain()
        chain.use(AuditLog(logger: Logger(label: "audit") { _ in MiddlewareTests.LineHandler(lines: lines) }))
        chain.use(ActionAllowList(["counter.*"]))
        let server = try MiddlewareTests.server(chain)
        let before = server.sessions.count
        let recording = Recording(
            server: "test",
            features: [
                Recording.Start(name: "counter", stateVersion: 1, version: 0, state: .object(["count": .int(0)])),
                Recording.Start(name: "todos", stateVersion: 1, version: 0, state: .object(["items": .array([]), "nextId": .int(1)])),
            ],
            changes: [
                Recording.Step(
                    seq: 1, feature: "counter", version: 1, cause: "dispatch", action: .object(["type": .string("increment")]),
                    state: .object(["count": .int(1)]), effect: nil),
                Recording.Step(
                    seq: 2, feature: "todos", version: 1, cause: "dispatch",
                    action: .object(["type": .string("add"), "title": .string("milk")]),
                    state: .object([
                        "items": .array([.object(["id": .string("1"), "title": .string("milk"), "done": .bool(false)])]), "nextId": .int(2),
                    ]),
                    effect: nil),
            ])
        let refused = try await server.api.request("POST", "/v1/recordings", body: recording.json)
        expectError(refused, 403, "forbidden")
        #expect(lines.all.count == 2, "\(lines.all)")
        #expect(lines.all.first?.hasPrefix("audit action=increment applied=1 feature=counter") == true, "\(lines.all)")
        #expect(lines.all.last?.contains("action=add feature=todos refused=forbidden") == true, "\(lines.all)")
        // The session the import made was deleted again.
        #expect(server.sessions.count == before)
        await server.stop()
    }
}
