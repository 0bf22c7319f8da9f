// OptimisticStore against the real server binary, through a FaultProxy that adds latency, cuts
// the network and drops replies: predictions show at once, settle to the server's state, survive
// a new store on the same file, and no action applies twice.

import ExampleFeatures
import Foundation
import StateClient
import StateStore
import Synchronization
import TestSupport
import Testing

@Suite("OptimisticStore: prediction, queue, rebase", .timeLimit(.minutes(5)))
struct OptimisticStoreTests {
    @Test("50 sends show at once and settle with the server's state equal to the prediction")
    func fiftySendsSettle() async throws {
        try await withRig { rig in
            rig.proxy.latency = .milliseconds(20)
            let store = try rig.client.optimisticStore(CounterFeature(), credentials: rig.credentials, reconnect: fast)
            // Every prediction published: none may pass the sum of all 50 sends (1,275). An action
            // counted twice (a change that already holds the action whose reply is still out,
            // rebased with it still pending) passes it near the end.
            let expectedTotal = (1...50).reduce(0, +)
            let published = Mutex<[Int]>([])
            let updates = store.updates()
            let collector = Task {
                for await state in updates { published.withLock { $0.append(state.count) } }
            }
            defer { collector.cancel() }
            try await running(store) {
                var expected = 0
                for amount in 1...50 {
                    let predicted = try store.send(.increment(by: amount))
                    expected += amount
                    // Synchronous: the prediction is there before any reply.
                    #expect(predicted.count == expected && store.state.count == expected)
                }
                try await store.settled(timeout: .seconds(60))
                let server = try await rig.direct.state()
                #expect(server.version == 50 && server.state == store.state && store.state.count == expected)
                #expect(store.confirmedVersion == 50 && store.pendingCount == 0)
            }
            let counts = published.withLock { $0 }
            #expect(!counts.isEmpty)
            #expect(counts.allSatisfy { $0 <= expectedTotal }, "predictions that count an action twice: \(counts.filter { $0 > expectedTotal })")
        }
    }

    @Test("10 sends while cut show at once, survive a new store on the same file, and apply once")
    func offlineQueueSurvivesRestart() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("counter.pending.json")
        try await withRig { rig in
            rig.proxy.cut()
            let first = try rig.client.optimisticStore(
                CounterFeature(), credentials: rig.credentials, pendingFile: file, reconnect: fast)
            try await running(first) {
                for number in 1...10 {
                    let predicted = try first.send(.increment(by: 1))
                    #expect(predicted.count == number)
                }
                #expect(first.pendingCount == 10 && first.state.count == 10)
            }
            // The app was killed: a new store on the same file has the queue and the prediction.
            let second = try rig.client.optimisticStore(
                CounterFeature(), credentials: rig.credentials, pendingFile: file, reconnect: fast)
            #expect(second.pendingCount == 10 && second.state.count == 10)
            #expect(try await rig.direct.state().version == 0)

            rig.proxy.heal()
            try await running(second) {
                try await second.settled(timeout: .seconds(60))
            }
            let server = try await rig.direct.state()
            #expect(server.version == 10 && server.state.count == 10)
            #expect(second.state == server.state && second.confirmedVersion == 10)
            // The file is empty now: a third store sends nothing again.
            let third = try rig.client.optimisticStore(
                CounterFeature(), credentials: rig.credentials, pendingFile: file, reconnect: fast)
            #expect(third.pendingCount == 0 && third.state.count == 10 && third.confirmedVersion == 10)
        }
    }

    @Test("replies dropped after the server applied the action cause no duplicate")
    func droppedRepliesApplyOnce() async throws {
        try await withRig { rig in
            rig.proxy.dropReplies(3, matching: "POST ")
            let store = try rig.client.optimisticStore(CounterFeature(), credentials: rig.credentials, reconnect: fast)
            try await running(store) {
                for _ in 1...5 { try store.send(.increment(by: 1)) }
                try await store.settled(timeout: .seconds(60))
            }
            #expect(rig.proxy.droppedReplies == 3)
            let server = try await rig.direct.state()
            #expect(server.version == 5 && server.state.count == 5)
            #expect(store.state == server.state)
        }
    }

    @Test("another client's change is rebased under the pending actions")
    func rebaseUnderPending() async throws {
        try await withRig { rig in
            // The change stream flows; this client's dispatches do not get through yet.
            rig.proxy.block(matching: "POST ")
            let store = try rig.client.optimisticStore(CounterFeature(), credentials: rig.credentials, reconnect: fast)
            try await running(store) {
                try await waitUntil("the first snapshot") { store.confirmedVersion == 0 }
                for _ in 1...3 { try store.send(.increment(by: 1)) }
                #expect(store.state.count == 3)

                try await rig.direct.dispatch(.set(value: 100))
                try await waitUntil("the other client's change under the pending ones", detail: { "\(store.state)" }) {
                    store.confirmedVersion == 1 && store.confirmedState.count == 100 && store.state.count == 103
                        && store.pendingCount == 3
                }

                rig.proxy.unblock()
                try await store.settled(timeout: .seconds(60))
            }
            let server = try await rig.direct.state()
            #expect(server.version == 4 && server.state.count == 103 && store.state == server.state)
        }
    }

    @Test("a refusal by the server rolls the prediction back and is reported once")
    func serverRejection() async throws {
        try await withRig { rig in
            try await rig.direct.dispatch(.set(value: Int.max))
            // This client's copy of the counter has no overflow rule: the server's has.
            let store = try rig.client.optimisticStore(LenientCounter(), credentials: rig.credentials, reconnect: fast)
            let rejections = Collector(store.rejections())
            try await running(store) {
                try await waitUntil("the snapshot") { store.confirmedVersion == 1 }
                let predicted = try store.send(.increment(by: 1))
                #expect(predicted.count == Int.min)
                try await waitUntil("the rollback", detail: { "\(store.state)" }) {
                    store.pendingCount == 0 && store.state.count == Int.max
                }
                try store.send(.set(value: 5))
                try await store.settled(timeout: .seconds(60))
            }
            let refused = rejections.items
            #expect(refused.count == 1)
            #expect(refused.first?.action == .increment(by: 1) && refused.first?.error.code == .actionRejected)
            let server = try await rig.direct.state()
            #expect(server.version == 2 && server.state.count == 5 && store.state == server.state)
            rejections.stop()
        }
    }

    @Test("an action first sent longer ago than the key lifetime is not sent again, and is reported")
    func expiredKeyIsNotResent() async throws {
        try await withRig { rig in
            rig.proxy.dropReplies(1, matching: "POST ")
            let store = try rig.client.optimisticStore(
                CounterFeature(), credentials: rig.credentials, reconnect: fast, keyLifetime: .milliseconds(1))
            let rejections = Collector(store.rejections())
            try await running(store) {
                try store.send(.increment(by: 7))
                try await store.settled(timeout: .seconds(60))
                // Applied once by the server before its reply was lost: the stream says so.
                try await waitUntil("the applied change", detail: { "\(store.state)" }) {
                    store.confirmedVersion == 1 && store.state.count == 7
                }
            }
            #expect(rejections.items.map(\.error.code) == [.outcomeUnknown])
            #expect(try await rig.direct.state().version == 1)
            rejections.stop()
        }
    }

    @Test("the local reducer's refusal throws and queues nothing; server-only actions are refused locally")
    func localRefusals() throws {
        let client = StateServerClient(baseURL: URL(string: "http://127.0.0.1:9")!)
        let credentials = SessionCredentials(id: "offline", token: "t")
        let counter = try client.optimisticStore(CounterFeature(), credentials: credentials)
        try counter.send(.set(value: Int.max))
        #expect(throws: ActionRejected.self) { try counter.send(.increment(by: 1)) }
        #expect(counter.pendingCount == 1 && counter.state.count == Int.max)

        let login = try client.optimisticStore(LoginFeature(), credentials: credentials)
        #expect(throws: ActionRejected.self) { try login.send(.succeeded) }
        #expect(login.pendingCount == 0)
    }

    @Test("a pending file of another feature or session is refused")
    func foreignPendingFile() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("pending.json")
        let client = StateServerClient(baseURL: URL(string: "http://127.0.0.1:9")!)
        let credentials = SessionCredentials(id: "one", token: "t")
        let counter = try client.optimisticStore(CounterFeature(), credentials: credentials, pendingFile: file)
        try counter.send(.increment(by: 1))
        #expect(throws: StateClientError.self) {
            try client.optimisticStore(TodosFeature(), credentials: credentials, pendingFile: file)
        }
        #expect(throws: StateClientError.self) {
            try client.optimisticStore(CounterFeature(), credentials: .init(id: "two", token: "t"), pendingFile: file)
        }
    }
}

// MARK: Support

/// Fast retries: the tests cut and drop on purpose.
private let fast = ReconnectPolicy(initialDelay: .milliseconds(50), maximumDelay: .milliseconds(300), jitter: 0.2)

/// A server, a proxy in front of it, a session, a client through the proxy and a counter store
/// straight to the server (another client).
private struct Rig {
    var proxy: FaultProxy
    var client: StateServerClient
    var credentials: SessionCredentials
    var direct: RemoteStore<CounterFeature>
}

private func withRig(_ body: (Rig) async throws -> Void) async throws {
    try await withServer { server in
        let proxy = try FaultProxy(targetPort: server.port)
        defer { proxy.stop() }
        let direct = StateServerClient(baseURL: server.baseURL)
        let credentials = try await direct.createSession()
        try await body(Rig(
            proxy: proxy, client: StateServerClient(baseURL: proxy.baseURL), credentials: credentials,
            direct: direct.store(CounterFeature(), credentials: credentials)))
    }
}

/// Runs `body` while `store.run()` runs, then cancels it; `run()` must not have failed.
private func running<F: Feature>(_ store: OptimisticStore<F>, _ body: () async throws -> Void) async throws {
    let sync = Task { try await store.run() }
    do {
        try await body()
    } catch {
        sync.cancel()
        _ = try? await sync.value
        throw error
    }
    sync.cancel()
    try await sync.value
}

/// Collects a sequence on a task of its own.
private final class Collector<Element: Sendable>: Sendable {
    /// In a box of its own, so the collecting task can hold it.
    private final class Box: Sendable {
        let items = Mutex<[Element]>([])
    }

    private let box = Box()
    private let task: Task<Void, Never>

    init(_ sequence: AsyncStream<Element>) {
        task = Task { [box] in
            for await element in sequence { box.items.withLock { $0.append(element) } }
        }
    }

    var items: [Element] { box.items.withLock { $0 } }
    func stop() { task.cancel() }
}

/// The counter as an older app might have it: no overflow rule (the server's counter refuses
/// what this one predicts).
private struct LenientCounter: Feature {
    typealias State = CounterFeature.State
    typealias Action = CounterFeature.Action
    typealias Effect = Never

    let name = "counter"
    let initialState = State(count: 0)

    func reduce(_ action: Action, state: State, dispatch: Dispatcher<Action>) throws(ActionRejected) -> StateContainer<State, Never> {
        var state = state
        switch action {
        case .increment(let by): state.count &+= by ?? 1
        case .decrement(let by): state.count &-= by ?? 1
        case .set(let value): state.count = value
        }
        return StateContainer(state)
    }
}
