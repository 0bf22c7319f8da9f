import StatePersistence
import StateStore
import Synchronization

/// A session's credentials: the SHA-256 of the owner's token, the minted tokens' table, and
/// the lock that takes mints and revocations one at
/// a time (a token minted from a parent while the parent is being revoked would otherwise
/// outlive the revocation).
final class GrantStore: Sendable {
    let table: Mutex<GrantTable>
    /// Held by a mint or a revocation from its check to its commit.
    let writes = AsyncLock()

    /// The SHA-256 of the owner's token (the token itself is never kept).
    let ownerHash: [UInt8]

    init(ownerHash: [UInt8], _ stored: [StoredGrant]) {
        self.ownerHash = ownerHash
        table = Mutex(GrantTable(stored))
    }
}

/// The tokens minted for a session (scoped tokens), by the SHA-256 of the token: what each may
/// do, who minted it, when it was minted, and the bytes of its stored grant.
struct GrantTable: Sendable {
    var byHash: [[UInt8]: Grant] = [:]
    var hashByID: [String: [UInt8]] = [:]
    var createdAt: [String: Int64] = [:]
    /// The bytes of each token's stored grant (``Grant/json``), and their sum.
    var bytes: [String: Int] = [:]
    var totalBytes = 0
    /// The SHA-256 of tokens that verified lately (see ``VerifiedTokens``).
    var verified = VerifiedTokens()

    init(_ stored: [StoredGrant]) {
        for token in stored {
            guard let grant = Grant(stored: token) else { continue }
            insert(grant, hash: token.tokenHash, createdAt: token.createdAt, bytes: token.grant.count)
        }
    }

    mutating func insert(_ grant: Grant, hash: [UInt8], createdAt: Int64, bytes size: Int) {
        guard let id = grant.tokenID else { return }
        byHash[hash] = grant
        hashByID[id] = hash
        self.createdAt[id] = createdAt
        totalBytes += size - (bytes.updateValue(size, forKey: id) ?? 0)
    }

    @discardableResult
    mutating func remove(_ id: String) -> Removed? {
        verified = VerifiedTokens()
        guard let hash = hashByID.removeValue(forKey: id), let grant = byHash.removeValue(forKey: hash) else { return nil }
        let size = bytes.removeValue(forKey: id) ?? 0
        totalBytes -= size
        return Removed(grant: grant, hash: hash, createdAt: createdAt.removeValue(forKey: id) ?? 0, bytes: size)
    }

    /// A token taken out of the table, to put back if its revocation does not commit.
    struct Removed: Sendable {
        let grant: Grant
        let hash: [UInt8]
        let createdAt: Int64
        let bytes: Int
    }

    func grant(id: String) -> Grant? {
        hashByID[id].flatMap { byHash[$0] }
    }

    /// `id` and every token minted from it, directly or through others.
    func descendants(of id: String) -> [String] {
        var found = [id]
        var index = 0
        while index < found.count {
            let parent = found[index]
            found += byHash.values.filter { $0.parent == parent }.compactMap(\.tokenID).sorted()
            index += 1
        }
        return found
    }
}

/// The SHA-256 of the last few tokens that verified on a session, so a client's every request
/// does not hash its token again (a SHA-256 costs more than the rest of reading a state).
///
/// A memo of the hash function only: what a token may do is still looked up by its hash in
/// the live grants on every request, so a revoked or expired token is refused at once whether
/// or not it is here (a revoke also empties it). Only tokens that verified are kept (a flood of
/// wrong tokens neither fills it nor evicts a client's), at most ``capacity``, the oldest
/// replaced first.
///
/// It keeps no token: each is known by a 128-bit digest keyed with this process's random seed
/// (two SipHash values, as Swift's `Hasher` computes them), which costs a few hundred
/// instructions where SHA-256 costs thousands. Finding another token with a kept digest means
/// guessing 128 bits of a keyed function whose key never leaves the process. A presented
/// token's digest is compared with every kept one (``ConstantTime/equal(_:_:)``).
struct VerifiedTokens: Sendable {
    static let capacity = 4
    private var entries: [(digest: [UInt8], hash: [UInt8])] = []
    private var next = 0

    /// The memo's key for `token`: 16 bytes, from two keyed hashes of it.
    static func digest(_ token: [UInt8]) -> [UInt8] {
        digest(String(decoding: token, as: UTF8.self))
    }

    /// ``digest(_:)-([UInt8])`` of a token as the request carries it: a token is ASCII, which a
    /// `String` hashes as its bytes in one go.
    static func digest(_ token: String) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16)
        for half in [UInt8(1), 2] {
            var hasher = Hasher()
            hasher.combine(half)
            hasher.combine(token)
            let value = UInt64(bitPattern: Int64(hasher.finalize()))
            for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
        }
        return bytes
    }

    /// The SHA-256 of the token whose ``digest(_:)`` is `digest`, if it verified lately.
    func hash(ofDigest digest: [UInt8]) -> [UInt8]? {
        var found: [UInt8]?
        for entry in entries where ConstantTime.equal(entry.digest, digest) { found = entry.hash }
        return found
    }

    mutating func remember(digest: [UInt8], hash: [UInt8]) {
        if entries.count < Self.capacity {
            entries.append((digest, hash))
        } else {
            entries[next] = (digest, hash)
            next = (next + 1) % Self.capacity
        }
    }
}

/// A minted token as listed (never its secret).
public struct MintedToken: Sendable {
    public let id: String
    public let grant: Grant
    /// Milliseconds since 1970.
    public let createdAt: Int64
}

/// Why a token could not be minted or revoked.
public enum TokenFailure: Error, Sendable {
    /// The session holds ``Session/maxTokens`` live tokens.
    case limitReached(Int)
    /// No live token of the session has this id.
    case notFound(String)
    /// The caller's token is narrower than the one it would mint or revoke; the reason.
    case wider(String)
    /// The minting token was revoked (or expired) while it minted: nothing was minted.
    case callerRevoked
    /// The grant's stored form would take this many bytes, over ``Session/maxGrantBytes``.
    case grantTooLarge(Int)
    /// The session's live tokens hold this many bytes of grants: one more would pass
    /// ``Session/maxTokenBytes``.
    case bytesReached(Int)
    case session(SessionFailure)
}

extension Session {
    /// Live (unexpired) minted tokens a session may hold at once.
    public static let maxTokens = 1000
    /// Bytes of one token's stored grant (its scope, features, action types, parent and
    /// subject as JSON).
    public static let maxGrantBytes = 8 * 1024
    /// Bytes of stored grants the live tokens of one session may hold together: what a
    /// session's tokens may cost on disk, in memory (a few times this) and in a listing.
    public static let maxTokenBytes = 128 * 1024

    /// What `token` may do on this session: everything (the owner's token), what it was minted
    /// with (a live minted token), or nil (another session's token, an expired or revoked one).
    /// The owner's hash is compared in constant time; minted tokens are found by hash.
    public func grant(for token: String, now: Int64 = WallClock.now) -> Grant? {
        let bytes = Array(token.utf8)
        let digest = VerifiedTokens.digest(token)
        let known = grants.table.withLock { $0.verified.hash(ofDigest: digest) }
        let hash = known ?? SHA256.hash(bytes)
        let grant: Grant?
        if ConstantTime.equal(hash, grants.ownerHash) {
            grant = .owner
        } else if let minted = grants.table.withLock({ $0.byHash[hash] }), !minted.isExpired(at: now) {
            grant = minted
        } else {
            return nil
        }
        if known == nil {
            // Unless revoked meanwhile (a revoke empties the memo under this lock).
            grants.table.withLock { table in
                if grant?.tokenID.map({ table.hashByID[$0] != nil }) ?? true { table.verified.remember(digest: digest, hash: hash) }
            }
        }
        return grant
    }

    /// Whether `candidate` is the owner's token or a live minted one.
    public func verify(token candidate: String) -> Bool {
        grant(for: candidate) != nil
    }

    /// Whether the minted token `id` is live (not revoked, not expired): a stream opened with
    /// it checks again once registered, so a revocation that ran meanwhile ends it.
    public func isLive(token id: String, now: Int64 = WallClock.now) -> Bool {
        grants.table.withLock { $0.grant(id: id) }.map { !$0.isExpired(at: now) } ?? false
    }

    /// The live minted tokens, oldest first: every one for a caller over the whole session
    /// (``Grant/spansSession``), else only those minted from the caller's token, directly or
    /// through others (for a JWT, from JWTs of its subject).
    public func tokens(visibleTo caller: Grant = .owner, now: Int64 = WallClock.now) -> [MintedToken] {
        grants.table.withLock { table in
            var visible: Set<String>?
            if !caller.spansSession {
                if let own = caller.tokenID {
                    visible = Set(table.descendants(of: own).dropFirst())
                } else {
                    let roots = table.byHash.values.filter { $0.parent == nil && $0.subject != nil && $0.subject == caller.subject }
                    visible = Set(roots.compactMap(\.tokenID).flatMap { table.descendants(of: $0) })
                }
            }
            return table.byHash.values.filter { !$0.isExpired(at: now) }.compactMap { grant -> MintedToken? in
                guard let id = grant.tokenID, visible?.contains(id) ?? true else { return nil }
                return MintedToken(id: id, grant: grant, createdAt: table.createdAt[id] ?? 0)
            }
        }.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
    }

    /// Mints a token holding `grant` (which the caller checked it covers), recorded before it is
    /// returned; expired tokens of the session are dropped in the same write. Returns its id
    /// and its secret (shown once: only its hash is kept).
    ///
    /// Mints and revocations of a session run one at a time: a token minted from `grant.parent`
    /// is refused (``TokenFailure/callerRevoked``) once that parent is revoked, so a revocation
    /// that has answered leaves no descendant behind. Bounded by ``maxTokens``,
    /// ``maxGrantBytes`` and ``maxTokenBytes``.
    public func mint(_ grant: Grant, now: Int64 = WallClock.now) async throws(TokenFailure) -> (id: String, token: String) {
        let id = SessionManager.randomString(bytes: 16)
        let token = SessionManager.randomString(bytes: 32)
        let hash = SHA256.hash(token)
        var minted = grant
        minted.tokenID = id
        let json = minted.json.bytes
        guard json.count <= Self.maxGrantBytes else { throw .grantTooLarge(json.count) }
        await grants.writes.lock()
        defer { grants.writes.unlock() }
        let (expired, live, liveBytes, parentLive) = grants.table.withLock { table in
            let expired = table.byHash.values.filter { $0.isExpired(at: now) }.compactMap(\.tokenID)
            let parentLive = grant.parent.map { table.grant(id: $0).map { !$0.isExpired(at: now) } ?? false } ?? true
            return (
                expired, table.byHash.count - expired.count, table.totalBytes - expired.reduce(0) { $0 + (table.bytes[$1] ?? 0) },
                parentLive
            )
        }
        guard parentLive else { throw .callerRevoked }
        guard live < Self.maxTokens else { throw .limitReached(Self.maxTokens) }
        guard liveBytes + json.count <= Self.maxTokenBytes else { throw .bytesReached(liveBytes) }
        let stored = StoredGrant(session: self.id, id: id, tokenHash: hash, grant: json, createdAt: now, expiresAt: minted.expiresAt)
        let session = self.id
        do throws(StorageError) {
            try await storage.commit(
                (expired.isEmpty ? [] : [.deleteGrants(session: session, ids: expired)]) + [.createGrant(stored)])
        } catch {
            throw .session(error.kind == .sessionGone ? .sessionGone : .storage(error))
        }
        grants.table.withLock { table in
            for old in expired { table.remove(old) }
            table.insert(minted, hash: hash, createdAt: now, bytes: json.count)
        }
        return (id, token)
    }

    /// Revokes the token `id` and every token minted from it, at once: they are refused from
    /// the moment this is called (their streams are the caller's to close). `caller` must cover
    /// the token. Returns the ids revoked. Waits for a mint under way (``mint(_:now:)``), so
    /// every descendant is found.
    public func revoke(_ id: String, by caller: Grant) async throws(TokenFailure) -> [String] {
        await grants.writes.lock()
        defer { grants.writes.unlock() }
        let taken = try grants.table.withLock { (table: inout GrantTable) throws(TokenFailure) -> [GrantTable.Removed] in
            guard let grant = table.grant(id: id) else { throw .notFound(id) }
            if grant.tokenID != caller.tokenID, let reason = caller.widening(grant) { throw .wider(reason) }
            return table.descendants(of: id).compactMap { table.remove($0) }
        }
        let ids = taken.compactMap(\.grant.tokenID)
        let session = self.id
        do throws(StorageError) {
            try await storage.commit([.deleteGrants(session: session, ids: ids)])
        } catch {
            // Not revoked after all: the tokens work again, as storage still has them.
            grants.table.withLock { table in
                for token in taken { table.insert(token.grant, hash: token.hash, createdAt: token.createdAt, bytes: token.bytes) }
            }
            throw .session(error.kind == .sessionGone ? .sessionGone : .storage(error))
        }
        return ids
    }
}
