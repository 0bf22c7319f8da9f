import Foundation
import StateStore
import Testing

/// Replays the recording at `path` (the JSON of `GET /v1/sessions/{id}/recording`) through the
/// reducers of `registry`, and records a test issue at the first step whose state differs —
/// feature, step, action, recorded vs replayed as a JSON Patch. A recorded bug report becomes a
/// regression test in one line:
///
/// ```swift
/// @Test func checkoutFlow() throws {
///     expectReplays("Tests/Recordings/checkout.json", with: try Features.registry())
/// }
/// ```
///
/// Returns the divergence (nil when every state is the same), for tests that expect one.
@discardableResult
public func expectReplays(
    _ path: String, with registry: FeatureRegistry, sourceLocation: SourceLocation = #_sourceLocation
) -> Recording.Divergence? {
    guard let data = FileManager.default.contents(atPath: path) else {
        Issue.record("no recording at \(path)", sourceLocation: sourceLocation)
        return nil
    }
    do throws(Recording.Unreadable) {
        let divergence = try Recording(json: Array(data)).replay(with: registry)
        if let divergence { Issue.record("\(path) diverges at \(divergence)", sourceLocation: sourceLocation) }
        return divergence
    } catch {
        Issue.record("\(path) is not a recording: \(error)", sourceLocation: sourceLocation)
        return nil
    }
}
