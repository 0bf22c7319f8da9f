import Foundation
import StatePersistence
import StatePostgres
import Synchronization
import TestSupport
import Testing

/// Hands every batch to `storage` at once (no wait between them, as a session pipelining its
/// changes does) and returns their answers in the order they came, with each batch's index.
private func handOver(_ storage: PostgresStorage, _ batches: [[StorageWrite]]) async -> [(Int, Result<Void, StorageError>)] {
    let answers = Mutex<[(Int, Result<Void, StorageError>)]>([])
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        for (index, batch) in batches.enumerated() {
            storage.commit(batch) { result in
                let all = answers.withLock { list -> Bool in
                    list.append((index, result))
                    return list.count == batches.count
                }
                if all { continuation.resume() }
            }
        }
    }
    return answers.withLock { $0 }
}

private func append(_ session: String, seq: Int, version: Int) -> [StorageWrite] {
    [.append(Rows.entry(session, seq: seq, feature: "counter", version: version), idempotencyKey: nil)]
}

@Suite("PostgreSQL ordered commits", .postgres)
struct OrderedCommitsTests {
    @Test("a session's changes handed over while earlier ones commit are stored and answered in the order they were handed over; sessions do not wait for each other")
    func inOrder() async throws {
        try await withPostgresStorage { storage, _ in
            for id in ["a", "b"] {
                try await storage.commit([.createSession(StoredSession(id: id, tokenHash: SHA256.hash(id), createdAt: 1, lastActiveAt: 1))])
            }
            // Interleaved: a1 b1 a2 b2 ... — each fenced on the one before it of its session.
            let batches = (1...40).flatMap { n in [append("a", seq: n, version: n), append("b", seq: n, version: n)] }
            let answers = await handOver(storage, batches)
            #expect(answers.allSatisfy { if case .success = $0.1 { true } else { false } }, "\(answers)")
            for parity in [0, 1] {
                let order = answers.map(\.0).filter { $0 % 2 == parity }
                #expect(order == order.sorted(), "session \(parity == 0 ? "a" : "b") answered out of order: \(order)")
            }
            for id in ["a", "b"] {
                let stored = try await storage.journal(session: id, afterSeq: 0, limit: 100)
                #expect(stored.map(\.seq) == Array(1...40))
                #expect(try await storage.lastSeq(session: id) == 40)
            }
        }
    }

    @Test("a change refused by its fence fails every change handed over on top of it, with its error, and nothing of them is stored; a write of another kind waiting behind them still commits; the next change follows the last stored one")
    func failureFailsWhatWasOnTop() async throws {
        try await withPostgresStorage { storage, _ in
            try await storage.commit([.createSession(StoredSession(id: "s", tokenHash: SHA256.hash("s"), createdAt: 1, lastActiveAt: 1))])
            let batches: [[StorageWrite]] = [
                append("s", seq: 1, version: 1),
                append("s", seq: 2, version: 5),  // not the store's next version: refused
                append("s", seq: 3, version: 3),
                append("s", seq: 4, version: 4),
                [.touch(session: "s", at: 9_000)],
            ]
            let answers = await handOver(storage, batches)
            #expect(answers.map(\.0) == [0, 1, 2, 3, 4])
            let kinds = answers.map { answer -> StorageError.Kind? in
                if case .failure(let error) = answer.1 { error.kind } else { nil }
            }
            #expect(kinds == [nil, .conflict, .conflict, .conflict, nil], "\(answers)")
            let stored = try await storage.journal(session: "s", afterSeq: 0, limit: 10)
            #expect(stored.map(\.seq) == [1])
            #expect(try await storage.session(id: "s")?.lastActiveAt == 9_000)
            // Numbering goes on after the last stored change.
            let again = await handOver(storage, [append("s", seq: 2, version: 2), append("s", seq: 3, version: 3)])
            #expect(again.map(\.0) == [0, 1])
            #expect(again.allSatisfy { if case .success = $0.1 { true } else { false } }, "\(again)")
            #expect(try await storage.journal(session: "s", afterSeq: 0, limit: 10).map(\.seq) == [1, 2, 3])
        }
    }

    @Test("a session that is gone: every change handed over for it fails as sessionGone")
    func goneSession() async throws {
        try await withPostgresStorage { storage, _ in
            let answers = await handOver(storage, (1...5).map { append("nobody", seq: $0, version: $0) })
            #expect(answers.map(\.0) == Array(0..<5))
            for (_, result) in answers {
                guard case .failure(let error) = result else {
                    Issue.record("a change for a missing session was stored")
                    continue
                }
                #expect(error.kind == .sessionGone, "\(error)")
            }
        }
    }
}
