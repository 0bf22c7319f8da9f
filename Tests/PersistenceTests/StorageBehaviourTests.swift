import Foundation
import StatePersistence
import TestSupport
import Testing

/// The `SessionStorage` contract, run against both storages: whatever passes here for
/// `InMemoryStorage` must pass for `SQLiteStorage`, and the other way round.
@Suite("SessionStorage behaviour (memory and SQLite)")
struct StorageBehaviourTests {
    @Test("sessions: create, get, count; a second create of the same id is a conflict", arguments: Backend.allCases)
    func createAndGet(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.createAndGet($0.storage) }
    }

    @Test("a session is stored with the SHA-256 of its token, never the token")
    func tokenHash() {
        let hash = SHA256.hash("abc")
        #expect(hash.map { String(format: "%02x", $0) }.joined()
            == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test("delete removes the session with its journal, snapshots and replies; other sessions stay", arguments: Backend.allCases)
    func deleteSession(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.deleteSession($0.storage) }
    }

    @Test("journal: reads by store (version order) and by session sequence (seq order, limit)", arguments: Backend.allCases)
    func journalReads(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.journalReads($0.storage) }
    }

    @Test("a batch is atomic: when one write fails, none of the batch is stored", arguments: Backend.allCases)
    func batchIsAtomic(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.batchIsAtomic($0.storage) }
    }

    @Test("a duplicate (session, feature, version) is a conflict that fails only its own batch", arguments: Backend.allCases)
    func duplicateVersionFailsAlone(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.duplicateVersionFailsAlone($0.storage) }
    }

    @Test("appends are fenced: one that does not follow the session's seq and the store's version is refused, also after compaction", arguments: Backend.allCases)
    func appendsAreFenced(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.appendsAreFenced($0.storage) }
    }

    @Test("snapshots: kept per version, found at or before a version, never ahead of the journal", arguments: Backend.allCases)
    func snapshotsPerVersion(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.snapshotsPerVersion($0.storage) }
    }

    @Test("compact keeps a base snapshot before every entry still needed, and drops the rest", arguments: Backend.allCases)
    func compactKeepsBases(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.compactKeepsBases($0.storage) }
    }

    @Test("idempotency keys are stored with their change, read back by key, and never twice", arguments: Backend.allCases)
    func keys(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.keys($0.storage) }
    }

    @Test("a store's state at a version is rebuilt from its base and the patches after it", arguments: Backend.allCases)
    func stateAtVersion(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.stateAtVersion($0.storage) }
    }

    @Test("sessions(inactiveBefore:) lists the least recently active first, up to the limit", arguments: Backend.allCases)
    func inactiveBefore(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.inactiveBefore($0.storage) }
    }

    @Test("sessions(after:limit:) lists sessions in byte order of their ids, after a cursor", arguments: Backend.allCases)
    func listed(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.listed($0.storage) }
    }

    @Test("hasToken finds a live token of the session by its hash only: not another's, not an expired or deleted one", arguments: Backend.allCases)
    func tokenByHash(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.tokenByHash($0.storage) }
    }

    @Test("touch moves a session's last activity forward, never back", arguments: Backend.allCases)
    func touch(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.touch($0.storage) }
    }

    @Test("an empty batch commits and changes nothing", arguments: Backend.allCases)
    func emptyBatch(_ backend: Backend) async throws {
        try await withStorage(backend) { try await StorageBehaviour.emptyBatch($0.storage) }
    }

    @Test("the storage's name says what it is", arguments: Backend.allCases)
    func name(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            switch backend {
            case .memory: #expect(fixture.storage.name == "memory")
            case .sqlite: #expect(fixture.storage.name == "sqlite:\(fixture.path ?? "")")
            }
        }
    }
}
