import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The open-file limit (RLIMIT_NOFILE) and `http.connectionLimit`, fitted together at start.
///
/// Each connection, event streams included, holds a descriptor, and the server opens about
/// twenty files of its own. At start the soft limit is raised toward the hard limit (what
/// servers usually do: the soft limit is often 1024 for the sake of `select()`, which
/// libmicrohttpd's epoll does not use). Then:
/// - `http.connectionLimit: 0` (the default) takes what fits: the soft limit less
///   `reserve`, at most `automaticMaximum`. Nothing to warn about: the default fits any machine.
/// - A limit the user set is kept; when it does not fit even the hard limit (raised too where
///   the process may, with CAP_SYS_RESOURCE), a warning says what to do.
enum FileLimit {
    /// Files the server opens besides its connections: standard streams, the listening socket,
    /// an epoll descriptor and wake-up pipe per HTTP thread, the SQLite database, its journal
    /// and shared memory, the signal pipe — about 20 — with room to spare.
    static let reserve = 64
    /// The most connections `http.connectionLimit: 0` allows, however high the limit.
    static let automaticMaximum = 20_000
    /// The fewest connections the server runs with.
    static let minimum = 16

    /// What was decided: the connection limit to use, and a warning when a limit the user set
    /// cannot be honoured.
    struct Outcome: Sendable {
        var connectionLimit: Int
        var automatic: Bool
        var warning: (message: Logger.Message, metadata: Logger.Metadata)?

        func log(to logger: Logger) {
            if let warning { logger.warning(warning.message, metadata: warning.metadata) }
        }
    }

    /// Raises the soft open-file limit as `connectionLimit` needs (`0`: as far as the hard limit
    /// allows) and returns the connection limit to use.
    static func fit(connectionLimit requested: Int) -> Outcome {
        let resource = Int32(RLIMIT_NOFILE.rawValue)
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else {
            // Cannot tell: keep what was asked, or the automatic maximum.
            return Outcome(connectionLimit: requested > 0 ? requested : automaticMaximum, automatic: requested == 0)
        }
        let needed = rlim_t((requested > 0 ? requested : automaticMaximum) + reserve)
        if limit.rlim_cur < needed {
            if requested > 0, limit.rlim_max < needed {
                // Where the process may raise its hard limit (CAP_SYS_RESOURCE), to what is needed.
                var raised = rlimit(rlim_cur: needed, rlim_max: needed)
                if setrlimit(resource, &raised) == 0 { limit = raised }
            }
            if limit.rlim_cur < needed && limit.rlim_cur < limit.rlim_max {
                var raised = limit
                raised.rlim_cur = limit.rlim_max
                if setrlimit(resource, &raised) == 0 { limit = raised }
            }
        }
        let soft = limit.rlim_cur == rlim_t.max ? Int.max : Int(clamping: limit.rlim_cur)
        let fitting = max(0, soft - reserve)
        if requested == 0 {
            let chosen = min(automaticMaximum, max(minimum, fitting))
            guard fitting < minimum else { return Outcome(connectionLimit: chosen, automatic: true) }
            return Outcome(
                connectionLimit: chosen, automatic: true,
                warning: (
                    "open-file limit too low to run: raise it (ulimit -n)",
                    ["nofile": "\(soft)", "nofile.needed": "\(minimum + reserve)"]
                ))
        }
        guard fitting < requested else { return Outcome(connectionLimit: requested, automatic: false) }
        return Outcome(
            connectionLimit: requested, automatic: false,
            warning: (
                "open-file limit too low for http.connectionLimit: raise it (ulimit -n) or lower http.connectionLimit (0 fits it to the limit)",
                [
                    "nofile": "\(soft)", "nofile.needed": "\(requested + reserve)",
                    "http.connectionLimit": "\(requested)", "http.connectionLimit.fitting": "\(fitting)",
                ]
            ))
    }
}
