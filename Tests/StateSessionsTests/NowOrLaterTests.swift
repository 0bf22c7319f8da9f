// NowOrLater and OutcomePromise: how a change's outcome travels from the session to the socket, now
// when it is here before the caller looks, later otherwise.

import NowOrLater
import Synchronization
@testable import StateSessions
import Testing

private struct Refused: Error, Equatable {
    let code: Int
}

@Suite("Now or later")
struct NowOrLaterTests {
    /// Which failure an outcome is (the tests fill failures: they need no store).
    static func failure(_ outcome: ChangeOutcome?) -> String? {
        guard case .failed(let failure)? = outcome else { return nil }
        return "\(failure)"
    }

    @Test("an outcome given before it is read is now; given after, it is later and awaited")
    func promise() async {
        let early = OutcomePromise()
        early.fill(.failed(.sessionGone))
        early.fill(.failed(.retired))  // only the first counts
        #expect(Self.failure(early.outcome.now) == "sessionGone")

        let late = OutcomePromise()
        let outcome = late.outcome
        #expect(outcome.now == nil)
        let reader = Task { await outcome.value() }
        late.fill(.failed(.retired))
        #expect(Self.failure(await reader.value) == "retired")
    }

    @Test("an outcome given while its reader waits resumes the reader once")
    func fillWhileWaiting() async {
        for _ in 0..<200 {
            let promise = OutcomePromise()
            let outcome = promise.outcome
            async let read = outcome.value()
            promise.fill(.failed(.sessionGone))
            promise.fill(.failed(.retired))
            #expect(Self.failure(await read) == "sessionGone")
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

    @Test("a promised value reaches whenReady from the thread that gives it, once, through map and recover")
    func promisedValue() async throws {
        let promise = OutcomePromise()
        let outcome = promise.outcome
        guard case .promised = outcome else {
            Issue.record("an outcome not given yet is promised, not pending work")
            return
        }
        let seen = Seen()
        outcome.map { Self.failure($0) ?? "applied" }.whenReady { result in
            switch result {
            case .success(let value): seen.add(value)
            }
        }
        #expect(seen.values.isEmpty, "nothing before the value is given")
        promise.fill(.failed(.sessionGone))
        promise.fill(.failed(.retired))
        #expect(seen.values == ["sessionGone"], "given on the filling thread, once")
        // Read after the fill: at once.
        let filled = OutcomePromise()
        let later = filled.outcome
        filled.fill(.failed(.retired))
        #expect(Self.failure(await later.value()) == "retired")

        let refused = NowOrLater<Int, Refused>.promised { done in done(.failure(Refused(code: 503))) }
        #expect(await refused.recover { $0.code }.value() == 503)
        await #expect(throws: Refused(code: 503)) { try await refused.map { $0 + 1 }.value() }
    }
}

/// Values seen by a callback, from any thread.
private final class Seen: Sendable {
    private let list = Mutex<[String]>([])
    func add(_ value: String) { list.withLock { $0.append(value) } }
    var values: [String] { list.withLock { $0 } }
}
