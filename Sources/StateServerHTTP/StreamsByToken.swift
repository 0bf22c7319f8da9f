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

    private let open = Mutex<[Key: [ObjectIdentifier: EventStream]]>([:])

    /// Ends `stream` when `grant`'s token is revoked (``revoked(_:session:)``) or expires.
    func watch(_ stream: EventStream, session: String, grant: Grant) {
        if let token = grant.tokenID {
            let key = Key(session: session, token: token)
            let id = ObjectIdentifier(stream)
            open.withLock { $0[key, default: [:]][id] = stream }
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
                stream.close(after: ServerSentEvents.revoked(reason: "expired"))
            }
            stream.onFinish { timer.cancel() }
        }
    }

    /// Ends the streams opened with these tokens of `session`.
    func revoked(_ tokens: [String], session: String) {
        let streams = open.withLock { table in
            tokens.flatMap { table.removeValue(forKey: Key(session: session, token: $0))?.values.map { $0 } ?? [] }
        }
        for stream in streams { stream.close(after: ServerSentEvents.revoked(reason: "revoked")) }
    }
}
