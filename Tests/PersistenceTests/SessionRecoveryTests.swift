import ExampleFeatures
import Foundation
import TestSupport
import StatePersistence
import StateSessions
import StateStore
import Testing

/// Sessions over storage, as a restarted server sees them: a new `SessionManager` over the same
/// storage (the same `InMemoryStorage`, or the SQLite file reopened).
@Suite("Sessions survive a new SessionManager (memory and SQLite storage)")
struct SessionRecoveryTests {
    @Test("state, versions, idempotent replies and the event sequence survive", arguments: Backend.allCases)
    func everythingSurvives(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let first = try exampleManager(fixture.storage)
            let (session, token) = try await first.create()
            try await session.dispatch("counter", #"{"type":"increment","by":2}"#)  // seq 1
            try await session.dispatch("todos", #"{"type":"add","title":"milk"}"#)  // seq 2
            try await session.dispatch("todos", #"{"type":"add","title":"eggs"}"#, key: "add-eggs")  // seq 3
            try await session.dispatch("todos", #"{"type":"toggle","id":"1"}"#)  // seq 4
            try await session.rehydrate("counter", #"{"count":40}"#)  // seq 5
            try await session.dispatch("counter", #"{"type":"decrement"}"#)  // seq 6
            try await session.dispatch("settings", ##"{"type":"setTextColor","color":"#abcdef"}"##)  // seq 7
            try await session.reset("settings")  // seq 8
            try await session.dispatch("settings", ##"{"type":"setBackgroundColor","color":"#00ff00"}"##, key: "green")  // seq 9
            let before = [
                "counter": try await session.current("counter"), "todos": try await session.current("todos"),
                "settings": try await session.current("settings"), "login": try await session.current("login"),
            ]
            #expect(before["counter"] == Snapshot(3, #"{"count":39}"#))
            #expect(before["settings"] == Snapshot(3, ##"{"backgroundColor":"#00FF00","textColor":"#FFFFFF"}"##))
            #expect(session.hub.seq == 9)
            let journal = try await fixture.storage.journal(session: session.id, afterSeq: 0, limit: 100)
            #expect(journal.map(\.seq) == Array(1...9))

            // "Restart".
            let storage = try await fixture.reopen()
            let second = try exampleManager(storage)
            #expect(second.count == 0, "start-up loads nothing")
            #expect(try await second.load(id: session.id, token: "not the token") == nil)
            let reloaded = try #require(try await second.load(id: session.id, token: token))
            #expect(reloaded.hub.seq == 9, "the event sequence continues")
            for (feature, snapshot) in before {
                #expect(try await reloaded.current(feature) == snapshot, "\(feature)")
            }
            #expect(try reloaded.allStates().map(\.version) == [3, 3, 3, 0])

            // The idempotent replies are remembered from storage.
            let eggs = try #require(try await reloaded.rememberedReply(key: "add-eggs"))
            #expect(eggs.version == 2)
            #expect(json(eggs.body)?["state"]?["items"] == json(#"[{"id":"1","title":"milk","done":false,"reminded":false},{"id":"2","title":"eggs","done":false,"reminded":false}]"#))
            #expect(try await reloaded.rememberedReply(key: "green")?.version == 3)
            #expect(try await reloaded.rememberedReply(key: "never-used") == nil)

            // Last-Event-ID from before the restart replays the journaled changes after it.
            // (The events route rebuilds them from the journal before it subscribes.)
            let sink = RecordingSink()
            await reloaded.backfill(after: 6)
            #expect(reloaded.hub.subscribe(features: nil, lastEventID: 6, sink: sink) != .closed)
            let replayed = sink.events
            #expect(replayed.map(\.seq) == [7, 8, 9], "\(replayed)")
            #expect(replayed.map(\.event) == ["state", "state", "state"])
            #expect(replayed.first?.data?["feature"] == .string("settings"))
            #expect(replayed.first?.data?["action"] == json(##"{"type":"setTextColor","color":"#abcdef"}"##))
            #expect(replayed.dropFirst().first?.data?["cause"] == .string("reset"))

            // New changes continue the versions and the sequence, live and in the journal.
            let next = try await reloaded.dispatch("counter", #"{"type":"increment"}"#)
            #expect(next.version == 4)
            #expect(sink.events.last?.seq == 10)
            #expect(sink.events.last?.data?["state"] == json(#"{"count":40}"#))
            #expect(try await storage.lastSeq(session: session.id) == 10)
            let bread = try await reloaded.dispatch("todos", #"{"type":"add","title":"bread"}"#)
            #expect(json(bread.state) == json(
                #"{"items":[{"id":"1","title":"milk","done":true,"reminded":false},{"id":"2","title":"eggs","done":false,"reminded":false},{"id":"3","title":"bread","done":false,"reminded":false}],"nextId":4}"#))
        }
    }

    @Test("a session is stored with its token's hash; wrong tokens, unknown and implausible ids load nothing", arguments: Backend.allCases)
    func tokens(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let manager = try exampleManager(fixture.storage)
            let (session, token) = try await manager.create()
            let stored = try #require(try await fixture.storage.session(id: session.id))
            #expect(stored.tokenHash == SHA256.hash(token))
            #expect(stored.tokenHash != Array(token.utf8))
            #expect(token.utf8.count >= 43, "at least 256 bits")
            #expect(session.id.utf8.count >= 22, "at least 128 bits")

            let other = try exampleManager(try await fixture.reopen())
            #expect(try await other.load(id: session.id, token: token + "x") == nil)
            #expect(try await other.load(id: "unknown-id", token: token) == nil)
            #expect(try await other.load(id: "../../etc", token: token) == nil)
            #expect(try await other.load(id: "", token: token) == nil)
            #expect(other.count == 0)
            let loaded = try #require(try await other.load(id: session.id, token: token))
            #expect(loaded.id == session.id)
            #expect(other.session(id: session.id, token: token) === loaded, "loaded once, then served from memory")
            #expect(try await other.load(id: session.id, token: token) === loaded)
        }
    }

    @Test("concurrent changes to one session get contiguous versions and sequence numbers, and all survive", arguments: Backend.allCases)
    func concurrentChanges(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let manager = try exampleManager(fixture.storage, settings: testSettings(snapshotEvery: 7))
            let (session, token) = try await manager.create()
            let versions = try await withThrowingTaskGroup(of: (String, Int).self) { group in
                for index in 0..<120 {
                    group.addTask {
                        let feature = index % 3 == 0 ? "todos" : "counter"
                        let action = feature == "todos" ? #"{"type":"add","title":"t\#(index)"}"# : #"{"type":"increment"}"#
                        return (feature, try await session.dispatch(feature, action).version)
                    }
                }
                var all: [(String, Int)] = []
                for try await result in group { all.append(result) }
                return all
            }
            #expect(versions.filter { $0.0 == "counter" }.map(\.1).sorted() == Array(1...80))
            #expect(versions.filter { $0.0 == "todos" }.map(\.1).sorted() == Array(1...40))
            let journal = try await fixture.storage.journal(session: session.id, afterSeq: 0, limit: 1000)
            #expect(journal.map(\.seq) == Array(1...120))
            #expect(journal.filter { $0.feature == "counter" }.map(\.version) == Array(1...80), "versions in seq order")
            #expect(session.hub.seq == 120)

            let reloaded = try #require(try await exampleManager(try await fixture.reopen()).load(id: session.id, token: token))
            #expect(try await reloaded.current("counter") == Snapshot(80, #"{"count":80}"#))
            let todos = try await reloaded.current("todos")
            #expect(todos.version == 40)
            if case .array(let items)? = todos.state["items"] { #expect(items.count == 40) } else { Issue.record("\(todos)") }
        }
    }

    @Test("a store is loaded once even when many requests ask for it at the same time", arguments: Backend.allCases)
    func concurrentLoads(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let (session, token) = try await exampleManager(fixture.storage).create()
            for _ in 0..<5 { try await session.dispatch("counter", #"{"type":"increment"}"#) }
            let reloaded = try #require(try await exampleManager(try await fixture.reopen()).load(id: session.id, token: token))
            let stores = try await withThrowingTaskGroup(of: ObjectIdentifier.self) { group in
                for _ in 0..<30 {
                    group.addTask { ObjectIdentifier(try await reloaded.requireStore("counter")) }
                }
                var ids = Set<ObjectIdentifier>()
                for try await id in group { ids.insert(id) }
                return ids
            }
            #expect(stores.count == 1)
            #expect(try await reloaded.current("counter") == Snapshot(5, #"{"count":5}"#))
        }
    }

    @Test("delete removes the session's rows and ends its event streams", arguments: Backend.allCases)
    func deleteRemovesRows(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let manager = try exampleManager(fixture.storage, settings: testSettings(snapshotEvery: 2))
            let (session, token) = try await manager.create()
            let (keep, keepToken) = try await manager.create()
            for _ in 0..<3 { try await session.dispatch("counter", #"{"type":"increment"}"#, key: UUID().uuidString) }
            try await keep.dispatch("counter", #"{"type":"increment"}"#)
            let sink = RecordingSink()
            _ = session.hub.subscribe(features: nil, lastEventID: nil, sink: sink)

            try await manager.delete(session)
            #expect(sink.isClosed)
            #expect(!manager.isLoaded(id: session.id))
            #expect(try await manager.load(id: session.id, token: token) == nil)
            let storage = fixture.storage
            #expect(try await storage.session(id: session.id) == nil)
            #expect(try await storage.journal(session: session.id, afterSeq: 0, limit: 100).isEmpty)
            #expect(try await storage.latestSnapshot(session: session.id, feature: "counter") == nil)
            #expect(try await storage.sessionCount() == 1)

            let other = try exampleManager(try await fixture.reopen())
            #expect(try await other.load(id: session.id, token: token) == nil)
            let kept = try #require(try await other.load(id: keep.id, token: keepToken))
            #expect(try await kept.current("counter") == Snapshot(1, #"{"count":1}"#))
        }
    }
}

/// Loading a store: snapshot plus the journal after it, replayed with side effects off.
@Suite("Store recovery: snapshots, journal replay, follow-up work (memory and SQLite storage)")
struct StoreRecoveryTests {
    @Test("a submit journaled without its follow-up is not re-run after reload: the lost check is settled by a journaled recovery action", arguments: Backend.allCases)
    func pendingFollowUpIsNotRerun(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            // The first "server" never gets to finish its check.
            let first = try exampleManager(fixture.storage, loginCheckDelay: .seconds(3_600))
            let (session, token) = try await first.create()
            try await session.dispatch("login", #"{"type":"submit","username":"ada","password":"correct horse"}"#)
            #expect(try await session.current("login").state["isLoading"] == .bool(true))
            #expect(try await fixture.storage.journal(session: session.id, afterSeq: 0, limit: 10).count == 1)

            let notices = NoticeLog()
            let second = try exampleManager(try await fixture.reopen(), loginCheckDelay: .milliseconds(10), notices: notices)
            let reloaded = try #require(try await second.load(id: session.id, token: token))
            // Replay ran with side effects off: the check (10 ms in this registry, and the
            // password is right) is never run again, so the user is not logged in. The feature's
            // recovery action settles the lost check instead, journaled like any change.
            let restartFailure = "The server restarted during the check; please try again."
            let settled = Snapshot(2, #"{"username":"ada","isLoading":false,"isLoggedIn":false,"error":"\#(restartFailure)"}"#)
            #expect(try await reloaded.current("login") == settled)
            let sink = RecordingSink()
            _ = reloaded.hub.subscribe(features: nil, lastEventID: nil, sink: sink)
            // No check is running, so none can finish later: the state is final as it is.
            #expect(reloaded.loadedStore("login")?.hasRunningWork == false, "a check re-ran")
            #expect(try await reloaded.current("login") == settled, "no check re-ran")
            let journal = try await fixture.storage.journal(session: session.id, afterSeq: 0, limit: 10)
            #expect(journal.map(\.seq) == [1, 2])
            #expect(json(journal.last?.action) == json(#"{"type":"failed","reason":"\#(restartFailure)"}"#))
            #expect(reloaded.hub.seq == 2)
            #expect(sink.events.map(\.event) == ["snapshot"], "nothing after the snapshot: \(sink.events)")
            #expect(notices.followUpsNotStored == 0, "\(notices.description)")

            // The recovery is final: another reload replays it and recovers nothing more.
            let third = try #require(try await exampleManager(try await fixture.reopen(), loginCheckDelay: .milliseconds(10)).load(id: session.id, token: token))
            #expect(try await third.current("login") == settled)
            #expect(try await fixture.storage.lastSeq(session: session.id) == 2)

            // The password never reached the journal.
            let entry = try #require(journal.first)
            #expect(!text(entry.action).contains("correct horse"))
            #expect(!text(entry.delta.bytes).contains("correct horse"))
        }
    }

    @Test("a journaled follow-up (failed) is replayed, not re-run", arguments: Backend.allCases)
    func journaledFollowUpIsReplayed(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let first = try exampleManager(fixture.storage, loginCheckDelay: .milliseconds(10))
            let (session, token) = try await first.create()
            let sink = RecordingSink()
            _ = session.hub.subscribe(features: ["login"], lastEventID: nil, sink: sink)
            try await session.dispatch("login", #"{"type":"submit","username":"ada","password":"short"}"#)
            let settled = try await eventually { try await session.current("login").version == 2 }
            try #require(settled, "the check's follow-up never arrived")
            let expected = Snapshot(2, #"{"username":"ada","isLoading":false,"isLoggedIn":false,"error":"The password must have at least 8 characters."}"#)
            #expect(try await session.current("login") == expected)
            let journal = try await fixture.storage.journal(session: session.id, feature: "login", afterVersion: 0)
            #expect(journal.map(\.seq) == [1, 2])
            #expect(json(journal.last?.action) == json(#"{"type":"failed","reason":"The password must have at least 8 characters."}"#))
            #expect(sink.events.last?.data?["effect"] == json(#"{"type":"toast","message":"The password must have at least 8 characters."}"#))

            let reloaded = try #require(try await exampleManager(try await fixture.reopen()).load(id: session.id, token: token))
            #expect(try await reloaded.current("login") == expected)
            // No work is running, so nothing can finish later: the version is final as it is.
            #expect(reloaded.loadedStore("login")?.hasRunningWork == false, "the check re-ran")
            #expect(try await reloaded.current("login").version == 2, "nothing re-ran")
            #expect(try await fixture.storage.lastSeq(session: session.id) == 2)
            #expect(reloaded.hub.seq == 2)
        }
    }

    @Test("a succeeded follow-up is journaled and logs the user in after reload", arguments: Backend.allCases)
    func succeededFollowUp(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let (session, token) = try await exampleManager(fixture.storage, loginCheckDelay: .milliseconds(10)).create()
            try await session.dispatch("login", #"{"type":"submit","username":"ada","password":"long enough"}"#)
            try #require(try await eventually { try await session.current("login").version == 2 })
            let reloaded = try #require(try await exampleManager(try await fixture.reopen()).load(id: session.id, token: token))
            #expect(try await reloaded.current("login") == Snapshot(2, #"{"username":"ada","isLoading":false,"isLoggedIn":true,"error":null}"#))
        }
    }

    @Test("snapshots every N changes; the reload uses the snapshot plus the journal after it", arguments: Backend.allCases)
    func snapshotsEveryN(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let manager = try exampleManager(fixture.storage, settings: testSettings(snapshotEvery: 3))
            let (session, token) = try await manager.create()
            for _ in 0..<10 { try await session.dispatch("counter", #"{"type":"increment"}"#) }
            for index in 0..<2 { try await session.dispatch("todos", #"{"type":"add","title":"t\#(index)"}"#) }
            let counterSnapshot = try #require(try await fixture.storage.latestSnapshot(session: session.id, feature: "counter"))
            #expect(counterSnapshot.version == 9)
            #expect(counterSnapshot.stateVersion == 1)
            #expect(json(counterSnapshot.state) == json(#"{"count":9}"#))
            #expect(try await fixture.storage.latestSnapshot(session: session.id, feature: "todos")?.version == 1, "todos is at 2 < 3: its first change is its base")

            let reloaded = try #require(try await exampleManager(try await fixture.reopen()).load(id: session.id, token: token))
            #expect(try await reloaded.current("counter") == Snapshot(10, #"{"count":10}"#))
            #expect(try await reloaded.current("todos").version == 2)

            // Proof that the snapshot and what follows it are all a load needs: drop the journal
            // before it behind the server's back.
            try await fixture.storage.commit([
                .compact(session: session.id, feature: "counter", upToVersion: 9, keepLast: 0, keysSince: 0, maxKeys: 10)
            ])
            #expect(try await fixture.storage.journal(session: session.id, feature: "counter", afterVersion: 0).map(\.version) == [10])
            let again = try #require(try await exampleManager(try await fixture.reopen()).load(id: session.id, token: token))
            #expect(try await again.current("counter") == Snapshot(10, #"{"count":10}"#))
        }
    }

    @Test("with a small replay buffer the journal is compacted behind snapshots, and reload still gives the same state", arguments: Backend.allCases)
    func compactedReload(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let notices = NoticeLog()
            let manager = try exampleManager(fixture.storage, settings: testSettings(snapshotEvery: 4, replayBuffer: 2), notices: notices)
            let (session, token) = try await manager.create()
            for index in 0..<11 { try await session.dispatch("todos", #"{"type":"add","title":"item \#(index)"}"#) }
            for _ in 0..<6 { try await session.dispatch("counter", #"{"type":"increment","by":5}"#) }
            let before = (try await session.current("todos"), try await session.current("counter"))
            let todosJournal = try await fixture.storage.journal(session: session.id, feature: "todos", afterVersion: 0)
            #expect(todosJournal.first?.version ?? 0 > 1, "compaction dropped the old entries: \(todosJournal.map(\.version))")

            let reloadNotices = NoticeLog()
            let reloaded = try #require(
                try await exampleManager(try await fixture.reopen(), settings: testSettings(snapshotEvery: 4, replayBuffer: 2), notices: reloadNotices)
                    .load(id: session.id, token: token))
            #expect(try await reloaded.current("todos") == before.0)
            #expect(try await reloaded.current("counter") == before.1)
            #expect(before.1 == Snapshot(6, #"{"count":30}"#))
            #expect(reloadNotices.all.isEmpty, "\(reloadNotices.description)")
            #expect(notices.all.isEmpty, "\(notices.description)")
            #expect(try await reloaded.dispatch("counter", #"{"type":"increment"}"#).version == 7)
        }
    }

    @Test("a snapshot that does not decode is rebuilt from the journal and reported", arguments: Backend.allCases)
    func corruptSnapshotRebuilt(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let manager = try exampleManager(fixture.storage, settings: testSettings(snapshotEvery: 2))
            let (session, token) = try await manager.create()
            // Titles long enough that each change after the snapshot is a patch that needs it.
            let title = String(repeating: "t", count: 200)
            for _ in 0..<5 { try await session.dispatch("todos", #"{"type":"add","title":"\#(title)"}"#) }
            for (index, bad) in [#"{"items":"many"}"#, "not json at all", ""].enumerated() {
                // The latest snapshot (a rebuild writes a sound one for the next load).
                let latest = try #require(try await fixture.storage.latestSnapshot(session: session.id, feature: "todos")).version
                try await fixture.storage.commit([.snapshot(Rows.snapshot(session.id, feature: "todos", version: latest, state: bad))])
                let notices = NoticeLog()
                let reloaded = try #require(
                    try await exampleManager(try await fixture.reopen(), notices: notices).load(id: session.id, token: token))
                let todos = try await reloaded.current("todos")
                #expect(todos.version == 5 + index, "snapshot \(bad.debugDescription)")
                #expect(todos.state["items"].map { if case .array(let items) = $0 { items.count } else { 0 } } == 5 + index)
                let recovery = try #require(notices.recoveries.first, "no notice for \(bad.debugDescription)")
                #expect(notices.recoveries.count == 1)
                #expect(recovery.session == session.id)
                #expect(recovery.feature == "todos")
                #expect(recovery.how == "rebuilt from the journal")
                #expect(!recovery.reason.isEmpty)
                // One more change, so each round's state differs.
                try await reloaded.dispatch("todos", #"{"type":"add","title":"\#(title)"}"#)
            }
        }
    }

    @Test("a journal whose state no longer decodes and whose action no longer replays resets the store after its last version and says so", arguments: Backend.allCases)
    func unreplayableJournalResets(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let (session, token) = try await exampleManager(fixture.storage).create()
            for _ in 0..<3 { try await session.dispatch("counter", #"{"type":"increment"}"#) }
            try await session.dispatch("todos", #"{"type":"add","title":"x"}"#)  // seq 4
            // A journaled state and action this feature no longer understands.
            try await fixture.storage.commit([
                .append(Rows.entry(session.id, seq: 5, version: 4, action: #"{"type":"explode"}"#, state: #"{"count":"four"}"#), idempotencyKey: nil)
            ])

            let notices = NoticeLog()
            let reloaded = try #require(try await exampleManager(try await fixture.reopen(), notices: notices).load(id: session.id, token: token))
            #expect(try await reloaded.current("counter") == Snapshot(5, #"{"count":0}"#), "reset, one version past the last journaled")
            let recovery = try #require(notices.recoveries.first, "\(notices.description)")
            #expect(recovery.how == "reset to the initial state")
            #expect(recovery.feature == "counter")
            let last = try #require(try await fixture.storage.journal(session: session.id, feature: "counter", afterVersion: 4).first)
            #expect(last.cause == "reset")
            #expect(last.version == 5)
            #expect(last.seq == 6, "the reset takes the next sequence number")
            #expect(reloaded.hub.seq == 6)
            #expect(try await reloaded.current("todos") == Snapshot(1, #"{"items":[{"id":"1","title":"x","done":false,"reminded":false}],"nextId":2}"#), "other stores are untouched")
            // The next change continues upward, and the reset is final: a reload replays it.
            #expect(try await reloaded.dispatch("counter", #"{"type":"increment"}"#).version == 6)
            let again = NoticeLog()
            let third = try #require(try await exampleManager(try await fixture.reopen(), notices: again).load(id: session.id, token: token))
            let afterReset = try await third.current("counter")
            #expect(afterReset == Snapshot(6, #"{"count":1}"#), "the increment acknowledged after the reset: \(again.description)")
            #expect(third.hub.seq == 7)
        }
    }
}
