import MicroHTTP
import Synchronization

/// A key of a ``PaceTable``, with a cheap number to pick its shard by (hashing the key for that
/// too would double what a lookup costs).
protocol PaceKey: Hashable, Sendable {
    var shardHint: UInt64 { get }
}

extension IPAddress: PaceKey {
    var shardHint: UInt64 { ((high ^ low ^ (low >> 32)) &* 0x9E37_79B9_7F4A_7C15) >> 32 }
}

extension String: PaceKey {
    /// Session ids are random: their last bytes are spread evenly (any string works, spread or not).
    var shardHint: UInt64 {
        var hint: UInt64 = 0
        for byte in utf8.suffix(4) { hint = hint << 8 | UInt64(byte) }
        return (hint &* 0x9E37_79B9_7F4A_7C15) >> 32
    }
}

extension Int: PaceKey {
    var shardHint: UInt64 { (UInt64(bitPattern: Int64(self)) &* 0x9E37_79B9_7F4A_7C15) >> 32 }
}

/// Token buckets by key (a client address, a session id), bounded in memory.
///
/// Each key has a bucket of `burst` tokens that refills at one token per `interval`; a request
/// takes one, and is refused while the bucket is empty, told how long until a token is back.
/// Kept as the generic cell rate algorithm (GCRA): one number per key, the time at which its
/// bucket will be full again (the "theoretical arrival time"). A request at `now` is allowed
/// when that time is at most `(burst - 1) * interval` ahead of `now`, and moves it one
/// `interval` on. A key whose time has passed has a full bucket: exactly like a key never seen,
/// so it can be forgotten at any moment without changing an answer.
///
/// That is how the table stays bounded: when a shard grows past its next sweep mark, the keys
/// whose buckets are full again are dropped (amortized: the mark doubles with what is left).
/// Under a flood of more distinct keys than `capacity` whose buckets are all in use at once,
/// the keys whose buckets are closest to full are dropped too (their next request starts with a
/// full bucket): memory stays bounded, and what it costs is a few extra requests allowed to
/// the lightest users, never a refusal; the heaviest keep their debt.
///
/// The keys are spread over shards, each behind its own lock held for one dictionary lookup,
/// so requests of different clients rarely wait for each other.
final class PaceTable<Key: PaceKey>: Sendable {
    /// Nanoseconds per token.
    let interval: Int64
    /// How far ahead of `now` a key's time may be and still allow a request:
    /// `(burst - 1) * interval`.
    let tolerance: Int64
    private let shards: [Shard]
    private let shardCapacity: Int

    private final class Shard: Sendable {
        struct State {
            /// Each key's time (nanoseconds on the table's clock) when its bucket is full again.
            var full: [Key: Int64] = [:]
            /// Sweep when `full` reaches this many keys.
            var sweepAt = PaceTable.firstSweep
        }
        let state = Mutex(State())
    }

    /// A shard sweeps first at this many keys.
    static var firstSweep: Int { 64 }

    /// - Parameters:
    ///   - rate: tokens per `per` (> 0).
    ///   - per: the period of `rate`, in nanoseconds (one second: 1e9).
    ///   - burst: the bucket's size (>= 1): requests allowed at once from a full bucket.
    ///   - capacity: keys kept at most (spread over the shards).
    init(rate: Int, per: Int64, burst: Int, capacity: Int = 65_536, shards count: Int = 16) {
        interval = max(1, per / Int64(max(1, rate)))
        tolerance = interval * Int64(max(0, burst - 1))
        shards = (0..<max(1, count)).map { _ in Shard() }
        shardCapacity = max(Self.firstSweep, capacity / max(1, count))
    }

    /// Takes a token for `key` at `now` (nanoseconds): nil when allowed, else the nanoseconds
    /// until one is back (nothing is taken).
    func take(_ key: Key, now: Int64) -> Int64? {
        let shard = shards[Int(key.shardHint % UInt64(shards.count))]
        return shard.state.withLock { state -> Int64? in
            // The key is found once and its time changed in place (each lookup hashes it).
            guard let index = state.full.index(forKey: key) else {
                state.full[key] = now + interval
                if state.full.count >= state.sweepAt { sweep(&state, now: now) }
                return nil
            }
            let start = max(state.full.values[index], now)
            if start - now > tolerance { return start - now - tolerance }
            state.full.values[index] = start + interval
            return nil
        }
    }

    /// Drops the keys whose buckets are full again at `now`; at `shardCapacity`, also those
    /// closest to full, down to half of it. The next sweep comes at twice what is left.
    private func sweep(_ state: inout Shard.State, now: Int64) {
        state.full = state.full.filter { $0.value > now }
        if state.full.count >= shardCapacity {
            let keep = shardCapacity / 2
            let threshold = state.full.values.sorted(by: >)[keep - 1]
            var kept: [Key: Int64] = [:]
            kept.reserveCapacity(keep)
            // Those past the threshold first (fewer than `keep`), then ties up to `keep`.
            for (key, value) in state.full where value > threshold { kept[key] = value }
            for (key, value) in state.full where value == threshold && kept.count < keep { kept[key] = value }
            state.full = kept
        }
        state.sweepAt = min(shardCapacity, max(Self.firstSweep, state.full.count * 2))
        if state.sweepAt <= state.full.count { state.sweepAt = state.full.count + 1 }
    }

    /// Keys held now (for tests and bounds).
    var count: Int { shards.reduce(0) { total, shard in total + shard.state.withLock { $0.full.count } } }
}
