import CGnuTLS
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The healthcheck against a server that serves HTTPS itself (`tls.cert`, `tls.key`): a TLS
/// client (GnuTLS, the library libmicrohttpd serves TLS with) that accepts exactly one
/// certificate, the first one in the server's own `tls.cert` file. Pinning the server's own
/// certificate needs no CA, no trust store and no host name (the probe asks a loopback or listen
/// address, which a certificate rarely names), and it accepts nothing else: a process that took
/// the port without that certificate is reported, not believed.
extension HealthProbe {
    /// The certificate the server must present, as DER bytes.
    struct PinnedCertificate {
        let der: [UInt8]

        /// The first `-----BEGIN CERTIFICATE-----` block of a PEM file.
        init(pem: [UInt8]) throws(Problem) {
            let text = String(decoding: pem, as: UTF8.self)
            guard let begin = text.range(of: "-----BEGIN CERTIFICATE-----"),
                let end = text.range(of: "-----END CERTIFICATE-----", range: begin.upperBound..<text.endIndex),
                let der = Data(base64Encoded: text[begin.upperBound..<end.lowerBound].filter { !$0.isWhitespace }),
                !der.isEmpty
            else {
                throw Problem(message: "no PEM certificate in tls.cert")
            }
            self.der = [UInt8](der)
        }
    }

    /// Sends `request` over TLS on the connected socket `fd` and reads the status line, after
    /// checking that the server's certificate is `pinned`.
    static func exchangeTLS(_ fd: Int32, request: String, pinned: PinnedCertificate, timeout: Double) -> Result<Int, Problem> {
        var credentials: gnutls_certificate_credentials_t?
        guard gnutls_certificate_allocate_credentials(&credentials) >= 0, let credentials else {
            return .failure(Problem(message: "TLS: cannot allocate credentials"))
        }
        defer { gnutls_certificate_free_credentials(credentials) }
        var made: gnutls_session_t?
        guard gnutls_init(&made, UInt32(GNUTLS_CLIENT)) >= 0, let session = made else {
            return .failure(Problem(message: "TLS: cannot make a session"))
        }
        defer { gnutls_deinit(session) }
        guard gnutls_set_default_priority(session) >= 0,
            gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, UnsafeMutableRawPointer(credentials)) >= 0
        else {
            return .failure(Problem(message: "TLS: cannot set up the session"))
        }
        gnutls_transport_set_int2(session, fd, fd)
        gnutls_handshake_set_timeout(session, UInt32(max(1, timeout * 1000)))
        var rc: Int32
        repeat {
            rc = gnutls_handshake(session)
        } while rc == GNUTLS_E_INTERRUPTED
        guard rc >= 0 else {
            return .failure(Problem(message: "TLS handshake failed: \(String(cString: gnutls_strerror(rc)))"))
        }
        var count: UInt32 = 0
        guard let peers = gnutls_certificate_get_peers(session, &count), count > 0,
            let data = peers.pointee.data
        else {
            return .failure(Problem(message: "TLS: the server sent no certificate"))
        }
        let leaf = Array(UnsafeBufferPointer(start: data, count: Int(peers.pointee.size)))
        guard leaf == pinned.der else {
            return .failure(Problem(message: "TLS: the server's certificate is not the one in tls.cert"))
        }
        return exchange(
            request: request,
            send: { bytes in
                var sent: Int
                repeat {
                    sent = gnutls_record_send(session, bytes.baseAddress, bytes.count)
                } while sent == Int(GNUTLS_E_INTERRUPTED)
                return sent > 0 ? .success(sent) : .failure(Problem(message: "cannot send: \(Self.tlsError(sent))"))
            },
            receive: { buffer in
                var received: Int
                repeat {
                    received = gnutls_record_recv(session, buffer.baseAddress, buffer.count)
                } while received == Int(GNUTLS_E_INTERRUPTED)
                // A close without close_notify ends the reply too (the status line is all we need).
                if received == Int(GNUTLS_E_PREMATURE_TERMINATION) { return .success(0) }
                return received >= 0 ? .success(received) : .failure(Problem(message: "no reply: \(Self.tlsError(received))"))
            })
    }

    private static func tlsError(_ code: Int) -> String {
        code == Int(GNUTLS_E_AGAIN) ? "timed out" : String(cString: gnutls_strerror(Int32(clamping: code)))
    }
}
