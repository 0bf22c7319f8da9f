// A session remembers the SHA-256 of tokens that verified lately (VerifiedTokens, in
// Session+Tokens.swift), by a keyed digest of each (never the token), so that a client's every request does not hash its token again. It is a
// memo of the hash only: what a token may do is judged on every request.

import ExampleFeatures
import StatePersistence
@testable import StateSessions
import StateStore
import Testing

@Suite("Verified tokens")
struct VerifiedTokenTests {
    @Test("a token revoked after it verified (and was remembered) is refused at once, and its descendants")
    func revokedAfterUse() async throws {
        let manager = try exampleManager(InMemoryStorage())
        let (session, owner) = try await manager.create()
        let (id, token) = try await session.mint(Grant(scope: .dispatch))
        #expect(session.grant(for: token)?.tokenID == id)
        #expect(session.grant(for: token)?.tokenID == id, "the second time, from the memo")
        let child = try await session.mint(Grant(scope: .observe, parent: id))
        #expect(session.grant(for: child.token)?.scope == .observe)
        #expect(try await session.revoke(id, by: .owner) == [id, child.id])
        #expect(session.grant(for: token) == nil)
        #expect(session.grant(for: child.token) == nil)
        #expect(manager.authorized(id: session.id, token: token) == nil)
        #expect(session.grant(for: owner) == .owner)
    }

    @Test("a token that expires after it verified is refused from its expiry")
    func expiredAfterUse() async throws {
        let manager = try exampleManager(InMemoryStorage())
        let (session, _) = try await manager.create()
        let now = WallClock.now
        let (_, token) = try await session.mint(Grant(scope: .observe, expiresAt: now + 60_000), now: now)
        #expect(session.grant(for: token, now: now + 1) != nil)
        #expect(session.grant(for: token, now: now + 59_999) != nil)
        #expect(session.grant(for: token, now: now + 60_000) == nil)
    }

    @Test("more clients than the memo holds all keep verifying; wrong tokens never do")
    func moreTokensThanTheMemo() async throws {
        let manager = try exampleManager(InMemoryStorage())
        let (session, owner) = try await manager.create()
        var minted: [(id: String, token: String)] = []
        for _ in 0..<(VerifiedTokens.capacity * 2 + 1) { minted.append(try await session.mint(Grant(scope: .observe))) }
        for round in 0..<3 {
            for (id, token) in minted { #expect(session.grant(for: token)?.tokenID == id, "round \(round)") }
            #expect(session.grant(for: owner) == .owner)
        }
        // A wrong token the length of a right one, differing in its last byte only.
        let right = minted[0].token
        let wrong = String(right.dropLast()) + (right.last == "A" ? "B" : "A")
        #expect(session.grant(for: wrong) == nil)
        #expect(session.grant(for: "") == nil)
    }

    @Test("the memo holds at most its capacity, the oldest replaced first")
    func memoIsBounded() {
        var memo = VerifiedTokens()
        let tokens = (0..<(VerifiedTokens.capacity + 2)).map { Array("token-\($0)".utf8) }
        for token in tokens { memo.remember(digest: VerifiedTokens.digest(token), hash: token.reversed()) }
        func hash(of token: [UInt8]) -> [UInt8]? { memo.hash(ofDigest: VerifiedTokens.digest(token)) }
        #expect(hash(of: tokens[0]) == nil)
        #expect(hash(of: tokens[1]) == nil)
        for token in tokens.dropFirst(2) { #expect(hash(of: token) == token.reversed()) }
        #expect(hash(of: Array("token-".utf8)) == nil, "a prefix of a remembered token is not it")
    }

    @Test("the memo keeps no token: a digest of 16 bytes that shares no run of the token's bytes, and differs for a token one byte apart")
    func memoKeepsNoToken() {
        let token = Array("sz2wGjbKRF_PbxnCm0d1SJmCwHpDvqiiJRfGYHFYqlk".utf8)
        let digest = VerifiedTokens.digest(token)
        #expect(digest.count == 16)
        #expect(digest == VerifiedTokens.digest(token), "the same token, the same digest")
        var other = token
        other[other.count - 1] ^= 1
        #expect(VerifiedTokens.digest(other) != digest)
        // No 4-byte run of the token appears in what is kept.
        let runs = Set((0...(token.count - 4)).map { Array(token[$0..<($0 + 4)]) })
        #expect((0...(digest.count - 4)).allSatisfy { !runs.contains(Array(digest[$0..<($0 + 4)])) })
    }
}
