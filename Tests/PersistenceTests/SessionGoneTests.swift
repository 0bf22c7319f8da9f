import Foundation
import StatePersistence
import TestSupport
import Testing

/// Writes for a session that does not exist (never created, deleted, purged) are refused with
/// `.sessionGone` in the batch's own transaction, so nothing of a session can outlive its
/// delete. Run on both storages.
@Suite("Writes for a session that is gone (memory and SQLite)")
struct SessionGoneTests {
    /// Every kind of write that names a session, alone.
    static func writes(for id: String) -> [(String, StorageWrite)] {
        [
            ("append", .append(Rows.entry(id, seq: 1, version: 1), idempotencyKey: nil)),
            ("append with a reply", .append(Rows.entry(id, seq: 1, version: 1), idempotencyKey: "k")),
            ("snapshot", .snapshot(Rows.snapshot(id, version: 1, state: #"{"count":1}"#))),
            ("touch", .touch(session: id, at: 9_000)),
            ("compact", .compact(session: id, feature: "counter", upToVersion: 1, keepLast: 0, keysSince: 0, maxKeys: 10)),
        ]
    }

    static func expectNothingStored(of id: String, in storage: any SessionStorage, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        #expect(try await storage.session(id: id) == nil, "\(what)", sourceLocation: sourceLocation)
        #expect(try await storage.journal(session: id, afterSeq: 0, limit: 100).isEmpty, "\(what)", sourceLocation: sourceLocation)
        #expect(try await storage.latestSnapshot(session: id, feature: "counter") == nil, "\(what)", sourceLocation: sourceLocation)
        #expect(try await storage.rememberedKey(session: id, key: "k") == nil, "\(what)", sourceLocation: sourceLocation)
    }

    @Test("every write naming an unknown or deleted session fails as sessionGone, with its whole batch", arguments: Backend.allCases)
    func refused(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let storage = fixture.storage
            try await storage.commit([.createSession(Rows.session("live")), .createSession(Rows.session("deleted"))])
            try await storage.commit([.append(Rows.entry("deleted", seq: 1, version: 1), idempotencyKey: nil)])
            try await storage.commit([.deleteSession(id: "deleted")])
            for id in ["never", "deleted"] {
                for (what, write) in Self.writes(for: id) {
                    // With a good write for another session in the same batch: that one is not
                    // stored either.
                    let error = await storageError { () async throws(StorageError) in
                        try await storage.commit([.append(Rows.entry("live", seq: 1, version: 1), idempotencyKey: "k"), write])
                    }
                    #expect(error?.kind == .sessionGone, "\(what) for \(id): \(String(describing: error))")
                    #expect(error?.message.contains(id) == true, "\(String(describing: error))")
                    try await Self.expectNothingStored(of: id, in: storage, "\(what) for \(id)")
                    #expect(try await storage.lastSeq(session: "live") == 0, "\(what) for \(id): the batch is atomic")
                    #expect(try await storage.rememberedKey(session: "live", key: "k") == nil)
                }
            }
            // A session created earlier in the same batch exists for the writes after it; one
            // deleted earlier in the batch does not.
            try await storage.commit([.createSession(Rows.session("fresh"))] + Self.writes(for: "fresh").dropFirst().map(\.1))
            #expect(try await storage.rememberedKey(session: "fresh", key: "k")?.version == 1)
            let afterDelete = await storageError { () async throws(StorageError) in
                try await storage.commit([.deleteSession(id: "live"), .touch(session: "live", at: 10_000)])
            }
            #expect(afterDelete?.kind == .sessionGone, "\(String(describing: afterDelete))")
            #expect(try await storage.session(id: "live") != nil, "the failed batch's delete was not applied")
            // Create and delete are not refused for a missing session.
            try await storage.commit([.deleteSession(id: "never")])
            try await storage.commit([.createSession(Rows.session("deleted"))])
            #expect(try await storage.lastSeq(session: "deleted") == 0, "a re-created id starts empty")
        }
    }

    @Test("appends racing a delete: each lands before it or fails as sessionGone; afterwards nothing of the session remains", arguments: Backend.allCases)
    func racingDelete(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let storage = fixture.storage
            for round in 0..<5 {
                let id = "racer-\(round)"
                try await storage.commit([.createSession(Rows.session(id))])
                let outcomes = await withTaskGroup(of: StorageError?.self) { group in
                    for seq in 1...40 {
                        group.addTask {
                            await storageError { () async throws(StorageError) in
                                try await storage.commit([
                                    .append(Rows.entry(id, seq: seq, feature: "f\(seq)", version: 1), idempotencyKey: "k\(seq)"),
                                    .snapshot(Rows.snapshot(id, feature: "f\(seq)", version: 1, state: "{}")),
                                    .touch(session: id, at: Int64(seq)),
                                ])
                            }
                        }
                        if seq == 20 {
                            group.addTask {
                                await storageError { () async throws(StorageError) in try await storage.commit([.deleteSession(id: id)]) }
                            }
                        }
                    }
                    var all: [StorageError?] = []
                    for await outcome in group { all.append(outcome) }
                    return all
                }
                // Concurrent appends of one session take turns by its head: one that lost the
                // turn is a conflict; one after the delete is sessionGone.
                for error in outcomes.compactMap({ $0 }) {
                    #expect(error.kind == .sessionGone || error.kind == .conflict, "\(error)")
                }
                #expect(try await storage.session(id: id) == nil)
                #expect(try await storage.journal(session: id, afterSeq: 0, limit: 1_000).isEmpty, "round \(round): rows after the delete")
                #expect(try await storage.lastSeq(session: id) == 0)
                for seq in 1...40 {
                    #expect(try await storage.rememberedKey(session: id, key: "k\(seq)") == nil)
                    #expect(try await storage.latestSnapshot(session: id, feature: "f\(seq)") == nil)
                }
            }
        }
    }
}
