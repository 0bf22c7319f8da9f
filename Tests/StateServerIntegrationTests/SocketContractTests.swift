import TestSupport
import Testing

/// The contract checks that only a real connection shows — HEAD framing and keep-alive, many
/// connections at once, the in-process server compared with the binary — on one real server.
/// Most contract suites run in process (`.inProcessServer`); each file adds its socket-only
/// checks here in an extension, so they share one process. `limits.dispatchesPerSecond` is off:
/// "200 concurrent increments" sends faster than the binary's default (100 a second) allows.
@Suite("Contract over a socket", .localServer(environment: ["STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND": "0"]))
struct SocketContractTests {}
