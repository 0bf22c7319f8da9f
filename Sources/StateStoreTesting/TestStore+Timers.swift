import StateStore
import Testing

/// What ``TestStore/finish(pendingTimers:sourceLocation:)`` makes of timers still pending when
/// a test ends.
public enum PendingTimersAtFinish: Sendable, Equatable {
    /// Any pending timer fails the test, naming it (the default): it would still fire.
    case fail
    /// Pending timers are accepted, whatever they are.
    case ignore
    /// Exactly the timers of these ids must be pending (in any order); others, or missing ones,
    /// fail the test.
    case expect([String])
}

extension TestStore {
    /// The store's pending timers, due first.
    public var pendingTimers: [PendingTimer] { store.pendingTimers }

    /// Moves ``clock`` forward by `duration` and fires, in due order (then by id), every timer
    /// due by then: the clock stops at each one's due time, so what its reducer schedules is
    /// counted from then and fires within the same advance when due. Sleeps on the clock wake as
    /// it passes their deadlines. Each firing is a change (cause `timer`) the test then checks
    /// with ``receive(timer:action:effect:timeout:sourceLocation:_:)``.
    ///
    /// Follow-ups from work woken by the same advance may land before or after a timer's change:
    /// advance in separate steps when their order matters.
    public func advance(by duration: Duration, sourceLocation: SourceLocation = #_sourceLocation) {
        guard duration >= .zero else {
            Issue.record("the clock cannot go back (advance(by: \(duration)))", sourceLocation: sourceLocation)
            return
        }
        let end = clock.now.advanced(by: duration)
        var firings = 0
        while let timer = store.pendingTimers.first, timer.due <= end.milliseconds {
            firings += 1
            guard firings <= Self.maxFiringsPerAdvance else {
                Issue.record(
                    "more than \(Self.maxFiringsPerAdvance) timers fired in one advance: does a timer schedule itself with no delay?",
                    sourceLocation: sourceLocation)
                break
            }
            let toDue = Duration.milliseconds(timer.due) - clock.now.offset
            if toDue > .zero { clock.advance(by: toDue) }
            fire(timer, sourceLocation: sourceLocation)
        }
        let rest = end.offset - clock.now.offset
        if rest > .zero { clock.advance(by: rest) }
    }

    /// How many firings one ``advance(by:sourceLocation:)`` makes at most, so a timer that keeps
    /// scheduling itself with no delay fails the test instead of hanging it.
    static var maxFiringsPerAdvance: Int { 10_000 }

    /// Fires `timer` through the store's firing path (``StateStore/DefaultStateStore/prepareTimer(id:due:action:refused:)``,
    /// then a commit), as the server does. A timer that cannot fire is dropped, after recording
    /// an issue, so the test carries on.
    private func fire(_ timer: PendingTimer, sourceLocation: SourceLocation) {
        do throws(StoreError) {
            // A commit refused because a follow-up changed the store meanwhile is tried again by
            // the caller's loop: the timer is still pending.
            guard let prepared = try store.prepareTimer(id: timer.id, due: timer.due) else { return }
            store.commit(prepared, startWork: true)
        } catch {
            Issue.record("timer '\(timer.id)' could not fire: \(error)", sourceLocation: sourceLocation)
            store.restoreTimers(store.pendingTimers.filter { $0.id != timer.id })
        }
    }

    /// Checks that the next change is the firing of the timer `id` (fired by
    /// ``advance(by:sourceLocation:)``), with `action` when given, and `effect`; `update` turns
    /// the previous state into the expected one. Waits (at most `timeout`) only while declared
    /// work is still running, as a follow-up may come first; otherwise a firing that is not
    /// there fails at once, saying when the timer is due.
    public func receive(
        timer id: String, action: F.Action? = nil, effect: F.Effect? = nil, timeout: Duration = .seconds(10),
        sourceLocation: SourceLocation = #_sourceLocation, _ update: (inout F.State) -> Void = { _ in }
    ) async {
        let next = checked.withLock { $0.count } + 1
        var arrived = changes.count >= next
        if !arrived, store.hasRunningWork { arrived = await changes.wait(forCount: next, timeout: timeout) }
        guard arrived else {
            if let pending = store.pendingTimers.first(where: { $0.id == id }) {
                Issue.record(
                    "timer '\(id)' has not fired: it is due in \(dueIn(pending)); advance the clock",
                    sourceLocation: sourceLocation)
            } else {
                Issue.record("timer '\(id)' has not fired, and no timer of that id is pending", sourceLocation: sourceLocation)
            }
            return
        }
        check(changes.values[next - 1], expected: .timer(id: id, action: action), effect: effect, sourceLocation: sourceLocation, update)
    }

    func checkPendingTimers(_ rule: PendingTimersAtFinish, sourceLocation: SourceLocation) {
        let pending = store.pendingTimers
        switch rule {
        case .ignore:
            return
        case .fail:
            guard !pending.isEmpty else { return }
            let listed = pending.map { "'\($0.id)' (due in \(dueIn($0)))" }.joined(separator: ", ")
            let message =
                "timers are still pending: \(listed); advance the clock to fire them, cancel them, "
                + "or accept them with finish(pendingTimers:)"
            Issue.record(Comment(rawValue: message), sourceLocation: sourceLocation)
        case .expect(let ids):
            let names = pending.map(\.id).sorted()
            #expect(names == ids.sorted(), "pending timers", sourceLocation: sourceLocation)
        }
    }

    /// How long until `timer` is due by ``clock`` (zero when it is due).
    private func dueIn(_ timer: PendingTimer) -> Duration {
        max(.zero, .milliseconds(timer.due) - clock.now.offset)
    }
}

extension TestClock.Instant {
    /// The offset in whole milliseconds: the store's clock (``StateStore/TimerPolicy/now``)
    /// reads a ``TestClock`` as milliseconds since 1970.
    var milliseconds: Int64 {
        let (seconds, attoseconds) = offset.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
