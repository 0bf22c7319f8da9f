import Cart
import Foundation
import StateServer

// Every setting, subcommand and storage of state-server, for these features:
// `CartServer --port 0 --storage memory`, `CartServer features`, `CartServer replay FILE`,
// `CartServer healthcheck`, `CartServer --print-config`.
var middleware = MiddlewareChain()
// Clients may send these actions only: not the checkout's result (only the checkout work sends
// it) nor `expire` (only the idle timer does); anything else is 403 forbidden.
middleware.use(ClientActionAllowList(["cart.add", "cart.remove", "cart.checkout"]), for: "cart")
do throws(CommandFailure) {
    try await StateServer.run(features: [CartFeature()], middleware: middleware)
} catch {
    // A usage error (status 64) or a server that could not start (1): the message on stderr.
    error.report()
    exit(error.status)
}

/// `ActionAllowList` for clients' dispatches only. A timer the reducer scheduled goes through
/// the middleware too, with `context.cause` `timer`: that action is the server's own (the cart's
/// idle `expire`), so it passes, where the allow list would refuse it and the timer would fire
/// keeping the state.
struct ClientActionAllowList: DispatchMiddleware {
    let clients: ActionAllowList

    init(_ allowed: Set<String>) {
        clients = ActionAllowList(allowed)
    }

    func handle(
        _ action: JSONValue, context: DispatchContext,
        next: (JSONValue) throws(StoreError) -> PreparedChange
    ) throws(StoreError) -> PreparedChange {
        guard context.cause == "dispatch" else { return try next(action) }
        return try clients.handle(action, context: context, next: next)
    }
}
