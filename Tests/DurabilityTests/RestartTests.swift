import Foundation
import TestSupport
import StatePersistence
import Testing

/// A clean restart (SIGTERM, start again on the same database) loses nothing a client relies on.
@Suite("Restart on the same SQLite database")
struct RestartTests {
    @Test("state, versions, idempotency keys, tokens and the event sequence survive a restart")
    func restartKeepsEverything() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            let (session, other, keyed, before) = try await withDurableServer(database) { first in
                let session = try await first.api.createSession()
                try await session.dispatchOK("counter", ["type": "increment", "by": 2])  // seq 1
                let keyed = try await session.dispatch(
                    "todos", ["type": "add", "title": "milk"], headers: [("Idempotency-Key", "add-milk")])  // seq 2
                #expect(keyed.status == 200, "\(keyed)")
                let (probe, probeSnapshot) = try await session.subscribe()
                probe.close()
                #expect(probeSnapshot.seq == 2)
                try await session.dispatchOK("settings", ["type": "setTextColor", "color": "#abcdef"])  // seq 3
                let put = try await session.request("PUT", "/state/counter", body: jsonBytes(["state": ["count": 40]]))  // seq 4
                #expect(put.status == 200, "\(put)")
                let reset = try await session.request("DELETE", "/state/settings")  // seq 5
                #expect(reset.status == 200, "\(reset)")
                try await session.dispatchOK("counter", ["type": "decrement"])  // seq 6
                let other = try await first.api.createSession()
                try await other.dispatchOK("counter", ["type": "set", "value": 7])
                let before = try await session.allStores()
                #expect(before["counter"] == StoreState(version: 3, state: ["count": 39]))
                #expect(before["todos"]?.version == 1)
                #expect(before["settings"] == StoreState(version: 2, state: Examples.settings))
                #expect(before["login"] == StoreState(version: 0, state: Examples.login))
                await first.stopCleanly()
                return (session, other, keyed, before)
            }

            try await withDurableServer(database) { second in
                let again = Session(api: second.api, id: session.id, token: session.token)
                #expect(try await again.allStores() == before)
                #expect(try await again.store("counter") == StoreState(version: 3, state: ["count": 39]))
                #expect(try await Session(api: second.api, id: other.id, token: other.token).store("counter")
                    == StoreState(version: 1, state: ["count": 7]))

                // Tokens: the old one works (above); another session's token or a wrong one is 404.
                for token in ["wrong-token", other.token] {
                    let wrong = try await Session(api: second.api, id: session.id, token: token).request("GET", "/state")
                    expectError(wrong, 404, "session_not_found")
                }

                // The idempotency key is remembered: the retry replays the first answer, applying nothing.
                let replay = try await again.dispatch(
                    "todos", ["type": "add", "title": "milk"], headers: [("Idempotency-Key", "add-milk")])
                #expect(replay.status == 200, "\(replay)")
                #expect(replay.header("Idempotent-Replayed") == "true", "\(replay)")
                #expect(replay.json == keyed.json)
                #expect(try await again.store("todos").version == 1)

                // Last-Event-ID from before the restart replays the missed changes from the journal.
                let resumed = try await again.events(headers: [("Last-Event-ID", "2")])
                defer { resumed.close() }
                #expect(resumed.status == 200)
                var replayed: [SSEEvent] = []
                for _ in 0..<4 { replayed.append(try await resumed.nextEvent()) }
                #expect(replayed.map(\.seq) == [3, 4, 5, 6], "\(replayed)")
                #expect(replayed.map(\.event) == ["state", "state", "state", "state"])
                let data = replayed.map { $0.json ?? .null }
                #expect(data[0]["feature"] == "settings")
                #expect(data[0]["action"] == ["type": "setTextColor", "color": "#abcdef"])
                #expect(data[0]["state"]?["textColor"] == "#ABCDEF")
                #expect(data[1]["cause"] == "rehydrate")
                #expect(data[1]["state"] == ["count": 40])
                #expect(data[1]["version"] == 2)
                #expect(data[2]["cause"] == "reset")
                #expect(data[2]["feature"] == "settings")
                #expect(data[3]["action"] == ["type": "decrement"])
                #expect(data[3]["version"] == 3)
                #expect(data[3]["state"] == ["count": 39])

                // The sequence continues: the next change is 7, live on the resumed stream.
                let next = try await again.dispatchOK("counter", ["type": "increment"])
                #expect(next["version"] == 4)
                let live = try await resumed.nextEvent()
                #expect(live.seq == 7, "\(live)")
                #expect(live.json?["version"] == 4)
                let (fresh, snapshot) = try await again.subscribe()
                fresh.close()
                #expect(snapshot.seq == 7)
                #expect(snapshot.json?["features"]?["counter"] == ["version": 4, "state": ["count": 40]])
                #expect(snapshot.json?["features"]?["todos"]?["version"] == 1)
                await second.stopCleanly()
            }
            #expect(try SQLiteStorage.integrityCheck(path: database) == "ok")
        }
    }

    @Test("a change acknowledged just before SIGKILL is there after the restart, with its idempotency key")
    func acknowledgedBeforeKill() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            let (session, last) = try await withDurableServer(database) { first in
                let session = try await first.api.createSession()
                try await session.dispatchOK("todos", ["type": "add", "title": "first"])
                let last = try await session.dispatch(
                    "todos", ["type": "add", "title": "acknowledged"], headers: [("Idempotency-Key", "k-1")])
                #expect(last.status == 200)
                let exit = await first.crash()
                #expect(exit.bySignal && exit.status == SIGKILL, "\(exit)")
                return (session, last)
            }

            try await withDurableServer(database) { second in
                let again = Session(api: second.api, id: session.id, token: session.token)
                let todos = try await again.store("todos")
                #expect(todos.version == 2)
                #expect(todos.state["items"]?[1]?["title"] == "acknowledged")
                let replay = try await again.dispatch(
                    "todos", ["type": "add", "title": "acknowledged"], headers: [("Idempotency-Key", "k-1")])
                #expect(replay.header("Idempotent-Replayed") == "true", "\(replay)")
                #expect(replay.json == last.json)
                await second.stopCleanly()
            }
            #expect(try SQLiteStorage.integrityCheck(path: database) == "ok")
        }
    }

    @Test("a deleted session stays deleted after a restart")
    func deleteIsDurable() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            let session = try await withDurableServer(database) { first in
                let session = try await first.api.createSession()
                try await session.dispatchOK("counter", ["type": "increment"])
                let deleted = try await session.delete()
                #expect(deleted.status == 204, "\(deleted)")
                await first.crash()
                return session
            }

            try await withDurableServer(database) { second in
                let response = try await Session(api: second.api, id: session.id, token: session.token).request("GET", "/state")
                expectError(response, 404, "session_not_found")
                await second.stopCleanly()
            }
            try await withSQLiteStorage(at: database) { storage async throws in
                #expect(try await storage.session(id: session.id) == nil)
                #expect(try await storage.lastSeq(session: session.id) == 0)
            }
        }
    }
}
