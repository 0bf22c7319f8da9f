import CSQLite

/// A thin wrapper over one SQLite connection. Not thread-safe: each connection is confined to
/// one thread or serial queue (the storage's writer thread, or its reader queue); that
/// confinement is why it may be handed to those (`@unchecked Sendable`).
final class SQLiteConnection: @unchecked Sendable {
    let handle: OpaquePointer
    let path: String
    private var statements: [String: OpaquePointer] = [:]

    init(path: String, readOnly: Bool) throws(StorageError) {
        var db: OpaquePointer?
        let flags = (readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
            if let db { sqlite3_close_v2(db) }
            throw StorageError(.unusable, "cannot open \(path): \(message)")
        }
        handle = db
        self.path = path
        sqlite3_busy_timeout(db, 5000)
        sqlite3_extended_result_codes(db, 1)
    }

    deinit {
        for statement in statements.values { sqlite3_finalize(statement) }
        sqlite3_close_v2(handle)
    }

    var errorMessage: String { String(cString: sqlite3_errmsg(handle)) }

    /// Gives the page cache back to the allocator when it holds more than `bytes`: after a
    /// large read (a store's base state spans many overflow pages) the cache would otherwise
    /// keep a copy of it for as long as the connection lives.
    func releaseCache(above bytes: Int) {
        var used: Int32 = 0
        var highwater: Int32 = 0
        guard sqlite3_db_status(handle, SQLITE_DBSTATUS_CACHE_USED, &used, &highwater, 0) == SQLITE_OK,
            Int(used) > bytes
        else { return }
        sqlite3_db_release_memory(handle)
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    var changes: Int { Int(sqlite3_changes(handle)) }

    /// Whether a transaction is open. SQLite may roll back a whole transaction by itself on
    /// SQLITE_FULL, SQLITE_IOERR or SQLITE_NOMEM (not only the failing statement): after any
    /// failure inside a transaction, this says whether there still is one.
    var inTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    func error(_ rc: Int32, _ what: String) -> StorageError {
        let primary = rc & 0xFF
        let kind: StorageError.Kind = primary == SQLITE_CONSTRAINT ? .conflict : .unavailable
        return StorageError(kind, "\(what): \(errorMessage) (code \(rc))")
    }

    /// Runs SQL without results (several statements allowed).
    func exec(_ sql: String) throws(StorageError) {
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &message)
        if rc != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? errorMessage
            sqlite3_free(message)
            let primary = rc & 0xFF
            let kind: StorageError.Kind = primary == SQLITE_CONSTRAINT ? .conflict : .unavailable
            throw StorageError(kind, "\(text) (code \(rc))")
        }
    }

    /// A cached prepared statement, reset and with cleared bindings.
    func statement(_ sql: String) throws(StorageError) -> Statement {
        if let cached = statements[sql] {
            sqlite3_reset(cached)
            sqlite3_clear_bindings(cached)
            return Statement(connection: self, handle: cached)
        }
        var prepared: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &prepared, nil)
        guard rc == SQLITE_OK, let prepared else { throw error(rc, "prepare") }
        statements[sql] = prepared
        return Statement(connection: self, handle: prepared)
    }

    /// Runs one statement with `values`, ignoring rows.
    func run(_ sql: String, _ values: [SQLValue]) throws(StorageError) {
        let statement = try statement(sql)
        try statement.bind(values)
        while try statement.step() {}
    }

    /// Runs one query and maps each row.
    func query<T>(_ sql: String, _ values: [SQLValue], _ row: (Statement) -> T) throws(StorageError) -> [T] {
        let statement = try statement(sql)
        try statement.bind(values)
        var rows: [T] = []
        while try statement.step() { rows.append(row(statement)) }
        return rows
    }
}

enum SQLValue {
    case int(Int64)
    case text(String)
    case blob([UInt8])
    case null
}

struct Statement {
    let connection: SQLiteConnection
    let handle: OpaquePointer

    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    func bind(_ values: [SQLValue]) throws(StorageError) {
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let rc: Int32
            switch value {
            case .int(let v): rc = sqlite3_bind_int64(handle, index, v)
            case .text(let v): rc = sqlite3_bind_text(handle, index, v, -1, Self.transient)
            case .blob(let v):
                rc = v.withUnsafeBytes { raw in
                    sqlite3_bind_blob(handle, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(raw.count), Self.transient)
                }
            case .null: rc = sqlite3_bind_null(handle, index)
            }
            guard rc == SQLITE_OK else { throw connection.error(rc, "bind") }
        }
    }

    /// Advances; `true` while there is a row.
    func step() throws(StorageError) -> Bool {
        let rc = sqlite3_step(handle)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw connection.error(rc, "step")
        }
    }

    func int(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }

    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

    func text(_ column: Int32) -> String {
        guard let pointer = sqlite3_column_text(handle, column) else { return "" }
        return String(cString: pointer)
    }

    func blob(_ column: Int32) -> [UInt8]? {
        guard sqlite3_column_type(handle, column) != SQLITE_NULL else { return nil }
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0, let base = sqlite3_column_blob(handle, column) else { return [] }
        return Array(UnsafeRawBufferPointer(start: base, count: count))
    }
}
