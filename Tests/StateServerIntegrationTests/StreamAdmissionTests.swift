import TestSupport
import Synchronization
import Testing

/// The per-session stream limit is checked and taken in one step (issue 11 §7): streams opened
/// at the same moment never pass it.
@Suite("Stream admission under concurrency")
struct StreamAdmissionTests {
    @Test("16 streams opened at once on a session limited to 4: exactly 4 get 200, the rest 429")
    func concurrentOpens() async throws {
        try await withServer(environment: ["STATE_SERVER_STREAMS_PER_SESSION": "4"]) { server in
            let session = try await server.api.createSession()
            let streams = try await withThrowingTaskGroup(of: TestSupport.EventStream.self) { group in
                for _ in 0..<16 { group.addTask { try await session.events() } }
                var all: [TestSupport.EventStream] = []
                for try await stream in group { all.append(stream) }
                return all
            }
            defer { for stream in streams { stream.close() } }
            let statuses = streams.map(\.status)
            #expect(statuses.filter { $0 == 200 }.count == 4, "\(statuses.sorted())")
            #expect(statuses.filter { $0 == 429 }.count == 12, "\(statuses.sorted())")
        }
    }
}
