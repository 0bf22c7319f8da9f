import Foundation
import StateServerHTTP

/// Who may create sessions: anyone (`open`), or only holders of a JWT of scope `create` from
/// the app's backend (`jwt`).
enum SessionCreation: String, SettingChoice {
    case open
    case jwt
}

/// Bearer JWTs from the app's backend (docs/API.md, "JWTs").
///
/// | key | type | default |
/// | --- | --- | --- |
/// | `auth.jwtSecret` | HS256 shared secret, at least 32 bytes (`--print-config` shows `***`) | none |
/// | `auth.jwtPublicKey` | path of a PEM public key: P-256 (ES256) or RSA ≥ 2048 bits (RS256) | none |
/// | `auth.jwtAudience` | when set, a JWT's `aud` must name it | none |
/// | `auth.createSessions` | `open` or `jwt` (`POST /v1/sessions` needs a JWT of scope `create`) | `open` |
struct AuthSettings: Sendable {
    static let jwtSecret = Setting("auth.jwtSecret", default: "", "HS256 secret of JWTs, >= 32 bytes")
    static let jwtPublicKey = Setting("auth.jwtPublicKey", default: "", "PEM file: ES256 or RS256 key")
    static let jwtAudience = Setting("auth.jwtAudience", default: "", "required JWT 'aud', if set")
    static let createSessions = Setting("auth.createSessions", default: SessionCreation.open, "open or jwt")
    static let secretMinimum = 32

    var jwt: JWTVerifier?
    var createSessions = SessionCreation.open

    init(_ read: inout SettingsReader) throws(SettingsError) {
        let secret = try read(Self.jwtSecret)
        let keyPath = try read(Self.jwtPublicKey)
        let audience = try read(Self.jwtAudience)
        createSessions = try read(Self.createSessions)
        let key: JWTVerifier.Key?
        switch (secret.isEmpty, keyPath.isEmpty) {
        case (false, false):
            throw SettingsError.notAllowed(
                key: Self.jwtSecret.key, allowed: "one of auth.jwtSecret and auth.jwtPublicKey, not both", got: "both set")
        case (false, true):
            guard secret.utf8.count >= Self.secretMinimum else {
                throw SettingsError.notAllowed(
                    key: Self.jwtSecret.key, allowed: "a secret of at least \(Self.secretMinimum) bytes (HS256 needs 256 bits)",
                    got: "\(secret.utf8.count) bytes")
            }
            key = .secret(secret)
        case (true, false):
            let pem: String
            do {
                pem = try String(contentsOfFile: keyPath, encoding: .utf8)
            } catch {
                throw SettingsError.notAllowed(
                    key: Self.jwtPublicKey.key, allowed: "the path of a readable PEM file",
                    got: "\(keyPath) (\(error.localizedDescription))")
            }
            guard let parsed = JWTVerifier.Key(pem: pem) else {
                throw SettingsError.notAllowed(
                    key: Self.jwtPublicKey.key,
                    allowed: "a PEM public key of P-256 (ES256) or RSA of 2048 bits or more (RS256)", got: "\(keyPath), not a PEM public key")
            }
            key = parsed
        case (true, true):
            key = nil
        }
        jwt = key.map { JWTVerifier(key: $0, audience: audience.isEmpty ? nil : audience) }
        if createSessions == .jwt, jwt == nil {
            throw SettingsError.notAllowed(
                key: Self.createSessions.key, allowed: "jwt only with auth.jwtSecret or auth.jwtPublicKey set", got: "jwt")
        }
    }
}
