import Configuration
import Logging
import ServiceLifecycle
import StatePersistence
import StatePostgres
import StateSessions

/// Where sessions live.
enum StorageKind: SettingValue, CustomStringConvertible {
    /// In memory only: lost on restart.
    case memory
    /// A SQLite database at `path`.
    case sqlite(path: String)
    /// A PostgreSQL database, shared by every node (`postgres://USER[:PASSWORD]@HOST:PORT/DB`).
    case postgres(PostgresStorage.Settings, url: String)

    static var configType: ConfigType { .string }
    static var expected: String { "'memory', 'sqlite:PATH' or 'postgres://USER[:PASSWORD]@HOST:PORT/DB'" }

    init?(content: ConfigContent) {
        guard case .string(let text) = content else { return nil }
        if text == "memory" {
            self = .memory
        } else if text.hasPrefix("sqlite:"), text.count > "sqlite:".count {
            self = .sqlite(path: String(text.dropFirst("sqlite:".count)))
        } else if PostgresStorage.Settings.isPostgresURL(text), let settings = try? PostgresStorage.Settings(url: text) {
            self = .postgres(settings, url: text)
        } else {
            return nil
        }
    }

    /// The whole value, password included (it travels between configuration layers); what is
    /// shown is ``description``.
    var content: ConfigContent {
        if case .postgres(_, let url) = self { return .string(url) }
        return .string(description)
    }

    var description: String {
        switch self {
        case .memory: "memory"
        case .sqlite(let path): "sqlite:\(path)"
        // Never the password: this is what logs and --print-config show.
        case .postgres(let settings, _): settings.redacted
        }
    }
}

/// When SQLite fsyncs.
enum SyncMode: String, SettingChoice {
    /// Every commit, before the change is acknowledged.
    case full
    /// At checkpoints: survives a crash of the server, not of the machine.
    case normal

    var durability: SQLiteStorage.Durability {
        switch self {
        case .full: .full
        case .normal: .normal
        }
    }
}

/// The storage.
///
/// | key | type | default |
/// | --- | --- | --- |
/// | `storage` | `memory`, `sqlite:PATH` or `postgres://USER[:PASSWORD]@HOST:PORT/DB` | `memory` |
/// | `persistence.maxBytes` | bytes the SQLite database may grow to, 0 = no limit | `1073741824` (1 GiB) |
/// | `persistence.sync` | `full` (fsync every commit) or `normal` (fsync at checkpoints) | `full` |
/// | `cluster.advertiseUrl` | URL the other nodes reach this one by (PostgreSQL) | `""`: the listening address |
/// | `cluster.lease` | seconds a node's membership lasts without renewal (PostgreSQL) | `10` |
/// | `cluster.secret` | the secret every node shares to sign forwarded requests; required with PostgreSQL. Several, comma-separated, while rotating: the first signs, all verify | `""` |
struct StorageSettings: Sendable {
    static let kind = Setting("storage", default: StorageKind.memory, "memory, sqlite:PATH or postgres://URL")
    static let maxBytes = Setting("persistence.maxBytes", default: 1 << 30, in: 0...Int.max, "db size cap, 0 = none")
    static let sync = Setting("persistence.sync", default: SyncMode.full, "full (fsync) or normal")
    static let advertiseURL = Setting("cluster.advertiseUrl", default: "", "URL peers reach this node by")
    static let lease = Setting("cluster.lease", default: 10.0, in: 1...3600, "membership lease seconds")
    static let secret = Setting("cluster.secret", default: "", "shared secret of the nodes (PostgreSQL)")
    /// The shortest secret accepted, in characters (`openssl rand -hex 32` gives 64).
    static let secretMinimum = 32

    var kind: StorageKind
    var maxBytes: Int
    var sync: SyncMode
    /// Several nodes: where the other nodes reach this one (empty: `http://HOST:PORT` of the
    /// listening socket, with the machine's host name for a wildcard address).
    var advertiseURL: String
    var lease: Duration
    /// Several nodes: the cluster secrets (`cluster.secret`, split at commas): the first signs
    /// forwarded requests, every one verifies them. Empty: none set.
    var secrets: [String]

    init(_ read: inout SettingsReader) throws(SettingsError) {
        kind = try read(Self.kind)
        maxBytes = try read(Self.maxBytes)
        sync = try read(Self.sync)
        advertiseURL = try read(Self.advertiseURL)
        lease = .milliseconds(Int(try read(Self.lease) * 1000))
        let secret = try read(Self.secret)
        secrets = secret.split(separator: ",").map { part in
            String(part.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
        }.filter { !$0.isEmpty }
        if !secret.isEmpty, secrets.isEmpty || secrets.contains(where: { $0.utf8.count < Self.secretMinimum }) {
            throw SettingsError.notAllowed(
                key: Self.secret.key,
                allowed: "empty, or secrets of at least \(Self.secretMinimum) characters separated by commas (e.g. `openssl rand -hex 32`)",
                got: "a shorter one")
        }
    }

    /// Opens the storage (`nil` for memory): the database is created, migrated or recovered now.
    func open(logger: Logger) async throws(StorageError) -> (any SessionStorage)? {
        switch kind {
        case .memory:
            return nil
        case .sqlite(let path):
            return try SQLiteStorage(path: path, maxBytes: maxBytes > 0 ? maxBytes : nil, durability: sync.durability)
        case .postgres(var settings, _):
            settings.lease = lease
            return try await PostgresStorage.open(settings: settings, logger: logger)
        }
    }
}

/// Owns an open storage: its `run()` lasts until graceful shutdown, then closes the storage
/// (pending commits are written first). Started first and so stopped last.
struct StorageService: Service, CustomStringConvertible {
    let storage: any SessionStorage
    let logger: Logger

    var description: String { "StorageService(\(storage.name))" }

    func run() async {
        try? await gracefulShutdown()
        // Several nodes: this node's sessions are free for the others at once.
        if let ownership = storage.ownership, ownership.hasJoined { await ownership.leave() }
        await storage.close()
        logger.debug("storage closed", metadata: ["storage": "\(storage.name)"])
    }
}

/// Shared storage: follows the storage's notices (``SessionManager/followOtherNodes()``: other
/// nodes' deletes, their commits on storage without owners, the channel lost and back) until
/// graceful shutdown.
struct FollowerService: Service, CustomStringConvertible {
    let sessions: SessionManager

    var description: String { "FollowerService" }

    func run() async {
        await cancelWhenGracefulShutdown { [sessions] in await sessions.followOtherNodes() }
    }
}

/// Several nodes with one owner per session: follows this node's membership
/// (``SessionManager/followMembership()``) until graceful shutdown.
struct MembershipService: Service, CustomStringConvertible {
    let sessions: SessionManager

    var description: String { "MembershipService" }

    func run() async {
        await cancelWhenGracefulShutdown { [sessions] in await sessions.followMembership() }
    }
}
