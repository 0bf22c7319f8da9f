import Crypto
import CryptoExtras
import Foundation
import JWTKit
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

/// Bearer JWTs over a real socket, HS256 with an audience; the audit log names the JWT's subject.
@Suite(
    "JWTs from the app's backend",
    .localServer(environment: [
        "STATE_SERVER_AUTH_JWT_SECRET": jwtSecret, "STATE_SERVER_AUTH_JWT_AUDIENCE": audience, "STATE_SERVER_LOG_AUDIT": "true",
    ]))
struct JWTTests {
    @Test("a dispatch JWT for the session dispatches, streams and is written to the audit log with its sub")
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
        // EventSource passes it as access_token.
        let stream = try await owner.api.openEvents(
            "\(owner.path)/events?access_token=\(try await backend.sign(claims))", headers: [], receiveBufferSize: nil)
        defer { stream.close() }
        #expect(stream.status == 200, "\(stream.head)")
        #expect(try await stream.nextEvent().json?["features"]?.object?.keys.sorted() == ["todos"])
        let logged = try await eventually {
            SharedServer.current?.output.stderrText.contains("subject=user-42") == true
        }
        #expect(logged, "the audit line names the JWT's sub")
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

    @Test("a stream opened with a JWT ends when the JWT expires")
    func streamEndsAtExp() async throws {
        let owner = try await SharedServer.api().createSession()
        let backend = await Backend.hmac()
        let viewer = owner.with(token: try await backend.sign(.session(owner.id, scope: "observe", expiresIn: 2)))
        let (stream, _) = try await viewer.subscribe()
        defer { stream.close() }
        let last = try await stream.nextEvent(timeout: .seconds(10))
        #expect(last.event == "revoked" && last.json?["reason"] == "expired", "\(last)")
        #expect(try await stream.waitForEnd())
    }
}

/// `auth.createSessions: jwt`, ES256 and RS256 keys, and settings refused at start.
@Suite("JWT settings")
struct JWTSettingsTests {
    @Test("createSessions jwt: POST /v1/sessions needs a JWT of scope create")
    func createNeedsJWT() async throws {
        try await withServer(environment: ["STATE_SERVER_AUTH_JWT_SECRET": jwtSecret, "STATE_SERVER_AUTH_CREATE_SESSIONS": "jwt"]) { server in
            let api = server.api
            let backend = await Backend.hmac()
            expectError(try await api.request("POST", "/v1/sessions"), 401, "unauthorized")
            let opaque = try await api.request("POST", "/v1/sessions", headers: [("Authorization", "Bearer abc")])
            expectError(opaque, 401, "unauthorized")
            let dispatchScope = try await backend.sign(.session("x", scope: "dispatch", audience: nil))
            expectError(
                try await api.request("POST", "/v1/sessions", headers: [("Authorization", "Bearer \(dispatchScope)")]), 401, "unauthorized")
            var create = BackendClaims.session("", scope: "create", audience: nil)
            create.session = nil
            let created = try await api.request(
                "POST", "/v1/sessions", headers: [("Authorization", "Bearer \(try await backend.sign(create))")])
            #expect(created.status == 201, "\(created)")
            let session = Session(
                api: api, id: try #require(created.json?["id"]?.string), token: try #require(created.json?["token"]?.string))
            try await session.dispatchOK("counter", ["type": "increment"])
        }
    }

    @Test("ES256 and RS256 public keys verify their tokens and refuse HS256 ones made with the public key as secret")
    func publicKeys() async throws {
        let directory = try TemporaryDirectory("jwt-keys")
        defer { directory.remove() }
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
            let path = directory.path("\(algorithm).pem")
            try Data(pem.utf8).write(to: URL(fileURLWithPath: path))
            try await withServer(environment: ["STATE_SERVER_AUTH_JWT_PUBLIC_KEY": path]) { server in
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
