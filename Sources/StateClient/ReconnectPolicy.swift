import Foundation

/// How ``RemoteStore/changes(lastEventID:reconnect:)`` reconnects when its event stream ends
/// or fails: exponential backoff with jitter, capped, and a silence limit that notices a dead
/// connection.
///
/// The n-th consecutive attempt waits `initialDelay × multiplier^(n-1)`, at most
/// `maximumDelay`, varied by ±`jitter` so that many clients do not come back at once; a
/// `Retry-After` from the server (429, 503) is honoured when longer. The count starts again
/// once a connection is accepted. A server that shuts down gracefully ends its streams with a
/// `shutdown` event and a `retry` delay: that delay (at most `maximumDelay`, lengthened by up to
/// `jitter`) replaces the backoff for the next attempt, which does not count as a failure.
public struct ReconnectPolicy: Sendable, Hashable {
    /// The wait before the first reconnection.
    public var initialDelay: Duration
    /// The longest wait between two attempts.
    public var maximumDelay: Duration
    /// How much longer each consecutive attempt waits than the one before (at least 1).
    public var multiplier: Double
    /// The fraction (0 to 1) by which each wait is varied at random.
    public var jitter: Double
    /// How many consecutive attempts may fail before the stream fails with the last error;
    /// `nil` for no limit. `0` never reconnects: the stream ends with its connection.
    public var maximumAttempts: Int?
    /// How long a connection may stay silent before it is taken for dead and replaced. The
    /// server sends a `: ping` on idle streams every `heartbeat` (15 s by default), so keep this
    /// a few heartbeats long; the default, 60 s, allows three missed pings.
    public var idleTimeout: Duration

    public init(
        initialDelay: Duration = .milliseconds(500), maximumDelay: Duration = .seconds(30), multiplier: Double = 2,
        jitter: Double = 0.2, maximumAttempts: Int? = nil, idleTimeout: Duration = .seconds(60)
    ) {
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.multiplier = multiplier
        self.jitter = jitter
        self.maximumAttempts = maximumAttempts
        self.idleTimeout = idleTimeout
    }

    /// Reconnects forever: 0.5 s, 1 s, 2 s, ... up to 30 s between attempts.
    public static var `default`: ReconnectPolicy { ReconnectPolicy() }

    /// Never reconnects: the stream ends (or fails) with its first connection.
    public static var never: ReconnectPolicy { ReconnectPolicy(maximumAttempts: 0) }

    /// The wait before the `attempt`-th consecutive reconnection (1 for the first), without jitter.
    public func delay(beforeAttempt attempt: Int) -> Duration {
        let initial = Self.seconds(initialDelay)
        let maximum = max(Self.seconds(maximumDelay), 0)
        let exponent = Double(max(attempt, 1) - 1)
        let raw = initial * pow(max(multiplier, 1), min(exponent, 64))
        return .seconds(min(max(raw, 0), maximum))
    }

    /// ``delay(beforeAttempt:)`` varied at random by ±``jitter``.
    func jitteredDelay(beforeAttempt attempt: Int) -> Duration {
        let base = Self.seconds(delay(beforeAttempt: attempt))
        let spread = min(max(jitter, 0), 1)
        guard spread > 0, base > 0 else { return .seconds(base) }
        return .seconds(base * Double.random(in: (1 - spread)...(1 + spread)))
    }

    /// A delay the server asked for (a `shutdown` event's `retry`), at most ``maximumDelay``,
    /// lengthened at random by up to ``jitter``: never sooner than asked, and clients leaving one
    /// server together do not all arrive at the next at once.
    func jitteredDelay(after hint: Duration) -> Duration {
        let base = min(max(Self.seconds(hint), 0), max(Self.seconds(maximumDelay), 0))
        let spread = min(max(jitter, 0), 1)
        guard spread > 0, base > 0 else { return .seconds(base) }
        return .seconds(base * Double.random(in: 1...(1 + spread)))
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
