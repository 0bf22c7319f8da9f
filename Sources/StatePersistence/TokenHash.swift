import CGnuTLS

/// SHA-256, from GnuTLS (already linked by libmicrohttpd).
public enum SHA256 {
    public static func hash(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        let rc = bytes.withUnsafeBytes { raw in
            digest.withUnsafeMutableBytes { out in
                gnutls_hash_fast(GNUTLS_DIG_SHA256, raw.baseAddress, raw.count, out.baseAddress)
            }
        }
        precondition(rc == 0, "GnuTLS could not compute SHA-256")
        return digest
    }

    public static func hash(_ string: String) -> [UInt8] { hash(Array(string.utf8)) }
}
