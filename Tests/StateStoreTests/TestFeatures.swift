import StateStore
import StateStoreTesting
import Synchronization

/// A gate that asynchronous work can wait at until the test opens it. Thread-safe.
final class Gate: Sendable {
    private let inner = Mutex<(isOpen: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    init(open: Bool = false) {
        inner.withLock { $0.isOpen = open }
    }

    func open() {
        let waiting = inner.withLock { inner in
            inner.isOpen = true
            defer { inner.waiting = [] }
            return inner.waiting
        }
        for continuation in waiting { continuation.resume() }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let isOpen = inner.withLock { inner in
                if !inner.isOpen { inner.waiting.append(continuation) }
                return inner.isOpen
            }
            if isOpen { continuation.resume() }
        }
    }
}

/// A small feature that exercises every path of the store: plain changes, rejections, an
/// effect, asynchronous work (held at a gate) and a state that cannot always be encoded.
struct Ledger: Feature {
    let name: String
    let initialState = State(total: 0, finished: [], ratio: 0)
    /// Declared work waits here before sending its follow-up.
    let gate: Gate
    /// The ids of work that started running.
    let started: Recorder<Int>
    /// Tracked work (`startTracked`) records here, once `send` returned, whether its task was
    /// cancelled by then.
    let sent: Recorder<(id: Int, wasCancelled: Bool)>

    init(
        name: String = "ledger", gate: Gate = Gate(open: true), started: Recorder<Int> = Recorder(),
        sent: Recorder<(id: Int, wasCancelled: Bool)> = Recorder()
    ) {
        self.name = name
        self.gate = gate
        self.started = started
        self.sent = sent
    }

    /// Clients may set `total` and `ratio`; `finished` is the server's (kept from the current
    /// state), and a negative total is refused.
    func clientRehydrate(_ proposed: State, current: State) throws(ActionRejected) -> State {
        guard proposed.total >= 0 else { throw ActionRejected("total must not be negative") }
        var accepted = proposed
        accepted.finished = current.finished
        return accepted
    }

    struct State: Codable, Sendable, Equatable {
        var total: Int
        /// Ids of work whose follow-up arrived.
        var finished: [Int]
        /// A Double, so a test can make the state unencodable (NaN).
        var ratio: Double
    }

    enum Action: Codable, Sendable, Equatable {
        case add(amount: Int)
        case label(text: String?)
        case announce(message: String)
        case refuse(reason: String)
        case setRatio(value: Double)
        /// Declares work that waits at the gate, then sends `finished(id:)`.
        case startWork(id: Int)
        case finished(id: Int)
        /// Declares work that sends `refuse`, which the reducer rejects.
        case startDoomedWork
        /// Declares work, then rejects the action.
        case startWorkThenRefuse(id: Int)
        /// Declares work with the id `id` (cancelling work of that id in flight when
        /// `replacing`): it waits at the gate (ignoring cancellation), sends `finished(id:)`, then
        /// records in `sent`.
        case startTracked(id: Int, replacing: Bool)
        /// Cancels the work with the id `id`.
        case cancel(id: Int)
    }

    enum Effect: Codable, Sendable, Equatable {
        case toast(message: String)
    }

    func reduce(
        _ action: Action, state: State, dispatch: Dispatcher<Action>
    ) throws(ActionRejected) -> StateContainer<State, Effect> {
        var state = state
        switch action {
        case .add(let amount):
            state.total += amount
        case .label:
            break
        case .announce(let message):
            return StateContainer(state, effect: .toast(message: message))
        case .refuse(let reason):
            throw ActionRejected(reason)
        case .setRatio(let value):
            state.ratio = value
        case .startWork(let id):
            dispatch.run { [gate, started] send in
                started.append(id)
                await gate.wait()
                await send(.finished(id: id))
            }
        case .finished(let id):
            state.finished.append(id)
        case .startDoomedWork:
            dispatch.run { send in await send(.refuse(reason: "too late")) }
        case .startWorkThenRefuse(let id):
            dispatch.run { [started] send in
                started.append(id)
                await send(.finished(id: id))
            }
            throw ActionRejected("refused after declaring work")
        case .startTracked(let id, let replacing):
            dispatch.run(id: id, cancelInFlight: replacing) { [gate, started, sent] send in
                started.append(id)
                await gate.wait()
                await send(.finished(id: id))
                sent.append((id, Task.isCancelled))
            }
        case .cancel(let id):
            dispatch.cancel(id: id)
        }
        return StateContainer(state)
    }
}

/// The least a feature can be: a name and a constant state.
struct Named: Feature {
    let name: String
    let initialState = State(value: 1)

    struct State: Codable, Sendable, Equatable {
        var value: Int
    }

    enum Action: Codable, Sendable, Equatable {
        case noop
    }

    func reduce(
        _ action: Action, state: State, dispatch: Dispatcher<Action>
    ) throws(ActionRejected) -> StateContainer<State, Never> {
        StateContainer(state)
    }
}

/// A list of notes with a small size ceiling, for the state size limit.
struct Notes: Feature {
    let name = "notes"
    let initialState = State(notes: [])
    let maxStateBytes: Int

    struct State: Codable, Sendable, Equatable {
        var notes: [String]
    }

    enum Action: Codable, Sendable, Equatable {
        case add(text: String)
    }

    func reduce(
        _ action: Action, state: State, dispatch: Dispatcher<Action>
    ) throws(ActionRejected) -> StateContainer<State, Never> {
        var state = state
        switch action {
        case .add(let text): state.notes.append(text)
        }
        return StateContainer(state)
    }
}
