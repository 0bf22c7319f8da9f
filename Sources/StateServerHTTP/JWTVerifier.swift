import Foundation
import JWTKit
import StateSessions
import StateStore

/// Bearer JWTs from the app's backend (`auth.jwtSecret` or `auth.jwtPublicKey`), verified with
/// jwt-kit (Vapor's maintained JWT library, on swift-crypto, which the build already has).
///
/// The algorithm comes from the configuration, never from the token: a secret means HS256, a
/// P-256 public key ES256, an RSA public key RS256. A token whose header names another
/// algorithm (`none` among them) is refused before its signature is looked at; jwt-kit then
/// checks the signature with the configured key only. A header with `crit` is refused: this
/// server understands no extension (RFC 7515 §4.1.11). Claims: `exp` (required), `nbf`, `aud`
/// (required to contain `auth.jwtAudience` when that is set), `scope`, `session`, `features`,
/// `actions`, `sub`.
public final class JWTVerifier: Sendable {
    public enum Algorithm: String, Sendable {
        case hs256 = "HS256"
        case es256 = "ES256"
        case rs256 = "RS256"
    }

    /// The configured key.
    public enum Key: Sendable {
        /// HS256: the shared secret (`auth.jwtSecret`).
        case secret(String)
        /// ES256: a P-256 public key.
        case es256(ES256PublicKey)
        /// RS256: an RSA public key (2048 bits or more).
        case rs256(Insecure.RSA.PublicKey)

        /// A PEM public key (`auth.jwtPublicKey`): P-256 (ES256) or RSA (RS256); nil when it is
        /// neither.
        public init?(pem: String) {
            if let key = try? ES256PublicKey(pem: pem) {
                self = .es256(key)
            } else if let key = try? Insecure.RSA.PublicKey(pem: pem) {
                self = .rs256(key)
            } else {
                return nil
            }
        }

        public var algorithm: Algorithm {
            switch self {
            case .secret: .hs256
            case .es256: .es256
            case .rs256: .rs256
            }
        }
    }

    public let algorithm: Algorithm
    /// jwt-kit's key collection (an actor), built once on first use.
    let keys: Task<JWTKeyCollection, Never>
    let audience: String?

    /// - Parameter audience: when set, a token's `aud` must name it.
    public init(key: Key, audience: String?) {
        algorithm = key.algorithm
        self.audience = audience
        keys = Task {
            let keys = JWTKeyCollection()
            switch key {
            case .secret(let secret): await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
            case .es256(let key): await keys.add(ecdsa: key)
            case .rs256(let key): await keys.add(rsa: key, digestAlgorithm: .sha256)
            }
            return keys
        }
    }

    /// Whether `token` has the shape of a JWT (three base64url parts), as opposed to a token
    /// this server minted (one base64url string).
    public static func looksLikeJWT(_ token: String) -> Bool {
        var dots = 0
        for byte in token.utf8 where byte == UInt8(ascii: ".") { dots += 1 }
        return dots == 2
    }

    /// What a verified token says.
    struct Claims: Sendable {
        /// `create`, or a session scope.
        let scope: String
        let session: String?
        let grant: Grant?
    }

    /// The claims of `token`, or why it is refused (for a `401`).
    func verify(_ token: String, now: Date = Date()) async -> Result<Claims, APIError> {
        guard let header = Self.header(of: token) else { return .failure(Self.refused("its header is not base64url JSON")) }
        guard case .string(let alg)? = header["alg"], alg == algorithm.rawValue else {
            let named = if case .string(let alg)? = header["alg"] { "'\(alg)'" } else { "no algorithm" }
            return .failure(Self.refused("its header names \(named); this server accepts \(algorithm.rawValue) only"))
        }
        // RFC 7515 §4.1.11: extensions listed in `crit` must be understood, and this server
        // understands none; a `crit` of any value (empty, malformed, null) is refused too.
        guard header["crit"] == nil else {
            return .failure(Self.refused("its header has 'crit' (critical extensions); this server understands none"))
        }
        let payload: SessionClaims
        do {
            payload = try await keys.value.verify(token, as: SessionClaims.self)
        } catch let error as JWTError {
            return .failure(Self.refused(Self.reason(error)))
        } catch is DecodingError {
            return .failure(Self.refused("its claims are not StateServer's: 'exp' (a number) and 'scope' are required"))
        } catch {
            return .failure(Self.refused("it cannot be read"))
        }
        do {
            try payload.exp.verifyNotExpired(currentDate: now)
            try payload.nbf?.verifyNotBefore(currentDate: now)
        } catch let error as JWTError {
            return .failure(Self.refused(Self.reason(error)))
        } catch {
            return .failure(Self.refused("it is not valid now"))
        }
        if let audience {
            guard let aud = payload.aud, aud.value.contains(audience) else {
                return .failure(Self.refused("its 'aud' does not name '\(audience)'"))
            }
        }
        if payload.scope == "create" { return .success(Claims(scope: "create", session: payload.session, grant: nil)) }
        guard let scope = Grant.Scope(name: payload.scope) else {
            return .failure(Self.refused("its 'scope' must be 'create', 'observe', 'dispatch' or 'admin', not '\(payload.scope)'"))
        }
        guard let session = payload.session else { return .failure(Self.refused("it has no 'session' claim")) }
        let expires = payload.exp.value.timeIntervalSince1970 * 1000
        let grant = Grant(
            scope: scope, features: payload.features.map(Set.init),
            actions: (payload.actions ?? [:]).mapValues(Set.init),
            expiresAt: expires.isFinite && expires < 9e15 ? Int64(expires) : nil, subject: payload.sub?.value)
        return .success(Claims(scope: scope.name, session: session, grant: grant))
    }

    static func refused(_ reason: String) -> APIError {
        .unauthorizedBecause("the bearer JWT is refused: \(reason)")
    }

    static func reason(_ error: JWTError) -> String {
        switch error.errorType {
        case .signatureVerificationFailed: "its signature does not verify with the configured key"
        case .claimVerificationFailure:
            error.failedClaim is ExpirationClaim ? "it expired ('exp')"
                : error.failedClaim is NotBeforeClaim ? "it is not valid yet ('nbf')" : "a claim does not verify"
        case .malformedToken: "it is malformed"
        default: "it does not verify"
        }
    }

    /// The token's header, decoded (base64url JSON); nil when it is not.
    static func header(of token: String) -> [String: JSONValue]? {
        guard let end = token.utf8.firstIndex(of: UInt8(ascii: ".")) else { return nil }
        var text = String(token[..<end]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.utf8.count % 4 != 0 { text += "=" }
        guard text.utf8.count <= 4096, let data = Data(base64Encoded: text),
            case .object(let fields)? = try? JSONParser.parse(Array(data))
        else { return nil }
        return fields
    }
}

/// The payload of a StateServer JWT.
struct SessionClaims: JWTPayload {
    var exp: ExpirationClaim
    var nbf: NotBeforeClaim?
    var aud: AudienceClaim?
    var sub: SubjectClaim?
    var scope: String
    var session: String?
    var features: [String]?
    var actions: [String: [String]]?

    func verify(using algorithm: some JWTAlgorithm) async throws {
        // Expiry, start and audience are checked by the verifier, with its clock.
    }
}
