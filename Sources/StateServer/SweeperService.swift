import Logging
import ServiceLifecycle
import StateSessions

/// The sweeper.
///
/// | key | type | default |
/// | --- | --- | --- |
/// | `sessions.sweepInterval` | seconds between eviction and TTL sweeps | `30` |
struct SweeperSettings: Sendable {
    static let interval = Setting("sessions.sweepInterval", default: 30.0, in: 0.05...86_400, "seconds between sweeps")

    var interval: Duration

    init(_ read: inout SettingsReader) throws(SettingsError) {
        interval = .seconds(try read(Self.interval))
    }
}

/// Evicts idle sessions and deletes expired ones every `interval` of `clock`, from `run()`
/// until graceful shutdown (a sweep in progress finishes first).
struct SweeperService<C: Clock>: Service, CustomStringConvertible where C.Duration == Duration {
    let sessions: SessionManager
    let interval: Duration
    let clock: C
    let logger: Logger

    init(sessions: SessionManager, settings: SweeperSettings, clock: C, logger: Logger) {
        self.sessions = sessions
        self.interval = settings.interval
        self.clock = clock
        self.logger = logger
    }

    var description: String { "SweeperService" }

    func run() async {
        while !Task.isShuttingDownGracefully {
            // Only the wait is cut short by graceful shutdown; a sweep under way completes.
            do {
                try await cancelWhenGracefulShutdown { [clock, interval] in try await clock.sleep(for: interval) }
            } catch {
                break
            }
            await sweep()
        }
        logger.debug("sweeper stopped")
    }

    /// One sweep, logged when it removed anything.
    func sweep() async {
        let (evicted, purged) = await sessions.sweep()
        if evicted + purged > 0 {
            logger.info("swept sessions", metadata: ["evicted": "\(evicted)", "purged": "\(purged)"])
        }
    }
}

/// Fires the timers reducers scheduled when they are due (``TimerScheduler``), from `run()`
/// until graceful shutdown.
struct TimerService: Service, CustomStringConvertible {
    let sessions: SessionManager
    let logger: Logger

    var description: String { "TimerService" }

    func run() async {
        await cancelWhenGracefulShutdown { [sessions] in await sessions.timers.run() }
        logger.debug("timer scheduler stopped")
    }
}

extension SweeperService where C == ContinuousClock {
    init(sessions: SessionManager, settings: SweeperSettings, logger: Logger) {
        self.init(sessions: sessions, settings: settings, clock: ContinuousClock(), logger: logger)
    }
}
