import StateStore
import Testing

/// Inputs `make fuzz` found in recordings (scripts/fuzz.sh, fuzz/Sources), kept as tests of the
/// property the fuzz target checks; the JSON and JSON Patch findings are in StateJSONTests.
@Suite("Fuzz findings: recordings")
struct RecordingFuzzFindingTests {
    /// A recording of `notes` (a ceiling of 200 bytes) whose steps are `patches`.
    private static func notesRecording(_ patches: [String]) throws -> Recording {
        let changes = patches.enumerated().map { index, patch in
            #"{"seq":\#(index + 1),"feature":"notes","version":\#(index + 1),"cause":"rehydrate","patch":\#(patch)}"#
        }
        let document = #"{"format":"stateserver-recording","version":2,"server":"t","features":[{"name":"notes","stateVersion":1,"version":0,"state":{"notes":[]}}],"changes":["#
            + changes.joined(separator: ",") + "]}"
        return try Recording(json: Array(document.utf8))
    }

    private static func notesRegistry() throws -> FeatureRegistry {
        var registry = FeatureRegistry()
        try registry.register(Notes(maxStateBytes: 200))
        return registry
    }

    @Test func aRecordingWhosePatchesCopyTheStateIsUnreadableAtOnce() throws {
        let copies = (0..<40).map { #"{"op":"copy","from":"","path":"/k\#($0)"}"# }.joined(separator: ",")
        let recording = try Self.notesRecording(["[" + copies + "]"])
        let registry = try Self.notesRegistry()
        do {
            _ = try recording.replay(with: registry)
            Issue.record("replayed")
        } catch {
            #expect(error.description.contains("changes[0].patch does not apply"), "\(error)")
        }
    }

    @Test func aRecordingsStatesAreHeldToTheirFeaturesCeiling() throws {
        // Each step adds 40 bytes: the fifth state is over 200; replaying stored it without a look.
        let add = #"[{"op":"add","path":"/notes/-","value":"0123456789012345678901234567890123456"}]"#
        let recording = try Self.notesRecording(Array(repeating: add, count: 6))
        let registry = try Self.notesRegistry()
        do {
            _ = try recording.replay(with: registry)
            Issue.record("replayed")
        } catch {
            #expect(error.description == "changes[4] leads to a state of notes larger than its limit of 200 bytes", "\(error)")
        }
        #expect(try Self.notesRecording(Array(repeating: add, count: 4)).replay(with: registry) == nil)
    }
}
