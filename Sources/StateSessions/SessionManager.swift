import StateStore
import Synchronization

/// Limits and sizes of sessions.
public struct SessionSettings: Sendable {
    /// Changes kept per session for `Last-Event-ID` replay.
    public var replayBuffer = 1000
    /// Sessions held at once; creating one more fails.
    public var maxSessions = 100_000
    /// Idempotency keys remembered per session (oldest forgotten first).
    public var idempotencyKeys = 1000

    public init() {}
}

/// All live sessions, by id.
///
/// Session ids carry 128 random bits and tokens 256, from the system's secure generator,
/// both base64url without padding. Looking a session up costs the same whatever the number of
/// sessions (a hash table behind one lock).
public final class SessionManager: Sendable {
    public let registry: FeatureRegistry
    public let settings: SessionSettings
    private let sessions = Mutex<[String: Session]>([:])
    private let onFollowUpRejected: @Sendable (String, StoreError) -> Void

    public init(
        registry: FeatureRegistry, settings: SessionSettings = SessionSettings(),
        onFollowUpRejected: @escaping @Sendable (_ sessionID: String, StoreError) -> Void = { _, _ in }
    ) {
        self.registry = registry
        self.settings = settings
        self.onFollowUpRejected = onFollowUpRejected
    }

    /// Creates a session; `nil` when `maxSessions` are already held.
    public func create() -> (session: Session, token: String)? {
        let token = Self.randomString(bytes: 32)
        return sessions.withLock { sessions in
            guard sessions.count < settings.maxSessions else { return nil }
            var id = Self.randomString(bytes: 16)
            while sessions[id] != nil { id = Self.randomString(bytes: 16) }
            let session = Session(
                id: id, token: token, registry: registry, settings: settings,
                onFollowUpRejected: onFollowUpRejected)
            sessions[id] = session
            return (session, token)
        }
    }

    /// The session with this id whose token is `token`; `nil` for an unknown id or another
    /// token (callers can't tell which).
    public func session(id: String, token: String) -> Session? {
        guard let session = sessions.withLock({ $0[id] }) else { return nil }
        return session.verify(token: token) ? session : nil
    }

    /// Removes a session and ends its event streams.
    @discardableResult
    public func delete(id: String) -> Bool {
        guard let session = sessions.withLock({ $0.removeValue(forKey: id) }) else { return false }
        session.close()
        return true
    }

    public var count: Int { sessions.withLock { $0.count } }

    static func randomString(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return Base64URL.encode(bytes)
    }
}

/// base64url without padding (RFC 4648 §5).
enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= bytes.count {
            let n = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)], alphabet[Int(n >> 6 & 63)], alphabet[Int(n & 63)]]
            index += 3
        }
        let rest = bytes.count - index
        if rest == 1 {
            let n = UInt32(bytes[index]) << 16
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)]]
        } else if rest == 2 {
            let n = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)], alphabet[Int(n >> 6 & 63)]]
        }
        return String(decoding: out, as: UTF8.self)
    }
}
