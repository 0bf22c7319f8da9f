import Foundation
import StatePersistence
import StateServerHTTP
import StateSessions
import StateStore
import TestSupport
import Testing

/// `sessions.memoryBytes`: the state bytes all loaded sessions of a durable server hold together.
@Suite("The server's memory budget for loaded sessions (memory and SQLite storage)")
struct MemoryBudgetTests {
    /// Two of these make a todo list of about 900 bytes.
    static let bigTitle = String(repeating: "m", count: 430)

    @Test("past sessions.memoryBytes a load evicts idle sessions, least recently used first; with none idle it is refused, and nothing is lost", arguments: Backend.allCases)
    func evictsLeastRecentlyUsedIdle(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            var settings = testSettings()
            settings.memoryBytes = 2_000
            let manager = try exampleManager(fixture.storage, settings: settings)
            let budget = manager.residency
            #expect(budget.memoryLimit == 2_000)
            var sessions: [(session: StateSessions.Session, token: String)] = []
            for _ in 0..<2 {
                let (session, token) = try await manager.create()
                try await session.dispatch("todos", #"{"type":"add","title":"\#(Self.bigTitle)"}"#)
                try await session.dispatch("todos", #"{"type":"add","title":"\#(Self.bigTitle)"}"#)
                sessions.append((session, token))
            }
            #expect(budget.bytes > 1_700 && budget.bytes < 2_000, "two lists: \(budget.bytes)")
            // The third list still loads (under the budget before it), and passes it.
            let (third, _) = try await manager.create()
            try await third.dispatch("todos", #"{"type":"add","title":"\#(Self.bigTitle)"}"#)
            try await third.dispatch("todos", #"{"type":"add","title":"\#(Self.bigTitle)"}"#)
            #expect(budget.bytes > 2_000)

            // A fourth load makes room: the least recently used idle session (the first) leaves.
            _ = try await sessions[1].session.current("todos")
            sessions[1].session.markUsed()
            let (fourth, _) = try await manager.create()
            _ = try await fourth.current("counter")
            #expect(!manager.isLoaded(id: sessions[0].session.id), "the least recently used left memory")
            #expect(manager.isLoaded(id: sessions[1].session.id))
            #expect(manager.isLoaded(id: third.id))
            #expect(budget.bytes < 2_000 + 100, "\(budget.bytes)")

            // Every session loaded is busy (an open event stream): nothing can leave, a load is
            // refused and changes nothing.
            for session in [sessions[1].session, third] {
                _ = session.hub.subscribe(features: nil, lastEventID: nil, sink: RecordingSink())
            }
            try await third.dispatch("todos", #"{"type":"add","title":"\#(Self.bigTitle)"}"#)
            let reloaded = try #require(try await manager.load(id: sessions[0].session.id, token: sessions[0].token))
            let refused = await sessionFailure { () async throws(SessionFailure) in _ = try await reloaded.store("todos") }
            guard case .memoryFull? = refused else {
                Issue.record("expected memoryFull, got \(String(describing: refused))")
                return
            }
            #expect(reloaded.storeCount == 0)

            // Room again (the streams' sessions are deleted): the evicted session's list is intact.
            try await manager.delete(third)
            let todos = try await reloaded.current("todos")
            #expect(todos.version == 2)
            #expect(todos.state["items"].map { if case .array(let items) = $0 { items.count } else { 0 } } == 2)
        }
    }

    @Test("memory mode has no such budget (nothing can leave memory); durable storage counts loads, changes and deletes")
    func counts() async throws {
        let resident = SessionManager(
            registry: FeatureRegistry(), storage: SessionManager.memoryStorage(FeatureRegistry(), SessionSettings()),
            events: ServerSentEvents()
        ).residency
        #expect(resident.memoryLimit == nil && resident.holdsEverySession)
        let storage = InMemoryStorage()
        let manager = try exampleManager(storage)
        let budget = manager.residency
        #expect(budget.memoryLimit != nil && !budget.holdsEverySession)
        let (session, _) = try await manager.create()
        #expect(budget.bytes == 0)
        try await session.dispatch("counter", #"{"type":"increment"}"#)
        let counter = try await session.requireStore("counter").currentJSON().state.count
        #expect(budget.bytes == counter)
        try await session.dispatch("todos", #"{"type":"add","title":"milk"}"#)
        let todos = try await session.requireStore("todos").currentJSON().state.count
        #expect(budget.bytes == counter + todos)
        try await manager.delete(session)
        #expect(budget.bytes == 0, "a deleted session counts nothing")
    }
}
