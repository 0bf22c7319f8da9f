import ExampleFeatures
import Foundation
import StatePersistence
import StateServerHTTP
import StateSessions
import StateStore
import Testing

/// What one session can pin in memory (issue 11 §2): the replay buffer and remembered replies
/// are bounded in bytes, per session and per server.
@Suite("Memory bounds of a session")
struct MemoryBoundsTests {
    static func manager(replayBytes: Int, serverReplayBytes: Int = 1 << 30, idempotencyBytes: Int = 4 << 20) throws -> SessionManager {
        var settings = testSettings()
        settings.replayBytes = replayBytes
        settings.serverReplayBytes = serverReplayBytes
        settings.idempotencyBytes = idempotencyBytes
        let registry = try ExampleFeatures.registry(loginCheckDelay: .milliseconds(20))
        return SessionManager(
            registry: registry, settings: settings, storage: SessionManager.memoryStorage(registry, settings),
            events: ServerSentEvents())
    }

    @Test("the replay buffer keeps at most replayBytes; a resume from before it gets a snapshot")
    func replayBytesPerSession() async throws {
        let manager = try Self.manager(replayBytes: 20_000)
        let (session, _) = try await manager.create()
        let title = String(repeating: "x", count: 400)
        for _ in 0..<30 { try await session.dispatch("todos", #"{"type":"add","title":"\#(title)"}"#) }
        #expect(session.hub.replaySize <= 20_000, "\(session.hub.replaySize)")
        #expect(session.hub.replaySize > 0)
        let sink = RecordingSink()
        _ = session.hub.subscribe(features: nil, lastEventID: 1, sink: sink)
        #expect(sink.events.first?.event == "snapshot", "events before the kept bytes are gone: \(sink.events.prefix(1))")
        let recent = RecordingSink()
        _ = session.hub.subscribe(features: nil, lastEventID: 29, sink: recent)
        #expect(recent.events.map(\.event) == ["state"], "the latest change is still replayed")
    }

    @Test("all sessions together keep at most serverReplayBytes")
    func replayBytesPerServer() async throws {
        let manager = try Self.manager(replayBytes: 1 << 20, serverReplayBytes: 30_000)
        var sessions: [Session] = []
        for _ in 0..<4 {
            let (session, _) = try await manager.create()
            sessions.append(session)
            for _ in 0..<20 {
                try await session.dispatch("todos", #"{"type":"add","title":"\#(String(repeating: "y", count: 300))"}"#)
            }
        }
        let total = sessions.reduce(0) { $0 + $1.hub.replaySize }
        #expect(total <= 30_000, "\(total)")
    }

    @Test("remembered replies are bounded by idempotency.bytes; a forgotten key applies again in memory mode")
    func replyBytes() async throws {
        let manager = try Self.manager(replayBytes: 1 << 20, idempotencyBytes: 600)
        let (session, _) = try await manager.create()
        for index in 0..<10 {
            try await session.dispatch("counter", #"{"type":"increment"}"#, key: "k\(index)")
        }
        #expect(try await session.rememberedReply(key: "k9") != nil, "the newest reply is kept")
        #expect(try await session.rememberedReply(key: "k0") == nil, "the oldest is forgotten past the byte bound")
    }
}
