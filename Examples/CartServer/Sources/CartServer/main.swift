import Cart
import Foundation
import StateServer

// Every setting, subcommand and storage of state-server, for these features:
// `CartServer --port 0 --storage memory`, `CartServer features`, `CartServer replay FILE`,
// `CartServer healthcheck`, `CartServer --print-config`.
var middleware = MiddlewareChain()
// Clients may not send the checkout's result: only the checkout work does (403 forbidden).
middleware.use(ActionAllowList(["cart.add", "cart.remove", "cart.checkout"]), for: "cart")
do throws(CommandFailure) {
    try await StateServer.run(features: [CartFeature()], middleware: middleware)
} catch {
    // A usage error (status 64) or a server that could not start (1): the message on stderr.
    error.report()
    exit(error.status)
}
