// The parts a Session is composed of, each owning its state (issue 27 item 3): the pipeline,
// the idempotency cache, the catch-up marks and the table of loaded stores, tested alone.

import ExampleFeatures
import StatePersistence
@testable import StateSessions
import StateStore
import Synchronization
import Testing

@Suite("Session parts")
struct SessionPartsTests {
    static func change(_ log: Log, _ name: String) -> SessionPipeline.Job {
        .change(ChangeRequest(feature: "counter", kind: .reset)) { outcome in
            log.entries.withLock { $0.append("\(name): \(outcome.isFailedWith ?? "done")") }
        }
    }

    @Test("the pipeline runs one job at a time: the first runs, the rest wait in arrival order")
    func pipelineOrder() {
        let pipeline = SessionPipeline()
        let log = Log()
        guard case .run = pipeline.admit(Self.change(log, "a")) else {
            Issue.record("the first job did not run")
            return
        }
        #expect(pipeline.isRunning)
        for name in ["b", "c"] {
            guard case .queued = pipeline.admit(Self.change(log, name)) else {
            Issue.record("\(name) did not wait")
            return
        }
        }
        var order: [String] = []
        while case let (job?, refused) = pipeline.next() {
            #expect(refused.isEmpty)
            if case .change(_, let done) = job { done(.failed(.retired)) }
            order = log.entries.withLock { $0 }
        }
        #expect(order == ["b: retired", "c: retired"])
        #expect(!pipeline.isRunning, "idle once nothing waits")
        guard case .run = pipeline.admit(Self.change(log, "d")) else {
            Issue.record("an idle pipeline did not run a job")
            return
        }
    }

    @Test("after a delete, waiting jobs come back to be refused and new ones are refused as gone")
    func pipelineDelete() {
        let pipeline = SessionPipeline()
        let log = Log()
        _ = pipeline.admit(Self.change(log, "a"))
        _ = pipeline.admit(Self.change(log, "b"))
        pipeline.markDeleted()
        let (next, refused) = pipeline.next()
        #expect(next == nil)
        #expect(refused.count == 1)
        #expect(pipeline.isDeleted)
        guard case .refuse(.sessionGone) = pipeline.admit(Self.change(log, "c")) else {
            Issue.record("admitted after a delete")
            return
        }
    }

    @Test("a pipeline retires only when idle and when the session is unused; then it refuses as retired")
    func pipelineRetire() {
        let pipeline = SessionPipeline()
        let log = Log()
        _ = pipeline.admit(Self.change(log, "a"))
        #expect(!pipeline.retire { true }, "retired while a job runs")
        _ = pipeline.next()
        #expect(!pipeline.retire { false }, "retired while the session is in use")
        #expect(pipeline.retire { true })
        #expect(!pipeline.retire { true }, "retired twice")
        guard case .refuse(.retired) = pipeline.admit(Self.change(log, "b")) else {
            Issue.record("admitted after retiring")
            return
        }
    }

    static func reply(_ bytes: Int, version: Int = 1) -> IdempotentReply {
        StoredReply(status: 200, body: [UInt8](repeating: 0x20, count: bytes), version: version)
    }

    @Test("the idempotency cache keeps a key's first reply and forgets the oldest past its counts and bytes")
    func idempotencyBounds() {
        let cache = IdempotencyCache(limit: 3, byteLimit: 100)
        cache.remember("a", Self.reply(10, version: 1))
        cache.remember("a", Self.reply(10, version: 2))
        #expect(cache.reply(for: "a")?.version == 1, "the first reply stays")
        for key in ["b", "c", "d"] { cache.remember(key, Self.reply(10)) }
        #expect(cache.reply(for: "a") == nil, "the oldest left past 3 replies")
        #expect(cache.size.replies == 3)
        cache.remember("big", Self.reply(101))
        #expect(cache.reply(for: "big") == nil, "a reply over the byte limit is not kept")
        cache.remember("e", Self.reply(90))
        #expect(cache.size.bytes <= 100)
        #expect(cache.reply(for: "e") != nil)
        #expect(IdempotencyCache(limit: 0, byteLimit: 100).reply(for: "x") == nil)
    }

    @Test("the store table makes a store once and answers which features it holds")
    func loadedStores() throws {
        let registry = try FeatureRegistry([CounterFeature()])
        let stores = LoadedStores()
        let made = Log()
        func make() -> (any AnyStateStore)? {
            made.entries.withLock { $0.append("made") }
            return registry["counter"]?.makeStore(onFollowUpRejected: { _ in })
        }
        let first = stores.store("counter") { make() }
        let second = stores.store("counter") { make() }
        #expect(first != nil && first === second)
        #expect(made.entries.withLock { $0.count } == 1)
        #expect(stores.hold(["counter", "unknown"], of: registry))
        stores.remove("counter")
        #expect(!stores.hold(["counter"], of: registry))
        #expect(stores.count == 0)
    }
}

/// Lines written from closures (thread-safe).
final class Log: Sendable {
    let entries = Mutex<[String]>([])
}

extension ChangeOutcome {
    /// The failure's name, for a log.
    var isFailedWith: String? {
        if case .failed(let failure) = self { return "\(failure)" }
        return nil
    }
}
