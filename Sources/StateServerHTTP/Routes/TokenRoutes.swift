import MicroHTTP
import StatePersistence
import StateSessions
import StateStore

/// Scoped tokens of a session: minting (`POST`), listing (`GET`, never the secrets) and revoking
/// (`DELETE`), each with a credential of scope `admin` on that session. A credential limited to
/// some features or action types lists only the tokens minted from it.
extension StateServerResponder {
    /// The longest `expiresIn`: ten years, in seconds.
    static let maxTokenLifetime = 315_360_000
    /// Action types one feature's list may name, and bytes of one type.
    static let maxActionTypes = 100
    static let maxActionTypeBytes = 200
    /// Bytes of a mint's body: with the bounds above, what bounds one grant.
    static let maxMintBody = 4096

    static let tokenRoutes: [Route] = [
        .session(["GET"], "/v1/sessions/{id}/tokens", .needs(.admin)) { _, request throws(APIError) in
            let listed = request.session.tokens(visibleTo: request.grant)
            return .now(Reply.json(200, tokenList(listed), route: request.template, headers: [Reply.noStore]))
        },
        .session(["POST"], "/v1/sessions/{id}/tokens", SessionAccess(scope: .admin, bodyLimit: maxMintBody)) {
            responder, request throws(APIError) in
            let caller = request.grant
            let now = WallClock.now
            let wanted = try responder.mintRequest(request.http, caller: caller, now: now)
            if let reason = caller.widening(wanted) {
                throw .forbidden("a token cannot mint one wider than itself: \(reason)")
            }
            let session = request.session
            return .later { () throws(APIError) in
                let minted: (id: String, token: String)
                do throws(TokenFailure) {
                    minted = try await session.mint(wanted, now: now)
                } catch {
                    throw .token(error)
                }
                var body = JSONObjectWriter()
                body.string("id", minted.id)
                body.string("token", minted.token)
                tokenFields(wanted, into: &body)
                return Reply.json(
                    201, body.finish(), route: request.template,
                    headers: [("Location", "/v1/sessions/\(session.id)/tokens/\(minted.id)"), Reply.noStore])
            }
        },
        .session(["DELETE"], "/v1/sessions/{id}/tokens/{tokenId}", .needs(.admin)) { responder, request throws(APIError) in
            guard let tokenID = request["tokenId"] else { throw .notFound }
            let session = request.session
            let caller = request.grant
            return .later { () throws(APIError) in
                let revoked: [String]
                do throws(TokenFailure) {
                    revoked = try await session.revoke(tokenID, by: caller)
                } catch {
                    throw .token(error)
                }
                responder.streamsByToken.revoked(revoked, session: session.id)
                return Reply.empty(204, route: request.template, headers: [Reply.noStore])
            }
        },
    ]

    /// The body of a mint, `{"scope", "features"?, "actions"?, "expiresIn"?}`, as the grant it
    /// asks for (`400 invalid_request` saying what is wrong; `404 unknown_feature`). Without
    /// `expiresIn` the token expires with the caller's credential (never, for the owner's).
    func mintRequest(_ request: HTTPRequest, caller: Grant, now: Int64) throws(APIError) -> Grant {
        let example = #"{"scope": "dispatch", "features": ["todos"], "actions": {"todos": ["add"]}, "expiresIn": 3600}"#
        guard case .object(let fields) = try APIError.parse(request.body) else {
            throw .invalidRequest("the body must be a JSON object like \(example)")
        }
        let known: Set<String> = ["scope", "features", "actions", "expiresIn"]
        if let unknown = fields.keys.filter({ !known.contains($0) }).sorted().first {
            throw .invalidRequest("the body has an unknown field '\(unknown)'; the fields are scope, features, actions, expiresIn")
        }
        guard case .string(let name)? = fields["scope"], let scope = Grant.Scope(name: name) else {
            throw .invalidRequest("'scope' must be \"observe\", \"dispatch\" or \"admin\"")
        }
        var grant = Grant(scope: scope, parent: caller.tokenID, subject: caller.subject)
        if let value = fields["features"], value != .null {
            guard case .array(let items) = value, !items.isEmpty, items.count <= sessions.registry.features.count else {
                throw .invalidRequest("'features' must be a list of 1 to \(sessions.registry.features.count) feature names")
            }
            var names = Set<String>()
            for item in items {
                guard case .string(let feature) = item else { throw .invalidRequest("'features' must hold strings") }
                guard sessions.registry[feature] != nil else { throw .unknownFeature(feature) }
                names.insert(feature)
            }
            grant.features = names
        }
        if let value = fields["actions"], value != .null {
            guard case .object(let byFeature) = value else {
                throw .invalidRequest("'actions' must be an object of feature names to lists of action types")
            }
            for (feature, list) in byFeature {
                guard sessions.registry[feature] != nil else { throw .unknownFeature(feature) }
                guard grant.reaches(feature: feature) else {
                    throw .invalidRequest("'actions' names the feature '\(feature)', which 'features' leaves out")
                }
                guard case .array(let items) = list, !items.isEmpty, items.count <= Self.maxActionTypes else {
                    throw .invalidRequest("'actions.\(feature)' must be a list of 1 to \(Self.maxActionTypes) action types")
                }
                var types = Set<String>()
                for item in items {
                    guard case .string(let type) = item, !type.isEmpty, type.utf8.count <= Self.maxActionTypeBytes else {
                        throw .invalidRequest("'actions.\(feature)' must hold action types: strings of 1 to \(Self.maxActionTypeBytes) bytes")
                    }
                    types.insert(type)
                }
                grant.actions[feature] = types
            }
        }
        if let value = fields["expiresIn"], value != .null {
            guard case .int(let seconds) = value, seconds >= 1, seconds <= Self.maxTokenLifetime else {
                throw .invalidRequest("'expiresIn' must be a whole number of seconds from 1 to \(Self.maxTokenLifetime)")
            }
            grant.expiresAt = now + seconds * 1000
        } else {
            grant.expiresAt = caller.expiresAt
        }
        return grant
    }

    /// `{"tokens": [{"id", "scope", "features", "actions", "expiresAt", "createdAt", "parent"}]}`.
    static func tokenList(_ tokens: [MintedToken]) -> [UInt8] {
        var items = JSONArrayWriter()
        for token in tokens {
            var item = JSONObjectWriter(capacity: 160)
            item.string("id", token.id)
            tokenFields(token.grant, into: &item)
            item.int("createdAt", Int(token.createdAt))
            item.raw("parent", token.grant.parent.map { JSONCoding.quoted($0) })
            items.append(item.finish())
        }
        var body = JSONObjectWriter()
        body.raw("tokens", items.finish())
        return body.finish()
    }

    /// `scope`, `features` (null: every feature), `actions`, `expiresAt` (milliseconds since
    /// 1970, or null).
    static func tokenFields(_ grant: Grant, into body: inout JSONObjectWriter) {
        body.string("scope", grant.scope.name)
        body.raw("features", grant.features.map { JSONValue.array($0.sorted().map(JSONValue.string)).bytes })
        body.raw("actions", JSONValue.object(grant.actions.mapValues { .array($0.sorted().map(JSONValue.string)) }).bytes)
        body.raw("expiresAt", grant.expiresAt.map { Array(String($0).utf8) })
    }
}

extension APIError {
    static func token(_ failure: TokenFailure) -> APIError {
        switch failure {
        case .limitReached(let limit): tooManyTokens(limit)
        case .notFound(let id): tokenNotFound(id)
        case .wider(let reason): forbidden("a token cannot revoke one wider than itself: \(reason)")
        // The minting token was revoked meanwhile: it answers as a revoked token does.
        case .callerRevoked: sessionNotFound
        case .grantTooLarge(let bytes):
            invalidRequest("the token's grant would take \(bytes) bytes, more than the limit of \(Session.maxGrantBytes)")
        case .bytesReached(let held): tooManyTokenBytes(held: held, limit: Session.maxTokenBytes)
        case .session(let failure): session(failure)
        }
    }
}
