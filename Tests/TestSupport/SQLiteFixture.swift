import Foundation
import StatePersistence
import Synchronization

/// A SQLite database file for one test and the `SQLiteStorage` open on it. `reopen()` closes the
/// storage and opens the file again (what a restarted server sees); `close()` may be called any
/// number of times (a second `SQLiteStorage.close()` would wait for a writer that is gone).
package final class SQLiteDatabase: Sendable {
    package let path: String
    package let maxBytes: Int?
    private let current: Mutex<(storage: SQLiteStorage, isOpen: Bool)>

    /// Opens (creating it if needed) the database at `path`.
    package init(path: String, maxBytes: Int? = nil) throws {
        self.path = path
        self.maxBytes = maxBytes
        current = Mutex((try SQLiteStorage(path: path, maxBytes: maxBytes), true))
    }

    /// The storage open on the file; after `close()`, the one that was.
    package var storage: SQLiteStorage { current.withLock { $0.storage } }

    /// Closes the storage if it is open.
    package func close() async {
        let storage = current.withLock { current -> SQLiteStorage? in
            defer { current.isOpen = false }
            return current.isOpen ? current.storage : nil
        }
        await storage?.close()
    }

    /// Closes the storage and opens the file again.
    @discardableResult
    package func reopen() async throws -> SQLiteStorage {
        await close()
        let fresh = try SQLiteStorage(path: path, maxBytes: maxBytes)
        current.withLock { $0 = (fresh, true) }
        return fresh
    }
}

/// Runs `body` with a `SQLiteStorage` on a fresh file (`name`) in a fresh temporary folder; the
/// storage (the latest, if the body reopened it) is closed and the folder removed afterwards,
/// however the body ends. The body's `database` gives the file's path, `reopen()` and `close()`.
package func withSQLiteStorage<T>(
    _ name: String = "state.sqlite", maxBytes: Int? = nil,
    _ body: (_ storage: SQLiteStorage, _ database: SQLiteDatabase) async throws -> T
) async throws -> T {
    try await withTemporaryDirectory { directory in
        let database = try SQLiteDatabase(path: directory.path(name), maxBytes: maxBytes)
        do {
            let result = try await body(database.storage, database)
            await database.close()
            return result
        } catch {
            await database.close()
            throw error
        }
    }
}

/// Runs `body` with a `SQLiteStorage` opened on the existing (or new) file at `path`, closed
/// afterwards however the body ends; the file stays. For reading what a server process left.
package func withSQLiteStorage<T>(
    at path: String, maxBytes: Int? = nil, _ body: (_ storage: SQLiteStorage) async throws -> T
) async throws -> T {
    let database = try SQLiteDatabase(path: path, maxBytes: maxBytes)
    do {
        let result = try await body(database.storage)
        await database.close()
        return result
    } catch {
        await database.close()
        throw error
    }
}
