import Foundation
import MicroHTTP
import StateSessions
import Synchronization

/// Event streams opened with a minted token, by session and token id, so that revoking the
/// token ends them at once; and a timer per stream whose credential expires (a minted token's
/// `expiresAt`, a JWT's `exp`), which ends it then.
final class StreamsByToken: Sendable {
    private struct Key: Hashable {
        let session: String
        let token: String
    }

    /// A stream, and what to do the moment it is ended for its token (leave the session's
    /// presence at once, not when its client has read its last event).
    private struct Watched {
        let stream: EventStream
        let ended: @Sendable () -> Void

        func end(reason: String) {
            stream.close(after: ServerSentEvents.revoked(reason: reason))
            ended()
        }
    }

    private let open = Mutex<[Key: [ObjectIdentifier: Watched]]>([:])

    /// Ends `stream` when `grant`'s token is revoked (``revoked(_:session:)``) or expires, and
    /// then calls `ended`.
    func watch(_ stream: EventStream, session: String, grant: Grant, ended: @escaping @Sendable () -> Void = {}) {
        let watched = Watched(stream: stream, ended: ended)
        if let token = grant.tokenID {
            let key = Key(session: session, token: token)
            let id = ObjectIdentifier(stream)
            open.withLock { $0[key, default: [:]][id] = watched }
            stream.onFinish { [self] in
                open.withLock { table in
                    table[key]?[id] = nil
                    if table[key]?.isEmpty == true { table[key] = nil }
                }
            }
        }
        if let expiresAt = grant.expiresAt {
            let timer = Task {
                let wait = Double(expiresAt) / 1000 - Date().timeIntervalSince1970
                if wait > 0 { try await Task.sleep(for: .milliseconds(Int64(min(wait, 1e9) * 1000) + 1)) }
                watched.end(reason: "expired")
            }
            stream.onFinish { timer.cancel() }
        }
    }

    /// Ends the streams opened with these tokens of `session`.
    func revoked(_ tokens: [String], session: String) {
        let streams = open.withLock { table in
            tokens.flatMap { table.removeValue(forKey: Key(session: session, token: $0))?.values.map { $0 } ?? [] }
        }
        for watched in streams { watched.end(reason: "revoked") }
    }
}
