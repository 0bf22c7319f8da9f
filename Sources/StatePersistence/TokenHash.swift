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

/// HMAC-SHA256 (RFC 2104), from GnuTLS. Returns 32 bytes, or an empty array if GnuTLS cannot
/// compute it (never equal to a real MAC).
public enum HMACSHA256 {
    public static func mac(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        let rc = key.withUnsafeBytes { rawKey in
            message.withUnsafeBytes { raw in
                digest.withUnsafeMutableBytes { out in
                    gnutls_hmac_fast(GNUTLS_MAC_SHA256, rawKey.baseAddress, rawKey.count, raw.baseAddress, raw.count, out.baseAddress)
                }
            }
        }
        return rc == 0 ? digest : []
    }
}

/// The one comparison of secrets (token digests, MACs) in the codebase.
public enum ConstantTime {
    /// Whether `a` and `b` are the same bytes, in a time that depends on their length only,
    /// never on where they differ. Empty or unequal lengths are never equal (a failed hash,
    /// which is empty, matches nothing).
    public static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count, !a.isEmpty else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}
