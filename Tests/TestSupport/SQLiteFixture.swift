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

    /// Opens the file again after a close. The lock file's `flock` is dropped when its
    /// descriptor closes — unless a child process being spawned by another test at that moment
    /// still holds a copy of the descriptor (until its exec closes it): then this process's own
    /// lock is seen for a moment, and the open is tried again, for up to 30 s.
    static func open(path: String, maxBytes: Int?) async throws -> SQLiteStorage {
        var refusal: StorageError?
        let opened = try await poll(timeout: .seconds(30), every: .milliseconds(20)) { () throws -> SQLiteStorage? in
            do throws(StorageError) {
                return try SQLiteStorage(path: path, maxBytes: maxBytes)
            } catch {
                guard error.message.contains("another storage of this process") else { throw error }
                refusal = error
                return nil
            }
        }
        guard let opened else { throw refusal ?? StorageError(.unusable, "\(path) could not be opened") }
        return opened
    }

    /// Closes the storage and opens the file again.
    @discardableResult
    package func reopen() async throws -> SQLiteStorage {
        await close()
        let fresh = try await Self.open(path: path, maxBytes: maxBytes)
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
