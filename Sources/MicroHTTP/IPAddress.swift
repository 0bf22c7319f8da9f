import CMicroHTTPDShim

/// An IP address, IPv4 or IPv6, in one 16-byte form: IPv6 as it is, IPv4 as an IPv4-mapped
/// IPv6 address (`::ffff:192.0.2.1`), so `192.0.2.1` and `::ffff:192.0.2.1` are the same
/// address. Two 64-bit halves, so that hashing and comparing one is cheap (the per-address
/// limits look one up on every request).
public struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    /// The first 8 bytes, big-endian.
    public let high: UInt64
    /// The last 8 bytes, big-endian.
    public let low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// A numeric address: `192.0.2.1`, `2001:db8::1`, `::ffff:192.0.2.1` (no brackets, no
    /// port, no zone); nil for anything else.
    public init?(_ text: some StringProtocol) {
        // The longest IPv6 text with an embedded IPv4 is 45 characters.
        guard !text.isEmpty, text.utf8.count <= 45 else { return nil }
        let parsed: IPAddress? = String(text).withCString { text in
            IPAddress.reading { ss_parse_address(text, $0) == 1 }
        }
        guard let parsed else { return nil }
        self = parsed
    }

    /// The address `fill` writes in the 16-byte form into the buffer it is given (on the
    /// stack: this runs for every request), or nil when `fill` returns false.
    static func reading(_ fill: (UnsafeMutablePointer<UInt8>) -> Bool) -> IPAddress? {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 16) { buffer -> IPAddress? in
            guard let base = buffer.baseAddress, fill(base) else { return nil }
            var high: UInt64 = 0
            var low: UInt64 = 0
            for index in 0..<8 { high = high << 8 | UInt64(base[index]) }
            for index in 8..<16 { low = low << 8 | UInt64(base[index]) }
            return IPAddress(high: high, low: low)
        }
    }

    /// Whether this is an IPv4 address (IPv4-mapped in the 16-byte form).
    public var isIPv4: Bool { high == 0 && low >> 32 == 0xffff }

    /// What the per-address limits count by: an IPv4 address itself, and an IPv6 address's
    /// /64 network (the last 64 bits zero). One IPv6 host usually holds a whole /64 (SLAAC,
    /// privacy addresses), so counting single IPv6 addresses would give one client 2^64 quotas.
    public var limitKey: IPAddress { isIPv4 ? self : IPAddress(high: high, low: 0) }

    public var description: String {
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in 0..<8 {
            bytes[index] = UInt8(truncatingIfNeeded: high >> (56 - 8 * UInt64(index)))
            bytes[8 + index] = UInt8(truncatingIfNeeded: low >> (56 - 8 * UInt64(index)))
        }
        var text = [CChar](repeating: 0, count: 64)
        guard ss_format_address(bytes, &text, text.count) == 1 else { return "?" }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// A range of IP addresses in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`), or one address
/// (`192.0.2.1`, `::1`). IPv4 ranges match IPv4 addresses (IPv4-mapped IPv6 included).
public struct AddressRange: Sendable, Equatable, CustomStringConvertible {
    /// The first address of the range.
    public let network: IPAddress
    /// Leading bits that must match, 0...128, in the 16-byte form (an IPv4 `/8` is 104).
    public let bits: Int

    /// `address[/prefix]`; nil when the address does not parse or the prefix is out of range
    /// (0...32 for IPv4, 0...128 for IPv6). Bits past the prefix are ignored (`10.1.2.3/8` is
    /// `10.0.0.0/8`).
    public init?(_ text: some StringProtocol) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let first = parts.first, let address = IPAddress(first) else { return nil }
        let maximum = address.isIPv4 ? 32 : 128
        var prefix = maximum
        if parts.count == 2 {
            guard let value = Int(parts[1]), (0...maximum).contains(value), parts[1].allSatisfy(\.isASCII) else { return nil }
            prefix = value
        }
        bits = address.isIPv4 ? 96 + prefix : prefix
        let (highMask, lowMask) = Self.masks(bits)
        network = IPAddress(high: address.high & highMask, low: address.low & lowMask)
    }

    public func contains(_ address: IPAddress) -> Bool {
        let (highMask, lowMask) = Self.masks(bits)
        return address.high & highMask == network.high && address.low & lowMask == network.low
    }

    public var description: String {
        network.isIPv4 && bits >= 96 ? "\(network)/\(bits - 96)" : "\(network)/\(bits)"
    }

    private static func masks(_ bits: Int) -> (UInt64, UInt64) {
        let high: UInt64 = bits >= 64 ? .max : bits <= 0 ? 0 : ~(UInt64.max >> UInt64(bits))
        let low: UInt64 = bits >= 128 ? .max : bits <= 64 ? 0 : ~(UInt64.max >> UInt64(bits - 64))
        return (high, low)
    }
}

extension Array where Element == AddressRange {
    /// Whether any range holds `address`.
    public func contains(_ address: IPAddress) -> Bool {
        contains { $0.contains(address) }
    }
}
