import StatePersistence

extension PostgresStorage {
    /// Where PostgreSQL is and how to use it, read from `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`
    /// (or `postgresql://`).
    ///
    /// The password is kept out of every description: `description`, `debugDescription`,
    /// `redacted`, the mirror and the storage's `name` show `***` in its place, and no error
    /// built from settings contains it.
    ///
    /// URL query parameters: `sslmode` (`disable`, `prefer` — the default —, `require`),
    /// `pool_size` (connections, 2 to 1000, default 10: the sweep holds one while its own
    /// queries use another) and `statement_timeout` (milliseconds a statement may run before
    /// PostgreSQL cancels it, default 5000, 0 = no limit).
    public struct Settings: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
        CustomReflectable
    {
        public enum TLSMode: String, Sendable, Equatable {
            case disable, prefer, require
        }

        public var host: String
        public var port: Int
        public var user: String
        /// Never printed; see the type's documentation.
        public var password: String?
        public var database: String
        public var tls: TLSMode
        /// The most connections the pool opens (each commit or read holds one while it runs).
        public var poolSize: Int
        /// How long a request waits for a connection before it fails as `.unavailable`
        /// (PostgreSQL down or every connection busy).
        public var connectionWait: Duration
        /// PostgreSQL's `statement_timeout` on every pooled connection: a statement stuck behind
        /// a lock or on a struggling server fails (and its session can answer) instead of
        /// holding a connection for as long as TCP takes to notice. `.zero`: no limit.
        public var statementTimeout: Duration
        /// How long a node's membership lasts without renewal (several nodes: one owner per
        /// session). The node renews it every quarter of this and stops serving from its
        /// copies once three quarters passed without a renewal; another node may take its
        /// sessions over only after the whole lease expired by PostgreSQL's clock. Not part of
        /// the URL: the server's `cluster.lease` setting.
        public var lease: Duration = .seconds(10)
        /// How much longer than `statementTimeout` an operation waits for PostgreSQL's answer
        /// before it fails as unreachable (a black hole cannot enforce its own timeout). Not a
        /// setting: tests that make PostgreSQL cancel statements on a loaded machine lengthen it.
        package var answerGrace: Duration = .seconds(2)

        public init(
            host: String, port: Int = 5432, user: String, password: String? = nil, database: String,
            tls: TLSMode = .prefer, poolSize: Int = 10, connectionWait: Duration = .seconds(5),
            statementTimeout: Duration = .seconds(5)
        ) {
            self.host = host
            self.port = port
            self.user = user
            self.password = password
            self.database = database
            self.tls = tls
            self.poolSize = poolSize
            self.connectionWait = connectionWait
            self.statementTimeout = statementTimeout
        }

        /// Whether `text` names PostgreSQL storage (starts with `postgres://` or `postgresql://`).
        public static func isPostgresURL(_ text: String) -> Bool {
            text.hasPrefix("postgres://") || text.hasPrefix("postgresql://")
        }

        private static let shape = "postgres://USER[:PASSWORD]@HOST[:PORT]/DB"

        /// Parses a PostgreSQL URL. Errors are `.unusable` and never quote the URL's password
        /// (nor the URL itself, which may hold one).
        public init(url text: String) throws(StorageError) {
            func bad(_ why: String) -> StorageError {
                StorageError(.unusable, "PostgreSQL storage URL is not valid (\(Self.shape)): \(why)")
            }
            let rest: Substring
            if text.hasPrefix("postgres://") {
                rest = text.dropFirst("postgres://".count)
            } else if text.hasPrefix("postgresql://") {
                rest = text.dropFirst("postgresql://".count)
            } else {
                throw bad("it must start with postgres:// or postgresql://")
            }
            // The authority ends at the first "/"; the user info at the authority's last "@".
            guard let slash = rest.firstIndex(of: "/") else { throw bad("no /DB after the host") }
            let authority = rest[..<slash]
            var pathAndQuery = rest[rest.index(after: slash)...]
            var query: Substring = ""
            if let mark = pathAndQuery.firstIndex(of: "?") {
                query = pathAndQuery[pathAndQuery.index(after: mark)...]
                pathAndQuery = pathAndQuery[..<mark]
            }
            guard let at = authority.lastIndex(of: "@") else { throw bad("no USER@ before the host") }
            let userInfo = authority[..<at]
            let hostPort = authority[authority.index(after: at)...]

            let userPart: Substring
            var password: String?
            if let colon = userInfo.firstIndex(of: ":") {
                userPart = userInfo[..<colon]
                guard let decoded = Self.percentDecoded(userInfo[userInfo.index(after: colon)...]) else {
                    throw bad("the password has a bad %-escape")
                }
                password = decoded
            } else {
                userPart = userInfo
            }
            guard let user = Self.percentDecoded(userPart), !user.isEmpty else { throw bad("no user name") }

            var host: Substring
            var portText: Substring?
            if hostPort.hasPrefix("[") {
                guard let close = hostPort.firstIndex(of: "]") else { throw bad("an IPv6 host without ]") }
                host = hostPort[hostPort.index(after: hostPort.startIndex)..<close]
                let after = hostPort[hostPort.index(after: close)...]
                if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { throw bad("text after the IPv6 host") }
            } else if let colon = hostPort.lastIndex(of: ":") {
                host = hostPort[..<colon]
                portText = hostPort[hostPort.index(after: colon)...]
            } else {
                host = hostPort
            }
            guard !host.isEmpty else { throw bad("no host") }
            var port = 5432
            if let portText {
                guard let value = Int(portText), (1...65535).contains(value) else { throw bad("the port is not a number from 1 to 65535") }
                port = value
            }
            guard let database = Self.percentDecoded(pathAndQuery), !database.isEmpty, !database.contains("/") else {
                throw bad("no database name after the host")
            }

            var tls = TLSMode.prefer
            var poolSize = 10
            var statementTimeout = Duration.seconds(5)
            for pair in query.split(separator: "&") where !pair.isEmpty {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let key = parts[0]
                let value = parts.count > 1 ? parts[1] : ""
                switch key {
                case "sslmode":
                    guard let mode = TLSMode(rawValue: String(value)) else { throw bad("sslmode must be disable, prefer or require") }
                    tls = mode
                case "pool_size":
                    guard let size = Int(value), (2...1000).contains(size) else {
                        throw bad("pool_size must be a number from 2 to 1000 (the sweep holds one connection while it uses another)")
                    }
                    poolSize = size
                case "statement_timeout":
                    guard let millis = Int(value), (0...3_600_000).contains(millis) else {
                        throw bad("statement_timeout must be milliseconds from 0 (no limit) to 3600000")
                    }
                    statementTimeout = .milliseconds(millis)
                default:
                    throw bad("unknown parameter \(Self.printable(key))")
                }
            }
            self.init(
                host: String(host), port: port, user: user, password: password, database: database, tls: tls, poolSize: poolSize,
                statementTimeout: statementTimeout)
        }

        /// The URL with `***` for the password: safe for logs, errors and `--print-config`.
        public var redacted: String {
            let userInfo = password == nil ? Self.percentEncoded(user) : "\(Self.percentEncoded(user)):***"
            let hostText = host.contains(":") ? "[\(host)]" : host
            return "postgres://\(userInfo)@\(hostText):\(port)/\(Self.percentEncoded(database))"
        }

        public var description: String { redacted }
        public var debugDescription: String { "PostgresStorage.Settings(\(redacted), pool_size=\(poolSize), sslmode=\(tls.rawValue))" }
        public var customMirror: Mirror {
            Mirror(self, children: ["url": redacted, "poolSize": poolSize, "tls": tls.rawValue], displayStyle: .struct)
        }

        // MARK: Escapes

        private static func percentDecoded(_ text: Substring) -> String? {
            var bytes: [UInt8] = []
            var index = text.utf8.startIndex
            let utf8 = text.utf8
            while index < utf8.endIndex {
                let byte = utf8[index]
                if byte == UInt8(ascii: "%") {
                    let first = utf8.index(after: index)
                    guard first < utf8.endIndex else { return nil }
                    let second = utf8.index(after: first)
                    guard second < utf8.endIndex, let high = hexValue(utf8[first]), let low = hexValue(utf8[second]) else { return nil }
                    bytes.append(high << 4 | low)
                    index = utf8.index(after: second)
                } else {
                    bytes.append(byte)
                    index = utf8.index(after: index)
                }
            }
            return String(validating: bytes, as: UTF8.self)
        }

        private static func hexValue(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }

        private static func percentEncoded(_ text: String) -> String {
            var out = ""
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
                    UInt8(ascii: "~"):
                    out.unicodeScalars.append(Unicode.Scalar(byte))
                default:
                    let hex = Array("0123456789ABCDEF".utf8)
                    out += "%"
                    out.unicodeScalars.append(Unicode.Scalar(hex[Int(byte >> 4)]))
                    out.unicodeScalars.append(Unicode.Scalar(hex[Int(byte & 0x0F)]))
                }
            }
            return out
        }

        /// A short, printable excerpt of user text for an error message.
        private static func printable(_ text: Substring) -> String {
            String(text.prefix(40).map { $0.isASCII && !$0.isNewline ? $0 : "?" })
        }
    }
}
