// NowOrLater and Promise: how a change's outcome travels from the session to the socket, now
// when it is here before the caller looks, later otherwise.

import NowOrLater
import Testing

private struct Refused: Error, Equatable {
    let code: Int
}

@Suite("Now or later")
struct NowOrLaterTests {
    @Test("a promise filled before it is read is now; filled after, it is later and awaited")
    func promise() async {
        let early = Promise<Int>()
        early.fill(1)
        early.fill(2)  // only the first counts
        #expect(early.outcome.now == 1)

        let late = Promise<Int>()
        let outcome = late.outcome
        #expect(outcome.now == nil)
        let reader = Task { await outcome.value() }
        late.fill(3)
        #expect(await reader.value == 3)
    }

    @Test("a promise filled while its reader waits resumes the reader once")
    func fillWhileWaiting() async {
        for _ in 0..<200 {
            let promise = Promise<Int>()
            let outcome = promise.outcome
            async let read = outcome.value()
            promise.fill(7)
            promise.fill(8)
            #expect(await read == 7)
        }
    }

    @Test("map and recover keep now now, and carry later work and its failure")
    func mapAndRecover() async throws {
        let now = NowOrLater<Int, Refused>.now(2)
        #expect(now.map { $0 * 10 }.now == 20)
        #expect(now.recover { $0.code }.now == 2)

        let later = NowOrLater<Int, Refused>.later { () throws(Refused) in 4 }
        #expect(later.now == nil)
        #expect(try await later.map { $0 + 1 }.value() == 5)

        let failing = NowOrLater<Int, Refused>.later { () throws(Refused) in throw Refused(code: 409) }
        await #expect(throws: Refused(code: 409)) { try await failing.value() }
        await #expect(throws: Refused(code: 409)) { try await failing.map { $0 + 1 }.value() }
        #expect(await failing.recover { $0.code }.value() == 409)
    }
}
