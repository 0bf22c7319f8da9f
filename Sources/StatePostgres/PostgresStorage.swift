import Logging
import NIOCore
import PostgresNIO
import StatePersistence
import Synchronization

/// Sessions, journals, snapshots and idempotency replies in PostgreSQL, shared by several
/// server nodes.
///
/// Every batch commits in its own transaction on a pooled connection (`Settings.poolSize`
/// connections at most); concurrent batches run side by side on different connections, and
/// PostgreSQL's unique keys decide races between nodes: a second journal entry for the same
/// (session, feature, version) or (session, seq), a second reply for the same (session, key),
/// or a second session with the same id fails its batch with `.conflict`, and nothing of that
/// batch is stored.
///
/// Failures: no connection within `Settings.connectionWait`, a refused or lost connection,
/// or a server shutting down is `.unavailable`; the pool reconnects by itself (with backoff)
/// once PostgreSQL is back, so the same instance serves again without being re-created.
/// A write whose connection is lost once it was sent (during `COMMIT` among others) reports
/// `.uncertain`, never `.unavailable`: it may have committed (as with any network database),
/// and only the journal can tell (``perform(_:writes:bounded:_:)``).
///
/// The schema is created and migrated at start (``open(settings:logger:)``) under an advisory
/// lock, so nodes starting together do not race; a schema newer than this code knows is
/// `.unusable`.
///
/// Thread-safety: all methods may be called concurrently from any task. No method blocks a
/// thread: the I/O runs on SwiftNIO's event loops.
public final class PostgresStorage: SessionStorage {
    /// The schema version this code creates and understands.
    public static let schemaVersion = 6
    /// The LISTEN/NOTIFY channel: deletes (`D SESSION`), heartbeats (`H`) and, without owners
    /// only, appends (`SEQ SESSION`) are announced on it.
    static let channel = "state_server_changes"

    /// `postgres://USER[:***]@HOST:PORT/DB`: never the password.
    public let name: String
    /// Every node of a cluster writes the same database.
    public var isShared: Bool { true }
    public let settings: Settings
    let client: PostgresClient
    private let runner: Task<Void, Never>
    /// The tasks that hold LISTEN connections (``notices()``).
    let listeners = Mutex<[Task<Void, Never>]>([])
    let logger: Logger
    /// Several nodes: this node's membership (`PostgresStorage+Membership.swift`). The epoch
    /// is 0 while it is not a member; `memberUntil` is when it stops counting itself one, in
    /// nanoseconds since `clockOrigin` on the monotonic clock.
    let membership = Mutex(Membership())
    let currentEpoch = Atomic<Int64>(0)
    let memberUntil = Atomic<Int64>(0)
    /// Until when an answered probe of the lock connection lets this node serve (same clock).
    let lockHeldUntil = Atomic<Int64>(0)
    let clockOrigin = ContinuousClock.now

    /// Since when no connection could be had (`nil`: a connection was leased since), and whether
    /// one caller is trying again meanwhile (see ``perform(_:writes:bounded:_:)``).
    let unreachableSince = Mutex<ContinuousClock.Instant?>(nil)
    let probing = Flag()
    /// Each session's batches in the order they were handed over (``commit(_:done:)``).
    let ordered = OrderedCommitQueues()

    /// Connects, creates or migrates the schema, and returns a storage ready to serve.
    ///
    /// - Throws: `.unavailable` when PostgreSQL cannot be reached within
    ///   `settings.connectionWait`; `.unusable` when the login or database is refused or the
    ///   database's schema is newer than ``schemaVersion``.
    public static func open(
        settings: Settings,
        logger: Logger = Logger(label: "state-server.postgres", factory: { _ in SwiftLogNoOpLogHandler() })
    ) async throws(StorageError) -> PostgresStorage {
        try await probe(settings, logger: logger)
        let storage = PostgresStorage(settings: settings, logger: logger)
        do {
            try await storage.migrate()
        } catch {
            await storage.close()
            throw error
        }
        return storage
    }

    private init(settings: Settings, logger: Logger) {
        self.settings = settings
        self.name = settings.redacted
        self.logger = logger
        var configuration = PostgresClient.Configuration(
            host: settings.host, port: settings.port, username: settings.user, password: settings.password,
            database: settings.database, tls: Self.tls(settings.tls))
        configuration.options.maximumConnections = max(1, settings.poolSize)
        configuration.options.minimumConnections = 0
        configuration.options.connectTimeout = settings.connectionWait
        let (seconds, attoseconds) = settings.statementTimeout.components
        let timeoutMillis = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        // A connection cut off inside a transaction (a partition between BEGIN and COMMIT)
        // would keep its row locks, and every node's writes to that session would wait behind
        // it: PostgreSQL ends such a session after the same time.
        // At least 1 s: the gaps between a transaction's statements are network round trips.
        let idleMillis = timeoutMillis == 0 ? 0 : max(timeoutMillis, 1000)
        configuration.options.additionalStartupParameters = [
            ("statement_timeout", "\(timeoutMillis)"), ("idle_in_transaction_session_timeout", "\(idleMillis)"),
        ]
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.client = client
        runner = Task { await client.run() }
    }

    /// One direct connection before the pool: the pool retries a failed login quietly, while a
    /// start-up must say at once that the password or database is wrong (`.unusable`) or that
    /// nothing answers (`.unavailable`).
    private static func probe(_ settings: Settings, logger: Logger) async throws(StorageError) {
        do {
            let connection = try await connect(settings, logger: logger, id: 0)
            try? await connection.close()
        } catch {
            throw storageError(error, what: "connect", name: settings.redacted, wait: settings.connectionWait)
        }
    }

    /// One connection outside the pool (the start-up probe, the LISTEN connection).
    static func connect(_ settings: Settings, logger: Logger, id: Int) async throws -> PostgresConnection {
        let tls: PostgresConnection.Configuration.TLS
        switch settings.tls {
        case .disable: tls = .disable
        case .prefer: tls = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
        case .require: tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
        }
        var configuration = PostgresConnection.Configuration(
            host: settings.host, port: settings.port, username: settings.user, password: settings.password,
            database: settings.database, tls: tls)
        configuration.options.connectTimeout = .init(settings.connectionWait)
        return try await PostgresConnection.connect(configuration: configuration, id: id, logger: logger)
    }

    private static func tls(_ mode: Settings.TLSMode) -> PostgresClient.Configuration.TLS {
        switch mode {
        case .disable: .disable
        case .prefer: .prefer(.makeClientConfiguration())
        case .require: .require(.makeClientConfiguration())
        }
    }

    /// Closes the pool and ends the notice streams: running operations finish or fail, later
    /// ones fail `.unavailable`.
    public func close() async {
        let (tasks, holder) = membership.withLock { m in
            defer { (m.renewer, m.watcher, m.lockHolder) = (nil, nil, nil) }
            return ([m.renewer, m.watcher], m.lockHolder)
        }
        for task in tasks { task?.cancel() }
        for task in tasks { await task?.value }
        await holder?.closed()
        for listener in membership.withLock({ Array($0.listeners.values) }) { listener.finish() }
        let listeners = listeners.withLock { tasks in
            defer { tasks = [] }
            return tasks
        }
        for task in listeners { task.cancel() }
        for task in listeners { await task.value }
        runner.cancel()
        await runner.value
    }
}
