import Foundation
import TestSupport
import StatePersistence

import StateSessions
import StateStore
import Synchronization
import Testing

/// The two storages the behaviour suites run against.
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case memory
    case sqlite

    var testDescription: String { rawValue }
}

/// One storage under test, which can be "reopened" the way a restarted server would see it:
/// the same instance for memory (nothing else survives), a new `SQLiteStorage` on the same
/// file for SQLite (TestSupport's `SQLiteDatabase`).
final class StorageFixture: Sendable {
    let backend: Backend
    private let opened: Opened

    private enum Opened: Sendable {
        case memory(InMemoryStorage)
        case sqlite(SQLiteDatabase, TemporaryDirectory)
    }

    var storage: any SessionStorage {
        switch opened {
        case .memory(let storage): storage
        case .sqlite(let database, _): database.storage
        }
    }

    var path: String? {
        guard case .sqlite(let database, _) = opened else { return nil }
        return database.path
    }

    init(_ backend: Backend, maxBytes: Int? = nil) throws {
        self.backend = backend
        switch backend {
        case .memory:
            opened = .memory(InMemoryStorage())
        case .sqlite:
            let directory = try TemporaryDirectory()
            do {
                opened = .sqlite(try SQLiteDatabase(path: directory.path("state.sqlite"), maxBytes: maxBytes), directory)
            } catch {
                directory.remove()
                throw error
            }
        }
    }

    /// Closes the storage and opens it again (SQLite), or hands back the same one (memory).
    @discardableResult
    func reopen() async throws -> any SessionStorage {
        switch opened {
        case .memory(let storage): storage
        case .sqlite(let database, _): try await database.reopen()
        }
    }

    func tearDown() async {
        switch opened {
        case .memory(let storage):
            await storage.close()
        case .sqlite(let database, let directory):
            await database.close()
            directory.remove()
        }
    }
}

/// Runs `body` with a fresh storage of `backend`, closed and removed afterwards.
func withStorage<T>(
    _ backend: Backend, maxBytes: Int? = nil, _ body: (StorageFixture) async throws -> T
) async throws -> T {
    let fixture = try StorageFixture(backend, maxBytes: maxBytes)
    do {
        let result = try await body(fixture)
        await fixture.tearDown()
        return result
    } catch {
        await fixture.tearDown()
        throw error
    }
}
