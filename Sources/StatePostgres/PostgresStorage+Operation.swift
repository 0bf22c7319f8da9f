// PostgresStorage's operations: leasing a connection under time-outs, and what a failure means.
import Logging
import NIOCore
import PostgresNIO
import StatePersistence
import Synchronization

extension PostgresStorage {
    // MARK: - Running an operation

    /// Leases a connection (waiting at most `settings.connectionWait`), runs `body` on it, and
    /// turns every failure into a `StorageError`.
    ///
    /// A write (`writes: true`) whose connection breaks once it was leased may have reached
    /// PostgreSQL and committed: that failure is `.uncertain`, never `.unavailable`. The lease
    /// and the time-out decide once, atomically, which of them won: a connection leased after
    /// the time-out runs nothing.
    func perform<T: Sendable>(
        _ what: String, writes: Bool = false, bounded: Bool = true,
        _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T
    ) async throws(StorageError) -> T {
        let lease = Lease()
        let client = client
        let logger = logger
        let wait = settings.connectionWait
        // Once leased, the operation gets `statementTimeout` (PostgreSQL's own bound) and
        // `answerGrace` (2 s) more: a server that stops answering altogether (a black hole, no reset) cannot enforce
        // its timeout, and the caller — a session's pipeline — must not wait for TCP to give up.
        let limit = (settings.statementTimeout == .zero ? Self.unboundedStatementWait : settings.statementTimeout) + settings.answerGrace
        // PostgreSQL found unreachable moments ago (no connection within `connectionWait`, and
        // none since): fail at once instead of queueing another wait behind the last one, so a
        // session's pipeline drains during an outage. One caller per `connectionWait` still
        // waits, and finds out when it is back.
        let now = ContinuousClock.now
        var probe = false
        if let down = unreachableSince.withLock({ $0 }), now - down < wait {
            guard probing.raise() else {
                throw StorageError(
                    .unavailable, "\(name): cannot \(what): PostgreSQL was unreachable moments ago (no connection within \(wait))")
            }
            probe = true
        }
        defer { if probe { probing.lower() } }
        let answer = Answer<T>()
        let result: Result<T, any Error> = await withCheckedContinuation { continuation in
            answer.await(continuation)
            let work = Task {
                do {
                    let value = try await client.withConnection { connection in
                        guard lease.take() else { throw NoConnection() }
                        answer.leasedAt = .now
                        do {
                            return try await body(connection, logger)
                        } catch {
                            // A server that turned read-only (a standby after a switchover) keeps
                            // refusing writes on this connection: close it, so the pool connects
                            // again — to the new primary, once the address points there.
                            if Self.isReadOnly(error) {
                                logger.warning("PostgreSQL is read-only on this connection (SQLSTATE 25006): closing it")
                                try? await connection.close()
                            }
                            throw error
                        }
                    }
                    answer.give(.success(value))
                } catch {
                    answer.give(.failure(error))
                }
            }
            // Not a child of a task group: a group waits for every child, and a child stuck on
            // a connection that never answers would keep the caller waiting with it.
            answer.timer = Task {
                try? await Task.sleep(for: wait)
                if Task.isCancelled { return }
                if lease.expire() {
                    if answer.give(.failure(NoConnection())) { work.cancel() }
                    return
                }
                guard bounded else { return }
                try? await Task.sleep(until: (answer.leasedAt ?? .now) + limit)
                if Task.isCancelled { return }
                if answer.give(.failure(Unanswered(limit: limit))) { work.cancel() }
            }
        }
        answer.timer?.cancel()
        if lease.taken {
            unreachableSince.withLock { $0 = nil }
        } else if case .failure(let error) = result, error is NoConnection {
            unreachableSince.withLock { $0 = $0 ?? .now }
        }
        switch result {
        case .success(let value):
            return value
        case .failure(let error):
            let failure = Self.storageError(error, what: what, name: name, wait: wait)
            if writes, lease.taken, failure.kind == .unavailable, !(error is StorageError), !Self.isServerError(error) {
                throw StorageError(.uncertain, failure.message + " (the write may have been committed)")
            }
            throw failure
        }
    }

    /// A flag one caller at a time may raise.
    final class Flag: Sendable {
        private let raised = Atomic<Bool>(false)
        /// `true` when this caller raised it (it was down).
        func raise() -> Bool { raised.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged }
        func lower() { raised.store(false, ordering: .sequentiallyConsistent) }
    }

    /// How long a leased operation may take when `statement_timeout` is off.
    static let unboundedStatementWait = Duration.seconds(30)

    /// The first of the operation's outcome and its time-outs, handed to the waiting caller once.
    private final class Answer<T: Sendable>: Sendable {
        private let state = Mutex<(continuation: CheckedContinuation<Result<T, any Error>, Never>?, given: Result<T, any Error>?)>(
            (nil, nil))
        private let timerTask = Mutex<Task<Void, Never>?>(nil)
        private let leased = Mutex<ContinuousClock.Instant?>(nil)

        /// When a connection was leased (the statement's bound counts from there).
        var leasedAt: ContinuousClock.Instant? {
            get { leased.withLock { $0 } }
            set { leased.withLock { $0 = newValue } }
        }

        var timer: Task<Void, Never>? {
            get { timerTask.withLock { $0 } }
            set { timerTask.withLock { $0 = newValue } }
        }

        func await(_ continuation: CheckedContinuation<Result<T, any Error>, Never>) {
            let ready = state.withLock { s -> Result<T, any Error>? in
                if let given = s.given { return given }
                s.continuation = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }

        /// `false` when an outcome was given before (this one is dropped).
        @discardableResult
        func give(_ result: Result<T, any Error>) -> Bool {
            let (first, continuation) = state.withLock { s -> (Bool, CheckedContinuation<Result<T, any Error>, Never>?) in
                guard s.given == nil else { return (false, nil) }
                s.given = result
                let continuation = s.continuation
                s.continuation = nil
                return (true, continuation)
            }
            continuation?.resume(returning: result)
            return first
        }
    }

    /// A leased operation that got no answer within its bound.
    private struct Unanswered: Error, CustomStringConvertible {
        let limit: Duration
        var description: String { "PostgreSQL did not answer within \(limit)" }
    }

    private struct NoConnection: Error {}

    /// Whether PostgreSQL answered the statement with an error of its own (then nothing of it
    /// was committed).
    /// SQLSTATE 25006, read_only_sql_transaction: a write sent to a read-only server.
    static func isReadOnly(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, error.code == .server else { return false }
        return error.serverInfo?[.sqlState] == "25006"
    }

    static func isServerError(_ error: any Error) -> Bool {
        if let error = error as? PSQLError, error.code == .server { return true }
        return false
    }

    /// Who won: the connection (leased) or the time-out (expired), decided once.
    private final class Lease: Sendable {
        private let state = Atomic<Int>(0)  // 0 waiting, 1 leased, 2 expired

        /// The connection's turn: false when the time-out came first.
        func take() -> Bool { state.compareExchange(expected: 0, desired: 1, ordering: .sequentiallyConsistent).exchanged }
        /// The time-out's turn: false when a connection was leased first.
        func expire() -> Bool { state.compareExchange(expected: 0, desired: 2, ordering: .sequentiallyConsistent).exchanged }
        var taken: Bool { state.load(ordering: .sequentiallyConsistent) == 1 }
    }

    /// What a failure means for the caller. Messages name the storage without its password and
    /// quote PostgreSQL's own message and SQLSTATE, never bound values.
    static func storageError(_ error: any Error, what: String, name: String, wait: Duration) -> StorageError {
        if let error = error as? StorageError { return error }
        if error is NoConnection {
            return StorageError(.unavailable, "\(name): cannot \(what): no connection to PostgreSQL within \(wait)")
        }
        if let error = error as? PSQLError {
            if error.code == .server, let info = error.serverInfo {
                let state = info[.sqlState] ?? "?"
                let message = info[.message] ?? "error"
                let text = "\(name): cannot \(what): \(message) (SQLSTATE \(state))"
                switch state {
                case _ where state.hasPrefix("23"): return StorageError(.conflict, text)
                case _ where state.hasPrefix("28"), "3D000", "42501": return StorageError(.unusable, text)
                default: return StorageError(.unavailable, text)
                }
            }
            let cause = error.underlying.map { ": \($0)" } ?? ""
            return StorageError(.unavailable, "\(name): cannot \(what): PostgreSQL connection failed (\(error.code))\(cause)")
        }
        if error is CancellationError {
            return StorageError(.unavailable, "\(name): cannot \(what): cancelled")
        }
        // The pool's own errors (circuit breaker open, shut down) and anything else.
        return StorageError(.unavailable, "\(name): cannot \(what): PostgreSQL is unreachable (\(String(describing: error)))")
    }
}
