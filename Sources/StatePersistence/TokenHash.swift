import CGnuTLS

/// SHA-256, from GnuTLS (already linked by libmicrohttpd). Returns 32 bytes, or an empty array
/// if GnuTLS cannot hash (never equal to a real digest).
public enum SHA256 {
    public static func hash(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        let rc = bytes.withUnsafeBytes { raw in
            digest.withUnsafeMutableBytes { out in
                gnutls_hash_fast(GNUTLS_DIG_SHA256, raw.baseAddress, raw.count, out.baseAddress)
            }
        }
        // gnutls_hash_fast fails only if SHA-256 is unavailable (a broken GnuTLS). An empty digest
        // then never equals a stored one: verification fails, nothing traps.
        return rc == 0 ? digest : []
    }

    public static func hash(_ string: String) -> [UInt8] { hash(Array(string.utf8)) }
}
