import ExampleFeatures
import Foundation
import StateStore
import TestSupport
import Testing

/// `GET /v1/sessions/{id}/recording` of a long session with a large state, over a socket to the
/// real binary (SQLite, and memory): each change goes out as the journal keeps it (a patch), not as a
/// whole state, so the document is about the size of the journal, not changes × state; a cap
/// ends it early, readable, with `"complete": false`.
@Suite("Recording exports: patches, streamed, capped")
struct RecordingExportTests {
    static let titleLength = TodosFeature.maxTitleLength
    static let items = 400
    static let toggles = 100

    /// A session of `items` adds of 500-character titles (a 200 KB list) then `toggles`
    /// toggles: 500 changes.
    static func longSession(_ api: API, titleLength: Int = titleLength) async throws -> Session {
        let session = try await api.createSession()
        for index in 0..<items {
            try await session.dispatchOK("todos", ["type": "add", "title": .string(String(repeating: "t", count: titleLength - 4) + String(format: "%04d", index))])
        }
        for index in 0..<toggles {
            try await session.dispatchOK("todos", ["type": "toggle", "id": .string(String(index % items + 1))])
        }
        return session
    }

    static func sqlite(_ directory: TemporaryDirectory) -> [String] {
        ["--storage", "sqlite:\(directory.path("state.db"))"]
    }

    @Test("500 changes to a 200 KB list export as patches: under 1 MB (whole states would take about 60 MB), every state rebuilt equals the server's")
    func patches() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try await withServer(arguments: Self.sqlite(directory)) { server in
            let session = try await Self.longSession(server.api)
            let state = try await session.store("todos")
            let response = try await session.request("GET", "/recording")
            #expect(response.status == 200 && response.header("Cache-Control") == "no-store", "\(response.status)")
            #expect(response.header("Content-Type") == "application/json")
            #expect(response.body.count < 1_000_000, "the export took \(response.body.count) bytes")
            let recording = try Recording(json: response.body)
            #expect(recording.complete)
            #expect(recording.changes.count == Self.items + Self.toggles)
            let patched = recording.changes.filter { if case .patch = $0.content { true } else { false } }.count
            #expect(patched > Self.items, "only \(patched) changes came as patches")
            let states = try recording.states()
            #expect(try JSON.parse(try #require(states.last).bytes) == state.state)
            #expect(try recording.replay(with: try ExampleFeatures.registry()) == nil)
        }
    }

    /// On memory storage: its export reads the replay buffer (which holds every change of this
    /// 20 KB list) and computes the patches itself.
    @Test("recording.maxBytes ends the document early, still a recording that reads and replays, with complete: false (memory storage)")
    func capped() async throws {
        let cap = 20_000
        try await withServer(arguments: ["--storage", "memory"], environment: ["STATE_SERVER_RECORDING_MAX_BYTES": String(cap)]) { server in
            let session = try await Self.longSession(server.api, titleLength: 50)
            let response = try await session.request("GET", "/recording")
            #expect(response.status == 200)
            #expect(response.body.count <= cap + 1, "\(response.body.count) bytes past the cap of \(cap)")
            let recording = try Recording(json: response.body)
            #expect(!recording.complete)
            #expect(!recording.changes.isEmpty && recording.changes.count < Self.items + Self.toggles, "\(recording.changes.count)")
            #expect(recording.changes.map(\.seq) == Array(1...recording.changes.count), "the first changes, in order")
            #expect(try recording.replay(with: try ExampleFeatures.registry()) == nil)
        }
    }

    /// The import route's reading of an old document: in process.
    @Test("a version 1 document (every change with its whole state) still imports")
    func versionOne() async throws {
        try await withInProcessServer { server in
            let document = #"""
                {"format":"stateserver-recording","version":1,"server":"1.0.0",
                 "features":[{"name":"counter","stateVersion":1,"version":0,"state":{"count":0}}],
                 "changes":[{"seq":1,"feature":"counter","version":1,"cause":"dispatch","action":{"type":"increment","by":2},"state":{"count":2},"effect":null},
                            {"seq":2,"feature":"counter","version":2,"cause":"dispatch","action":{"type":"increment"},"state":{"count":3},"effect":null}]}
                """#
            let imported = try await server.api.request("POST", "/v1/recordings", body: Array(document.utf8))
            #expect(imported.status == 201 && imported.json?["changes"] == 2, "\(imported)")
            let copy = Session(api: server.api, id: try #require(imported.json?["id"]?.string), token: try #require(imported.json?["token"]?.string))
            #expect(try await copy.store("counter") == StoreState(version: 2, state: ["count": 3]))
            // A patch in a version 1 document is not read.
            let patched = document.replacingOccurrences(of: #""state":{"count":3}"#, with: #""patch":[]"#)
            expectError(try await server.api.request("POST", "/v1/recordings", body: Array(patched.utf8)), 400, "invalid_request")
        }
    }
}
