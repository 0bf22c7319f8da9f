import Foundation
import Logging
import MicroHTTP
import NIOSSL

/// HTTPS served by the server itself (libmicrohttpd's GnuTLS), instead of behind a proxy that
/// terminates TLS. Both files or neither; with them the port speaks HTTPS only.
///
/// | key | type | default |
/// | --- | --- | --- |
/// | `tls.cert` | path of a PEM file: the certificate, then any intermediates | `""` (plain HTTP) |
/// | `tls.key` | path of a PEM file: its private key, unencrypted | `""` |
/// | `tls.priorities` | GnuTLS priority string (protocol versions, ciphers) | `NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2` |
/// | `cluster.caFile` | path of a PEM file: certificates trusted, besides the system's, for other nodes' `https://` URLs | `""` |
///
/// The files are read once, at start (a renewed certificate needs a restart). An encrypted key
/// is refused: it would need a passphrase at every start; file permissions protect it instead.
struct TLSSettings: Sendable {
    static let certificate = Setting("tls.cert", default: "", "HTTPS certificate chain, PEM file")
    static let key = Setting("tls.key", default: "", "HTTPS private key, PEM file")
    /// TLS 1.2 and 1.3 only: GnuTLS's NORMAL still offers TLS 1.0 and 1.1, which browsers and
    /// RFC 8996 dropped.
    static let priorities = Setting(
        "tls.priorities", default: "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2", "GnuTLS priority string")

    /// Several nodes serving HTTPS: the CA certificates (or the nodes' own self-signed ones) a
    /// node trusts, besides the system's CA bundle, when it forwards to another node's
    /// `https://` advertised URL.
    static let clusterCAFile = Setting("cluster.caFile", default: "", "CA PEM file for peers' https URLs")

    /// A PEM file larger than this is not a certificate chain or a key.
    static let fileLimit = 1 << 20

    var certificatePath: String
    var keyPath: String
    var priorities: String
    var clusterCAFilePath: String
    /// The certificates of `cluster.caFile`, read at start (``loadClusterTrust()``).
    var clusterTrust: [NIOSSLCertificate] = []

    /// Whether the server speaks HTTPS.
    var isEnabled: Bool { !certificatePath.isEmpty }

    init(_ read: inout SettingsReader) throws(SettingsError) {
        certificatePath = try read(Self.certificate)
        keyPath = try read(Self.key)
        priorities = try read(Self.priorities)
        clusterCAFilePath = try read(Self.clusterCAFile)
        if certificatePath.isEmpty != keyPath.isEmpty {
            let (missing, given) = certificatePath.isEmpty ? (Self.certificate.key, Self.key.key) : (Self.key.key, Self.certificate.key)
            throw SettingsError.notAllowed(
                key: missing, allowed: "set together with '\(given)' (both PEM file paths for HTTPS, or neither)", got: "''")
        }
        if isEnabled && priorities.isEmpty {
            throw SettingsError.notAllowed(key: Self.priorities.key, allowed: "a GnuTLS priority string", got: "''")
        }
    }

    /// Reads and checks the files: `nil` without TLS; an error naming the setting and the file
    /// when one cannot be read, is not PEM, the key is encrypted or not the certificate's, or the
    /// priorities are not valid.
    func load() throws(TLSSettingsError) -> HTTPServer.TLS? {
        guard isEnabled else { return nil }
        let certificate = try Self.read(certificatePath, setting: Self.certificate.key)
        let key = try Self.read(keyPath, setting: Self.key.key)
        do {
            return try HTTPServer.TLS(certificateChain: certificate, key: key, priorities: priorities)
        } catch {
            switch error.part {
            case .certificate: throw TLSSettingsError(setting: Self.certificate.key, path: certificatePath, problem: error.reason)
            case .key: throw TLSSettingsError(setting: Self.key.key, path: keyPath, problem: error.reason)
            case .priorities: throw TLSSettingsError(setting: Self.priorities.key, path: nil, problem: error.reason)
            case .library: throw TLSSettingsError(setting: nil, path: nil, problem: error.reason)
            }
        }
    }

    /// The certificates of `cluster.caFile` (none when it is empty), or why it cannot be used.
    func loadClusterTrust() throws(TLSSettingsError) -> [NIOSSLCertificate] {
        guard !clusterCAFilePath.isEmpty else { return [] }
        let bytes = try Self.read(clusterCAFilePath, setting: Self.clusterCAFile.key)
        let certificates: [NIOSSLCertificate]
        do {
            certificates = try NIOSSLCertificate.fromPEMBytes(bytes)
        } catch {
            throw TLSSettingsError(setting: Self.clusterCAFile.key, path: clusterCAFilePath, problem: "not PEM certificates (\"-----BEGIN CERTIFICATE-----\"): \(error)")
        }
        guard !certificates.isEmpty else {
            throw TLSSettingsError(setting: Self.clusterCAFile.key, path: clusterCAFilePath, problem: "no PEM certificate in it")
        }
        return certificates
    }

    /// The bytes of a PEM file, or why not.
    static func read(_ path: String, setting: String) throws(TLSSettingsError) -> [UInt8] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw TLSSettingsError(setting: setting, path: path, problem: "no such file")
        }
        guard !isDirectory.boolValue else { throw TLSSettingsError(setting: setting, path: path, problem: "is a directory") }
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw TLSSettingsError(setting: setting, path: path, problem: "cannot be read (permission denied?)")
        }
        defer { try? handle.close() }
        let data: Data
        do {
            data = try handle.read(upToCount: fileLimit + 1) ?? Data()
        } catch {
            throw TLSSettingsError(setting: setting, path: path, problem: "cannot be read: \(error.localizedDescription)")
        }
        guard data.count <= fileLimit else {
            throw TLSSettingsError(setting: setting, path: path, problem: "larger than \(fileLimit) bytes: not a PEM file")
        }
        guard !data.isEmpty else { throw TLSSettingsError(setting: setting, path: path, problem: "is empty") }
        return [UInt8](data)
    }
}

extension TLSSettings {
    /// Logged with the `listening on` line: when the certificate expires (none without TLS).
    static func metadata(_ tls: HTTPServer.TLS?) -> Logger.Metadata {
        guard let tls else { return [:] }
        return ["tls.notAfter": "\(tls.notAfter.map { $0.formatted(.iso8601) } ?? "unknown")"]
    }

    /// A warning when the certificate is expired or not valid yet: clients will refuse it, but
    /// the server starts (a clock may be wrong, a renewal may be on its way).
    static func logValidity(_ tls: HTTPServer.TLS, logger: Logger, now: Date = Date()) {
        if let notAfter = tls.notAfter, notAfter < now {
            logger.warning(
                "the TLS certificate has expired: clients will refuse it; renew it and restart",
                metadata: ["tls.notAfter": "\(notAfter.formatted(.iso8601))"])
        } else if let notBefore = tls.notBefore, notBefore > now {
            logger.warning(
                "the TLS certificate is not valid yet: clients will refuse it until then",
                metadata: ["tls.notBefore": "\(notBefore.formatted(.iso8601))"])
        }
    }
}

/// TLS settings that cannot be used: the setting and file at fault, and why.
struct TLSSettingsError: Error, CustomStringConvertible {
    let setting: String?
    let path: String?
    let problem: String

    var description: String {
        switch (setting, path) {
        case (let setting?, let path?): "setting '\(setting)' ('\(path)'): \(problem)"
        case (let setting?, nil): "setting '\(setting)': \(problem)"
        default: "TLS: \(problem)"
        }
    }
}

extension HTTPSettings {
    /// `https` when the server serves TLS itself, else `http`.
    var scheme: String { server.tls == nil ? "http" : "https" }
}
