// PostgresStorage's notices and turns: the LISTEN connection with its heartbeat, and advisory-lock turns.
import Logging
import NIOCore
import PostgresNIO
import StatePersistence
import Synchronization

extension PostgresStorage {
    // MARK: - Notices and turns

    /// How often a listening node sends a heartbeat on ``channel`` through its pool; a LISTEN
    /// connection that hears nothing at all for ``silenceLimit`` is taken as lost.
    static let heartbeat = Duration.seconds(2)
    static let silenceLimit = Duration.seconds(6)

    /// Every node's deletes (and, on storage without owners, its commits: an append with owners
    /// sends no NOTIFY), heard on a connection of its own that LISTENs on ``channel``. A broken connection is `.lost`; it reconnects by itself (after 0.1 s, then
    /// doubling up to 5 s) and says `.listening` again. A half-open connection (PostgreSQL gone
    /// without a reset, a black-holed network) would stay silent for as long as TCP takes to
    /// notice: while listening, the node NOTIFYs a heartbeat every ``heartbeat`` through its
    /// pool, and a connection that hears nothing — not even that — for ``silenceLimit`` is
    /// closed and counts as lost (streams end and `/readyz` fails until it is back).
    public func notices() -> AsyncStream<StorageNotice> {
        let (stream, continuation) = AsyncStream<StorageNotice>.makeStream()
        let settings = settings
        let logger = logger
        let task = Task { [self] in
            var delay = Duration.milliseconds(100)
            var listening = false
            while !Task.isCancelled {
                var connection: PostgresConnection?
                do {
                    let opened = try await Self.connect(settings, logger: logger, id: 1)
                    connection = opened
                    try await opened.listen(on: Self.channel) { notifications in
                        listening = true
                        delay = .milliseconds(100)
                        continuation.yield(.listening)
                        let heard = Mutex(ContinuousClock.now)
                        // One heartbeat at a time: with PostgreSQL unreachable they would pile up.
                        let beating = Flag()
                        let watchdog = Task { [self] in
                            var sent = ContinuousClock.now
                            while !Task.isCancelled {
                                try? await Task.sleep(for: .milliseconds(500))
                                if Task.isCancelled { return }
                                if ContinuousClock.now - sent >= Self.heartbeat, beating.raise() {
                                    sent = .now
                                    // Not awaited: a PostgreSQL that does not answer must not
                                    // delay the silence check below.
                                    Task {
                                        _ = try? await perform("send a heartbeat") { connection, logger in
                                            _ = try await connection.query("SELECT pg_notify(\(Self.channel), 'H')", logger: logger)
                                        }
                                        beating.lower()
                                    }
                                }
                                if ContinuousClock.now - heard.withLock({ $0 }) > Self.silenceLimit {
                                    logger.warning(
                                        "the LISTEN connection heard nothing, not even its own heartbeat: reconnecting",
                                        metadata: ["silence.limit": "\(Self.silenceLimit)"])
                                    try? await opened.close()
                                    return
                                }
                            }
                        }
                        defer { watchdog.cancel() }
                        for try await notification in notifications {
                            heard.withLock { $0 = ContinuousClock.now }
                            if let notice = Self.notice(notification.payload) { continuation.yield(notice) }
                        }
                    }
                } catch {
                    logger.debug("LISTEN connection failed", metadata: ["error": "\(String(reflecting: error))"])
                }
                try? await connection?.close()
                if Task.isCancelled { break }
                if listening {
                    listening = false
                    continuation.yield(.lost)
                }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(5))
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        listeners.withLock { $0.append(task) }
        return stream
    }

    /// A notice from its payload (`SEQ SESSION` or `D SESSION`); `nil` for anything else.
    static func notice(_ payload: String) -> StorageNotice? {
        guard let space = payload.firstIndex(of: " ") else { return nil }
        let head = payload[..<space]
        let session = String(payload[payload.index(after: space)...])
        guard !session.isEmpty else { return nil }
        if head == "D" { return .deleted(session: session) }
        guard let seq = Int(head), seq > 0 else { return nil }
        return .committed(session: session, seq: seq)
    }

    /// Runs `body` while holding a session-level advisory lock named after `job`, taken with
    /// `pg_try_advisory_lock` on a leased connection: `nil` at once when another node holds it.
    /// The connection stays leased while `body` runs (so `body`'s own queries need a pool of at
    /// least 2); if it breaks, PostgreSQL releases the lock.
    public func exclusively<T: Sendable>(_ job: String, _ body: @escaping @Sendable () async -> T) async throws(StorageError) -> T? {
        let key = Self.lockKey("state-server:" + job)
        return try await perform("take the \(job) turn", bounded: false) { connection, logger -> T? in
            let rows = try await connection.query("SELECT pg_try_advisory_lock(\(key))", logger: logger)
            var taken = false
            for try await value in rows.decode(Bool.self) { taken = value }
            guard taken else { return nil }
            let result = await body()
            _ = try? await connection.query("SELECT pg_advisory_unlock(\(key))", logger: logger)
            return result
        }
    }

    /// A stable 64-bit key for an advisory lock (FNV-1a of the name).
    static func lockKey(_ name: String) -> Int64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in name.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return Int64(bitPattern: hash)
    }
}
