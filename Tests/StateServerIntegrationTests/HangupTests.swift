import TestSupport
import Testing

@Suite("Clients that hang up")
struct HangupTests {
    @Test("a client that closes its event stream frees the slot at once, not at the next ping")
    func closedStreamFreesItsSlot() async throws {
        // Heartbeat 60 s: within the bound below only the hang-up watcher can free the slot.
        try await withServer(
            arguments: ["--heartbeat", "60"], environment: ["STATE_SERVER_STREAMS_PER_SESSION": "1"]
        ) { server in
            let session = try await server.api.createSession()
            let (first, _) = try await session.subscribe()
            let refused = try await session.events()
            expectError(try await refused.readErrorBody(), 429, "too_many_streams", "second stream while the first is open")
            first.close()
            var reopened: EventStream?
            let freed = try await eventually(timeout: .seconds(20), every: .milliseconds(100)) {
                let attempt = try await session.events()
                if attempt.status == 200 {
                    reopened = attempt
                    return true
                }
                attempt.close()
                return false
            }
            defer { reopened?.close() }
            #expect(freed, "the closed stream's slot was not freed before the next heartbeat")
            // The new stream works.
            try await session.dispatchOK("counter", ["type": "increment"])
            let event = try await reopened?.nextEvent()
            #expect(event?.event == "snapshot" || event?.event == "state")
        }
    }
}
