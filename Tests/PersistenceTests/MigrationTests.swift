import Foundation
import StatePersistence
import TestSupport
import StateServerHTTP
import StateSessions
import StateStore
import Testing

// Three releases of one feature, `profile`, whose state changed shape:
// - v1 `{"name": "Ada"}`
// - v2 `{"displayName": "Ada", "initials": "A"}` (stateVersion 2, migrates from 1)
// - v3 `{"displayName": "Ada", "initials": "A", "verified": false}` (stateVersion 3, migrates
//   from 2 only: an old v1 snapshot neither decodes nor migrates)
// The action `rename(to:)` is the same in all three, so old journals replay.

struct ProfileV1: Feature {
    let name = "profile"
    let initialState = State(name: "")

    struct State: Codable, Sendable, Equatable {
        var name: String
    }

    enum Action: Codable, Sendable {
        case rename(to: String)
    }

    func reduce(_ action: Action, state: State, dispatch: Dispatcher<Action>) throws(ActionRejected) -> StateContainer<State, Never> {
        switch action {
        case .rename(let to): StateContainer(State(name: to))
        }
    }
}

struct ProfileV2: Feature {
    let name = "profile"
    let initialState = State(displayName: "", initials: "")
    var stateVersion: Int { 2 }

    struct State: Codable, Sendable, Equatable {
        var displayName: String
        var initials: String
    }

    enum Action: Codable, Sendable {
        case rename(to: String)
    }

    func reduce(_ action: Action, state: State, dispatch: Dispatcher<Action>) throws(ActionRejected) -> StateContainer<State, Never> {
        switch action {
        case .rename(let to): StateContainer(State(displayName: to, initials: String(to.prefix(1))))
        }
    }

    func migrate(_ state: JSONValue, from version: Int) throws(ActionRejected) -> JSONValue {
        guard version == 1, case .string(let name)? = state["name"] else {
            throw ActionRejected("profile has no migration from state version \(version)")
        }
        return .object(["displayName": .string(name), "initials": .string(String(name.prefix(1)))])
    }
}

struct ProfileV3: Feature {
    let name = "profile"
    let initialState = State(displayName: "", initials: "", verified: false)
    var stateVersion: Int { 3 }

    struct State: Codable, Sendable, Equatable {
        var displayName: String
        var initials: String
        var verified: Bool
    }

    enum Action: Codable, Sendable {
        case rename(to: String)
    }

    func reduce(_ action: Action, state: State, dispatch: Dispatcher<Action>) throws(ActionRejected) -> StateContainer<State, Never> {
        switch action {
        case .rename(let to): StateContainer(State(displayName: to, initials: String(to.prefix(1)), verified: state.verified))
        }
    }

    func migrate(_ state: JSONValue, from version: Int) throws(ActionRejected) -> JSONValue {
        guard version == 2, case .object(var fields) = state else {
            throw ActionRejected("profile has no migration from state version \(version)")
        }
        fields["verified"] = .bool(false)
        return .object(fields)
    }
}

/// A durable manager hosting one feature.
func profileManager<F: Feature>(
    _ feature: F, _ storage: any SessionStorage, settings: SessionSettings, notices: NoticeLog = NoticeLog()
) throws -> SessionManager {
    var registry = FeatureRegistry()
    try registry.register(feature)
    return SessionManager(registry: registry, settings: settings, storage: storage, events: ServerSentEvents(), notify: notices.callback)
}

@Suite("State schema changes: migration, rebuild, reset (memory and SQLite storage)")
struct MigrationTests {
    /// Writes three renames with release 1: a v1 snapshot at version 2, then version 3 in the
    /// journal. With `replayBuffer: 0` the journal before the snapshot is compacted away.
    static func writeWithRelease1(_ storage: any SessionStorage, replayBuffer: Int, renames: [String] = ["Ada", "Grace", "Linus"]) async throws -> (id: String, token: String) {
        let manager = try profileManager(ProfileV1(), storage, settings: testSettings(snapshotEvery: 2, replayBuffer: replayBuffer))
        let (session, token) = try await manager.create()
        for name in renames {
            try await session.dispatch("profile", #"{"type":"rename","to":"\#(name)"}"#)
        }
        let snapshot = try #require(try await storage.latestSnapshot(session: session.id, feature: "profile"))
        #expect(snapshot.stateVersion == 1)
        return (session.id, token)
    }

    @Test("an old snapshot (stateVersion 1) is migrated when loaded by stateVersion 2", arguments: Backend.allCases)
    func migratesOldSnapshot(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            // No journal before the snapshot: only the migration can give the right state.
            let (id, token) = try await Self.writeWithRelease1(fixture.storage, replayBuffer: 0)
            let journal = try await fixture.storage.journal(session: id, feature: "profile", afterVersion: 0)
            #expect(journal.map(\.version) == [3], "compacted up to the snapshot")
            let snapshot = try #require(try await fixture.storage.latestSnapshot(session: id, feature: "profile"))
            #expect(json(snapshot.state) == json(#"{"name":"Grace"}"#))

            let notices = NoticeLog()
            let release2 = try profileManager(
                ProfileV2(), try await fixture.reopen(), settings: testSettings(snapshotEvery: 2, replayBuffer: 0), notices: notices)
            let session = try #require(try await release2.load(id: id, token: token))
            #expect(try await session.current("profile") == Snapshot(3, #"{"displayName":"Linus","initials":"L"}"#))
            #expect(notices.all.isEmpty, "a migration is not a recovery: \(notices.description)")
            // The load itself is reported, with its state's size (the server trims its heap after
            // large ones).
            #expect(notices.loads.map(\.feature) == ["profile"])
            #expect(notices.loads.first?.bytes == #"{"displayName":"Linus","initials":"L"}"#.utf8.count)

            // The next snapshot is written in the new shape, with the new stateVersion.
            try await session.dispatch("profile", #"{"type":"rename","to":"Barbara"}"#)
            let fresh = try #require(try await fixture.storage.latestSnapshot(session: id, feature: "profile"))
            #expect(fresh.version == 4)
            #expect(fresh.stateVersion == 2)
            #expect(json(fresh.state) == json(#"{"displayName":"Barbara","initials":"B"}"#))
        }
    }

    @Test("a migration is also applied to a snapshot written directly in the old shape", arguments: Backend.allCases)
    func migratesHandWrittenSnapshot(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let release2 = try profileManager(ProfileV2(), fixture.storage, settings: testSettings())
            let (session, token) = try await release2.create()
            // Seven changes of release 1 (old shape) in the journal, and its snapshot at 7.
            try await fixture.storage.commit(
                (1...7).map {
                    .append(Rows.entry(session.id, seq: $0, feature: "profile", version: $0, state: #"{"name":"Margaret"}"#), idempotencyKey: nil)
                } + [.snapshot(Rows.snapshot(session.id, feature: "profile", version: 7, state: #"{"name":"Margaret"}"#, stateVersion: 1))])
            let reloaded = try #require(
                try await profileManager(ProfileV2(), try await fixture.reopen(), settings: testSettings()).load(id: session.id, token: token))
            #expect(try await reloaded.current("profile") == Snapshot(7, #"{"displayName":"Margaret","initials":"M"}"#))
            #expect(try await reloaded.dispatch("profile", #"{"type":"rename","to":"Ada"}"#).version == 8)
        }
    }

    @Test("a snapshot that neither decodes nor migrates is rebuilt from the journal", arguments: Backend.allCases)
    func rebuildsFromJournal(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let (id, token) = try await Self.writeWithRelease1(fixture.storage, replayBuffer: 1_000)
            #expect(try await fixture.storage.journal(session: id, feature: "profile", afterVersion: 0).map(\.version) == [1, 2, 3])

            let notices = NoticeLog()
            let release3 = try profileManager(ProfileV3(), try await fixture.reopen(), settings: testSettings(), notices: notices)
            let session = try #require(try await release3.load(id: id, token: token))
            #expect(try await session.current("profile") == Snapshot(3, #"{"displayName":"Linus","initials":"L","verified":false}"#))
            let recovery = try #require(notices.recoveries.first, "\(notices.description)")
            #expect(notices.recoveries.count == 1)
            #expect(recovery.session == id)
            #expect(recovery.feature == "profile")
            #expect(recovery.how == "rebuilt from the journal")
            #expect(recovery.reason.contains("version 2"), "names the snapshot: \(recovery.reason)")
            #expect(try await session.dispatch("profile", #"{"type":"rename","to":"Ada"}"#).version == 4)
        }
    }

    @Test("with neither a usable snapshot nor a whole journal the store is reset after its last version, journaled and reported", arguments: Backend.allCases)
    func resetsAsLastResort(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let (id, token) = try await Self.writeWithRelease1(fixture.storage, replayBuffer: 0)
            #expect(try await fixture.storage.journal(session: id, feature: "profile", afterVersion: 0).map(\.version) == [3])

            let notices = NoticeLog()
            let release3 = try profileManager(ProfileV3(), try await fixture.reopen(), settings: testSettings(replayBuffer: 0), notices: notices)
            let session = try #require(try await release3.load(id: id, token: token))
            #expect(try await session.current("profile") == Snapshot(4, #"{"displayName":"","initials":"","verified":false}"#))
            let recovery = try #require(notices.recoveries.first, "\(notices.description)")
            #expect(recovery.how == "reset to the initial state")
            #expect(recovery.feature == "profile")
            #expect(!recovery.reason.isEmpty)
            let reset = try #require(try await fixture.storage.journal(session: id, feature: "profile", afterVersion: 3).first)
            #expect(reset.cause == "reset")
            #expect(reset.version == 4)
            #expect(reset.seq == 4)
            #expect(session.hub.seq == 4)
            #expect(try await session.dispatch("profile", #"{"type":"rename","to":"Ada"}"#).version == 5)
        }
    }

    @Test("a reset after a compacted journal still continues from the snapshot's version", arguments: Backend.allCases)
    func resetContinuesFromSnapshotVersion(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            // Two renames: the snapshot at version 2 covers everything, and compaction leaves
            // no journal entry of the store at all.
            let (id, token) = try await Self.writeWithRelease1(fixture.storage, replayBuffer: 0, renames: ["Ada", "Grace"])
            #expect(try await fixture.storage.journal(session: id, feature: "profile", afterVersion: 0).isEmpty)

            let notices = NoticeLog()
            let release3 = try profileManager(ProfileV3(), try await fixture.reopen(), settings: testSettings(replayBuffer: 0), notices: notices)
            let session = try #require(try await release3.load(id: id, token: token))
            let current = try await session.current("profile")
            #expect(current.version >= 3, "versions never go back (the store was at 2): \(current)")
            #expect(current == Snapshot(3, #"{"displayName":"","initials":"","verified":false}"#))
            #expect(notices.recoveries.first?.how == "reset to the initial state", "\(notices.description)")
        }
    }

    @Test("changes acknowledged after a recovery by reset survive the next load", arguments: Backend.allCases)
    func changesAfterResetSurvive(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let (id, token) = try await Self.writeWithRelease1(fixture.storage, replayBuffer: 0)
            let first = try profileManager(ProfileV3(), try await fixture.reopen(), settings: testSettings(replayBuffer: 0))
            let session = try #require(try await first.load(id: id, token: token))
            #expect(try await session.current("profile").version == 4, "reset")
            #expect(try await session.dispatch("profile", #"{"type":"rename","to":"Edsger"}"#).version == 5)

            let notices = NoticeLog()
            let second = try profileManager(ProfileV3(), try await fixture.reopen(), settings: testSettings(replayBuffer: 0), notices: notices)
            let reloaded = try #require(try await second.load(id: id, token: token))
            let profile = try await reloaded.current("profile")
            #expect(
                profile == Snapshot(5, #"{"displayName":"Edsger","initials":"E","verified":false}"#),
                "the acknowledged rename at version 5 must still be there; notices: \(notices.description)")
        }
    }
}
