import CMicroHTTPDShim
import Foundation

extension HTTPServer {
    /// HTTPS served by the server itself: libmicrohttpd's TLS (GnuTLS) with one certificate chain
    /// and its private key. A server with TLS speaks only HTTPS on its port; a plain HTTP request
    /// there fails the handshake and its connection is closed.
    ///
    /// Made only through ``init(certificateChain:key:priorities:)``, which checks everything
    /// libmicrohttpd would otherwise refuse without saying why.
    public struct TLS: Sendable, CustomStringConvertible {
        /// PEM text of the chain, the server's certificate first.
        let certificateChain: String
        /// PEM text of the private key (never printed).
        let key: String
        /// GnuTLS priority string (`nil`: libmicrohttpd's `NORMAL`).
        let priorities: String?
        /// The server certificate's validity, when it says.
        public let notBefore: Date?
        public let notAfter: Date?
        /// Certificates in the chain.
        public let chainLength: Int

        /// Checks that this libmicrohttpd serves HTTPS, that `certificateChain` is PEM with at
        /// least one X.509 certificate, that `key` is an unencrypted PEM private key belonging to
        /// the first certificate, and that `priorities` (a GnuTLS priority string) is valid.
        public init(certificateChain: [UInt8], key: [UInt8], priorities: String?) throws(TLSError) {
            // PEM is ASCII text: a NUL would cut it short for GnuTLS.
            guard !certificateChain.contains(0), let chainText = String(validating: certificateChain, as: UTF8.self) else {
                throw TLSError(part: .certificate, description: "certificate: not PEM text (a NUL byte, or not UTF-8)")
            }
            guard !key.contains(0), let keyText = String(validating: key, as: UTF8.self) else {
                throw TLSError(part: .key, description: "key: not PEM text (a NUL byte, or not UTF-8)")
            }
            if let priorities, priorities.utf8.contains(0) {
                throw TLSError(part: .priorities, description: "priorities: a NUL byte in the priority string")
            }
            self.certificateChain = chainText
            self.key = keyText
            self.priorities = priorities
            var facts = ss_tls_facts()
            var error = [CChar](repeating: 0, count: 512)
            let result = Self.withCStrings(chainText, keyText, priorities) { certificate, key, priorities in
                ss_tls_check(certificate, key, priorities, &facts, &error, error.count)
            }
            guard result == 0 else {
                let text = String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                let part: TLSError.Part =
                    text.hasPrefix("certificate:") ? .certificate
                    : text.hasPrefix("key:") ? .key : text.hasPrefix("priorities:") ? .priorities : .library
                throw TLSError(part: part, description: text)
            }
            notBefore = facts.not_before >= 0 ? Date(timeIntervalSince1970: TimeInterval(facts.not_before)) : nil
            notAfter = facts.not_after >= 0 ? Date(timeIntervalSince1970: TimeInterval(facts.not_after)) : nil
            chainLength = Int(facts.chain_length)
        }

        /// The C strings, valid inside `body` only.
        func withPointers<T>(_ body: (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafePointer<CChar>?) -> T) -> T {
            Self.withCStrings(certificateChain, key, priorities, body)
        }

        private static func withCStrings<T>(
            _ certificateChain: String, _ key: String, _ priorities: String?,
            _ body: (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafePointer<CChar>?) -> T
        ) -> T {
            certificateChain.withCString { certificate in
                key.withCString { key in
                    if let priorities {
                        priorities.withCString { body(certificate, key, $0) }
                    } else {
                        body(certificate, key, nil)
                    }
                }
            }
        }

        public var description: String {
            "TLS(\(chainLength) certificate(s), key ***, priorities \(priorities ?? "NORMAL"))"
        }
    }

    /// Why TLS settings cannot be used; ``part`` says which of them is at fault.
    public struct TLSError: Error, CustomStringConvertible {
        public enum Part: Sendable {
            case certificate, key, priorities
            /// libmicrohttpd or GnuTLS as a whole (no HTTPS support, the pair refused).
            case library
        }

        public let part: Part
        /// One line, starting with `certificate:`, `key:` or `priorities:` when one of them is at
        /// fault.
        public let description: String

        /// The description without its `certificate:`, `key:` or `priorities:` prefix.
        public var reason: String {
            guard part != .library, let colon = description.firstIndex(of: ":") else { return description }
            return description[description.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
    }
}
