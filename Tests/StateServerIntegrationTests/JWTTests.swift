import Crypto
import CryptoExtras
import Foundation
import JWTKit
import StateServerHTTP
import TestSupport
import Testing

private let jwtSecret = "the-app-backend-shares-this-secret-0123456789"
private let audience = "todo-app"

/// The claims an app's backend puts in a StateServer JWT; every one optional so that tests can
/// leave any out.
struct BackendClaims: JWTPayload {
    var exp: ExpirationClaim?
    var nbf: NotBeforeClaim?
    var aud: AudienceClaim?
    var sub: SubjectClaim?
    var scope: String?
    var session: String?
    var features: [String]?
    var actions: [String: [String]]?

    func verify(using algorithm: some JWTAlgorithm) async throws {}

    static func session(
        _ id: String, scope: String, expiresIn: TimeInterval = 300, sub: String? = "ada", audience: String? = audience
    ) -> BackendClaims {
        BackendClaims(
            exp: ExpirationClaim(value: Date().addingTimeInterval(expiresIn)), aud: audience.map { AudienceClaim(value: [$0]) },
            sub: sub.map { SubjectClaim(value: $0) }, scope: scope, session: id)
    }
}

/// A signer of the app's backend.
struct Backend {
    let keys = JWTKeyCollection()

    static func hmac(_ secret: String = jwtSecret) async -> Backend {
        let backend = Backend()
        await backend.keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        return backend
    }

    func sign(_ claims: BackendClaims) async throws -> String {
        try await keys.sign(claims)
    }
}

extension Session {
    func with(token: String) -> Session { Session(api: api, id: id, token: token) }
}

/// base64url without padding.
func base64URL(_ bytes: some Sequence<UInt8>) -> String {
    Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

/// The routes' verifier of the backend's HS256 JWTs with an audience, as `auth.jwtSecret` and
/// `auth.jwtAudience` configure the binary's.
func hs256Verifier() -> JWTVerifier { JWTVerifier(key: .secret(jwtSecret), audience: audience) }

/// Bearer JWTs, HS256 with an audience, in process: the claims, scopes, refusals and the stream's
/// end at `exp` are the routes' (`RouteSettings.jwt`), not the socket's. The binary's reading of
/// the same settings is JWTSettingsTests.
@Suite("JWTs from the app's backend", .inProcessServer { $0.routes.jwt = hs256Verifier() })
struct JWTTests {
    @Test("a dispatch JWT for the session dispatches within its features and actions, and streams with access_token")
    func dispatchJWT() async throws {
        let owner = try await SharedServer.api().createSession()
        let backend = await Backend.hmac()
        var claims = BackendClaims.session(owner.id, scope: "dispatch", sub: "user-42")
        claims.features = ["todos"]
        claims.actions = ["todos": ["add"]]
        let user = owner.with(token: try await backend.sign(claims))
        try await user.dispatchOK("todos", ["type": "add", "title": "from a JWT"])
        expectError(try await user.dispatch("todos", ["type": "clearCompleted"]), 403, "forbidden")
        expectError(try await user.dispatch("counter", ["type": "increment"]), 403, "forbidden")
        expectError(try await user.request("DELETE", ""), 403, "forbidden")
        #expect(try await owner.store("todos").version == 1)
        #expect(try await owner.store("counter").version == 0)
        // EventSource passes it as access_token.
        let stream = try await owner.api.openEvents(
            "\(owner.path)/events?access_token=\(try await backend.sign(claims))", headers: [], receiveBufferSize: nil)
        defer { stream.close() }
        #expect(stream.status == 200, "\(stream.head)")
        #expect(try await stream.nextEvent().json?["features"]?.object?.keys.sorted() == ["todos"])
    }

    @Test("an admin JWT mints scoped tokens that expire with it, and what it mints carries its sub")
    func adminJWTMints() async throws {
        let owner = try await SharedServer.api().createSession()
        let backend = await Backend.hmac()
        let admin = owner.with(token: try await backend.sign(.session(owner.id, scope: "admin", expiresIn: 600, sub: "backend")))
        let minted = try await admin.request("POST", "/tokens", body: JSON.object(["scope": "observe"]).bytes)
        #expect(minted.status == 201, "\(minted)")
        let expiresAt = try #require(minted.json?["expiresAt"]?.int)
        #expect(abs(Double(expiresAt) / 1000 - Date().addingTimeInterval(600).timeIntervalSince1970) < 30, "\(minted)")
        let viewer = owner.with(token: try #require(minted.json?["token"]?.string))
        #expect(try await viewer.store("counter").version == 0)
        // An admin JWT cannot mint a token that outlives it.
        expectError(
            try await admin.request("POST", "/tokens", body: JSON.object(["scope": "observe", "expiresIn": 3600]).bytes), 403,
            "forbidden")
    }

    @Test("alg none, a forged signature, expiry, nbf, another session, another audience, no exp: 401, nothing done")
    func refusals() async throws {
        let owner = try await SharedServer.api().createSession()
        let other = try await SharedServer.api().createSession()
        let backend = await Backend.hmac()
        let forger = await Backend.hmac("not-the-secret-but-just-as-long-0123456789")
        var notYet = BackendClaims.session(owner.id, scope: "dispatch")
        notYet.nbf = NotBeforeClaim(value: Date().addingTimeInterval(600))
        var noExp = BackendClaims.session(owner.id, scope: "dispatch")
        noExp.exp = nil
        var badScope = BackendClaims.session(owner.id, scope: "dispatch")
        badScope.scope = "root"
        let valid = try await backend.sign(.session(owner.id, scope: "dispatch"))
        let parts = valid.split(separator: ".").map(String.init)
        let none = base64URL(#"{"alg":"none","typ":"JWT"}"#.utf8) + "." + parts[1] + "."
        let hs512 = base64URL(#"{"alg":"HS512","typ":"JWT"}"#.utf8) + "." + parts[1] + "." + parts[2]
        let cases: [(String, String)] = [
            ("alg none", none),
            ("another algorithm in the header", hs512),
            ("forged signature", try await forger.sign(.session(owner.id, scope: "dispatch"))),
            ("payload swapped", parts[0] + "." + base64URL(#"{"scope":"admin","session":"x","exp":9999999999}"#.utf8) + "." + parts[2]),
            ("expired", try await backend.sign(.session(owner.id, scope: "dispatch", expiresIn: -5))),
            ("not valid yet", try await backend.sign(notYet)),
            ("another session", try await backend.sign(.session(other.id, scope: "dispatch"))),
            ("another audience", try await backend.sign(.session(owner.id, scope: "dispatch", audience: "another-app"))),
            ("no audience", try await backend.sign(.session(owner.id, scope: "dispatch", audience: nil))),
            ("no exp", try await backend.sign(noExp)),
            ("unknown scope", try await backend.sign(badScope)),
            ("create scope on a session", try await backend.sign(.session(owner.id, scope: "create"))),
        ]
        for (what, token) in cases {
            let response = try await owner.with(token: token).dispatch("counter", ["type": "increment"])
            expectError(response, 401, "unauthorized", messageContains: "JWT", "\(what)")
            #expect(response.header("WWW-Authenticate")?.hasPrefix("Bearer") == true, "\(what)")
        }
        #expect(try await owner.store("counter").version == 0)
        // The valid one works.
        try await owner.with(token: valid).dispatchOK("counter", ["type": "increment"])
    }

    @Test("a JWT whose header has crit is refused 401 whatever crit lists (RFC 7515 §4.1.11: this server understands no extension), nothing done; the same token without crit is accepted")
    func critRefused() async throws {
        let owner = try await SharedServer.api().createSession()
        let exp = Int(Date().addingTimeInterval(300).timeIntervalSince1970)
        let payload = #"{"exp":\#(exp),"aud":["\#(audience)"],"scope":"dispatch","session":"\#(owner.id)"}"#
        // Signed as the backend would, with the header as written here.
        func signed(_ header: String) -> String {
            let input = base64URL(header.utf8) + "." + base64URL(payload.utf8)
            let mac = HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: SymmetricKey(data: Data(jwtSecret.utf8)))
            return input + "." + base64URL(Data(mac))
        }
        let headers = [
            #"{"alg":"HS256","typ":"JWT","crit":["exp"]}"#,
            #"{"alg":"HS256","typ":"JWT","crit":["https://example.com/must-check"],"https://example.com/must-check":true}"#,
            #"{"alg":"HS256","crit":["b64"],"b64":true}"#,
            #"{"alg":"HS256","typ":"JWT","crit":[]}"#,
            #"{"alg":"HS256","typ":"JWT","crit":"exp"}"#,
            #"{"alg":"HS256","typ":"JWT","crit":null}"#,
        ]
        for header in headers {
            let response = try await owner.with(token: signed(header)).dispatch("counter", ["type": "increment"])
            expectError(response, 401, "unauthorized", messageContains: "crit", "\(header)")
            #expect(response.header("WWW-Authenticate")?.hasPrefix("Bearer") == true, "\(header)")
        }
        #expect(try await owner.store("counter").version == 0)
        try await owner.with(token: signed(#"{"alg":"HS256","typ":"JWT"}"#)).dispatchOK("counter", ["type": "increment"])
    }

    @Test("a stream opened with a JWT ends when the JWT expires")
    func streamEndsAtExp() async throws {
        let owner = try await SharedServer.api().createSession()
        let backend = await Backend.hmac()
        // The JWT lives 2 s on the real clock. Should this test wait longer than that for a turn
        // before its stream is open (the pool can starve it), the stream is refused as expired
        // (401); then a fresh JWT is tried.
        let opened = try await poll(timeout: .seconds(60)) { () -> EventStream? in
            let viewer = owner.with(token: try await backend.sign(.session(owner.id, scope: "observe", expiresIn: 2)))
            let stream = try await viewer.events()
            if stream.status == 200 { return stream }
            #expect(stream.status == 401, "\(stream.head)")
            stream.close()
            return nil
        }
        let stream = try #require(opened, "no stream opened with a fresh JWT")
        defer { stream.close() }
        #expect(try await stream.nextEvent().event == "snapshot")
        let last = try await stream.nextEvent(timeout: .seconds(30))
        #expect(last.event == "revoked" && last.json?["reason"] == "expired", "\(last)")
        #expect(try await stream.waitForEnd(timeout: .seconds(30)))
    }
}

/// The keys and the session creation the routes take, in process: `auth.createSessions: jwt`
/// (`RouteSettings.sessionsNeedJWT`), and ES256 and RS256 public keys read by the parser the
/// binary reads `auth.jwtPublicKey` with (`JWTVerifier.Key(pem:)`).
@Suite("JWT keys and session creation")
struct JWTKeyTests {
    @Test("createSessions jwt: POST /v1/sessions needs a JWT of scope create")
    func createNeedsJWT() async throws {
        try await withInProcessServer({ settings in
            settings.routes.jwt = JWTVerifier(key: .secret(jwtSecret), audience: nil)
            settings.routes.sessionsNeedJWT = true
        }) { server in
            let api = server.api
            let backend = await Backend.hmac()
            expectError(try await api.request("POST", "/v1/sessions"), 401, "unauthorized")
            let opaque = try await api.request("POST", "/v1/sessions", headers: [("Authorization", "Bearer abc")])
            expectError(opaque, 401, "unauthorized")
            let dispatchScope = try await backend.sign(.session("x", scope: "dispatch", audience: nil))
            expectError(
                try await api.request("POST", "/v1/sessions", headers: [("Authorization", "Bearer \(dispatchScope)")]), 401, "unauthorized")
            let forged = try await Backend.hmac("not-the-secret-but-just-as-long-0123456789").sign(Self.create)
            expectError(
                try await api.request("POST", "/v1/sessions", headers: [("Authorization", "Bearer \(forged)")]), 401, "unauthorized")
            let created = try await api.request(
                "POST", "/v1/sessions", headers: [("Authorization", "Bearer \(try await backend.sign(Self.create))")])
            #expect(created.status == 201, "\(created)")
            let session = Session(
                api: api, id: try #require(created.json?["id"]?.string), token: try #require(created.json?["token"]?.string))
            try await session.dispatchOK("counter", ["type": "increment"])
        }
    }

    /// Claims of scope `create`: no session.
    static var create: BackendClaims {
        var claims = BackendClaims.session("", scope: "create", audience: nil)
        claims.session = nil
        return claims
    }

    @Test("ES256 and RS256 public keys verify their tokens and refuse HS256 ones made with the public key as secret")
    func publicKeys() async throws {
        let p256 = P256.Signing.PrivateKey()
        let rsa = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let cases: [(String, String, Backend)] = [
            ("ES256", p256.publicKey.pemRepresentation, await {
                let backend = Backend()
                await backend.keys.add(ecdsa: try! ES256PrivateKey(backing: p256))
                return backend
            }()),
            ("RS256", rsa.publicKey.pemRepresentation, await {
                let backend = Backend()
                await backend.keys.add(rsa: try! Insecure.RSA.PrivateKey(backing: rsa), digestAlgorithm: .sha256)
                return backend
            }()),
        ]
        for (algorithm, pem, backend) in cases {
            let key = try #require(JWTVerifier.Key(pem: pem), "\(algorithm)")
            #expect(key.algorithm.rawValue == algorithm)
            try await withInProcessServer({ $0.routes.jwt = JWTVerifier(key: key, audience: nil) }) { server in
                let owner = try await server.api.createSession()
                let token = try await backend.sign(.session(owner.id, scope: "dispatch", audience: nil))
                var encoded = String(token.prefix { $0 != "." })
                while encoded.count % 4 != 0 { encoded += "=" }
                let header = try #require(Data(base64Encoded: encoded))
                #expect(String(decoding: header, as: UTF8.self).contains(#""alg":"\#(algorithm)""#), "\(algorithm)")
                try await owner.with(token: token).dispatchOK("counter", ["type": "increment"])
                // The classic confusion: HS256 signed with the public key's text as the secret.
                let confused = try await Backend.hmac(pem).sign(.session(owner.id, scope: "dispatch", audience: nil))
                expectError(try await owner.with(token: confused).dispatch("counter", ["type": "increment"]), 401, "unauthorized", "\(algorithm)")
                #expect(try await owner.store("counter").version == 1)
            }
        }
    }
}

/// The binary's JWT settings, over a socket: what `auth.*` and `log.audit` configure reaches the
/// routes (one JWT of each kind of key accepted end to end), and settings refused at start.
@Suite("JWT settings")
struct JWTSettingsTests {
    @Test("over a socket: auth.jwtSecret, auth.jwtAudience, auth.createSessions jwt and log.audit reach the routes")
    func secretOverSocket() async throws {
        let environment = [
            "STATE_SERVER_AUTH_JWT_SECRET": jwtSecret, "STATE_SERVER_AUTH_JWT_AUDIENCE": audience,
            "STATE_SERVER_AUTH_CREATE_SESSIONS": "jwt", "STATE_SERVER_LOG_AUDIT": "true",
        ]
        try await withServer(environment: environment) { server in
            let api = server.api
            let backend = await Backend.hmac()
            // auth.createSessions: jwt.
            expectError(try await api.request("POST", "/v1/sessions"), 401, "unauthorized")
            var create = JWTKeyTests.create
            create.aud = AudienceClaim(value: [audience])
            let created = try await api.request(
                "POST", "/v1/sessions", headers: [("Authorization", "Bearer \(try await backend.sign(create))")])
            #expect(created.status == 201, "\(created)")
            let owner = Session(
                api: api, id: try #require(created.json?["id"]?.string), token: try #require(created.json?["token"]?.string))
            // auth.jwtSecret: a dispatch JWT is accepted; log.audit: its line names the JWT's sub.
            let user = owner.with(token: try await backend.sign(.session(owner.id, scope: "dispatch", sub: "user-42")))
            try await user.dispatchOK("counter", ["type": "increment"])
            let logged = try await eventually { server.output.stderrText.contains("subject=user-42") }
            #expect(logged, "the audit line names the JWT's sub")
            // auth.jwtAudience: a JWT for another audience is refused.
            let elsewhere = owner.with(token: try await backend.sign(.session(owner.id, scope: "dispatch", audience: "another-app")))
            expectError(try await elsewhere.dispatch("counter", ["type": "increment"]), 401, "unauthorized", messageContains: "JWT")
            #expect(try await owner.store("counter").version == 1)
        }
    }

    @Test("over a socket: auth.jwtPublicKey is read from its file; a token signed with its private key is accepted")
    func publicKeyOverSocket() async throws {
        let directory = try TemporaryDirectory("jwt-keys")
        defer { directory.remove() }
        let p256 = P256.Signing.PrivateKey()
        let path = directory.path("ES256.pem")
        try Data(p256.publicKey.pemRepresentation.utf8).write(to: URL(fileURLWithPath: path))
        let backend = Backend()
        await backend.keys.add(ecdsa: try ES256PrivateKey(backing: p256))
        try await withServer(environment: ["STATE_SERVER_AUTH_JWT_PUBLIC_KEY": path]) { server in
            let owner = try await server.api.createSession()
            let token = try await backend.sign(.session(owner.id, scope: "dispatch", audience: nil))
            try await owner.with(token: token).dispatchOK("counter", ["type": "increment"])
            // Only the configured key verifies: a token signed with another P-256 key is refused.
            let stranger = Backend()
            await stranger.keys.add(ecdsa: try ES256PrivateKey(backing: P256.Signing.PrivateKey()))
            let forged = try await stranger.sign(.session(owner.id, scope: "dispatch", audience: nil))
            expectError(try await owner.with(token: forged).dispatch("counter", ["type": "increment"]), 401, "unauthorized")
            #expect(try await owner.store("counter").version == 1)
        }
    }

    @Test("a short secret, both keys, an unreadable or wrong key, jwt creation without a key: the server does not start")
    func refusedSettings() async throws {
        let directory = try TemporaryDirectory("jwt-settings")
        defer { directory.remove() }
        let notPEM = directory.path("not.pem")
        try Data("hello".utf8).write(to: URL(fileURLWithPath: notPEM))
        let cases: [([String: String], String)] = [
            (["STATE_SERVER_AUTH_JWT_SECRET": "short"], "auth.jwtSecret"),
            (["STATE_SERVER_AUTH_JWT_SECRET": jwtSecret, "STATE_SERVER_AUTH_JWT_PUBLIC_KEY": notPEM], "not both"),
            (["STATE_SERVER_AUTH_JWT_PUBLIC_KEY": directory.path("missing.pem")], "auth.jwtPublicKey"),
            (["STATE_SERVER_AUTH_JWT_PUBLIC_KEY": notPEM], "not a PEM public key"),
            (["STATE_SERVER_AUTH_CREATE_SESSIONS": "jwt"], "auth.createSessions"),
        ]
        let binary = try #require(ServerBinary.locate())
        for (environment, message) in cases {
            let (process, output) = try ServerProcess.launch(binary, arguments: ["--port", "0"], environment: environment)
            let ended = try await eventually(timeout: .seconds(60)) { !process.isRunning && output.allClosed }
            if !ended { process.terminate() }
            #expect(ended, "the server started with \(environment)")
            #expect(process.terminationStatus != 0, "\(environment)")
            #expect(output.stderrText.contains(message), "\(environment): \(output.stderrText)")
            #expect(!output.stderrText.contains(jwtSecret), "the secret is not printed")
        }
    }

    @Test("--print-config hides the JWT secret")
    func printConfigHidesSecret() async throws {
        let binary = try #require(ServerBinary.locate())
        let (process, output) = try ServerProcess.launch(
            binary, arguments: ["--print-config"], environment: ["STATE_SERVER_AUTH_JWT_SECRET": jwtSecret])
        #expect(try await eventually(timeout: .seconds(60)) { !process.isRunning && output.allClosed })
        #expect(output.stdoutText.contains("\"auth.jwtSecret\" : \"***\"") || output.stdoutText.contains("\"auth.jwtSecret\":\"***\""), "\(output.stdoutText)")
        #expect(!output.stdoutText.contains(jwtSecret))
    }
}
