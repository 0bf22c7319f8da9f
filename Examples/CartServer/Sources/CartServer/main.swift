import Cart
import Foundation
import StateServer

// Every setting, subcommand and storage of state-server, for these features:
// `CartServer --port 0 --storage memory`, `CartServer features`, `CartServer replay FILE`,
// `CartServer healthcheck`, `CartServer --print-config`.
var middleware = MiddlewareChain()
// Clients may send these actions only: not the checkout's result (only the checkout work sends
// it) nor `expire` (only the idle timer does); anything else is 403 forbidden. The allow list
// applies to clients: the idle timer's `expire` (cause `timer`) passes.
middleware.use(ActionAllowList(["cart.add", "cart.remove", "cart.checkout"]), for: "cart")
do throws(CommandFailure) {
    try await StateServer.run(features: [CartFeature()], middleware: middleware)
} catch {
    // A usage error (status 64) or a server that could not start (1): the message on stderr.
    error.report()
    exit(error.status)
}
