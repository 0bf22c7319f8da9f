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
/// file for SQLite.
final class StorageFixture: Sendable {
    let backend: Backend
    let directory: TemporaryDirectory?
    let maxBytes: Int?
    private let current: Mutex<any SessionStorage>

    var storage: any SessionStorage { current.withLock { $0 } }
    var path: String? { directory?.path("state.sqlite") }

    init(_ backend: Backend, maxBytes: Int? = nil) throws {
        self.backend = backend
        self.maxBytes = maxBytes
        switch backend {
        case .memory:
            directory = nil
            current = Mutex(InMemoryStorage())
        case .sqlite:
            let directory = try TemporaryDirectory()
            self.directory = directory
            current = Mutex(try SQLiteStorage(path: directory.path("state.sqlite"), maxBytes: maxBytes))
        }
    }

    /// Closes the storage and opens it again (SQLite), or hands back the same one (memory).
    @discardableResult
    func reopen() async throws -> any SessionStorage {
        guard backend == .sqlite, let path else { return storage }
        await storage.close()
        let fresh = try SQLiteStorage(path: path, maxBytes: maxBytes)
        current.withLock { $0 = fresh }
        return fresh
    }

    func tearDown() async {
        await storage.close()
        directory?.remove()
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

// MARK: - JSON

/// Parses JSON text (test literals); fails the test on bad JSON.
func json(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> JSONValue {
    guard let value = JSONCoding.parse(Array(text.utf8)) else {
        Issue.record("not JSON: \(text)", sourceLocation: sourceLocation)
        return .null
    }
    return value
}

func json(_ bytes: [UInt8]?) -> JSONValue? {
    bytes.flatMap { JSONCoding.parse($0) }
}

func text(_ bytes: [UInt8]?) -> String {
    bytes.map { String(decoding: $0, as: UTF8.self) } ?? "nil"
}

// MARK: - Catching typed errors

