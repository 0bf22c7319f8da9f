import Logging
import StateJSON
import StateSessions
import StateStore

/// A middleware that logs every client dispatch and what came of it, one `info` line each:
/// `audit` with the session, feature, action type, the version it was computed on and either
/// the new version or the error code; with the sender's `subject` (a JWT's `sub`) and the
/// minted `token`'s id when there are. The action's fields are not logged (they may hold
/// secrets; the history has them in their public, masked form). Enabled by `log.audit`.
public struct AuditLog: DispatchMiddleware {
    let logger: Logger

    public init(logger: Logger) {
        self.logger = logger
    }

    public func handle(
        _ action: JSONValue, context: DispatchContext,
        next: (JSONValue) throws(StoreError) -> PreparedChange
    ) throws(StoreError) -> PreparedChange {
        var metadata: Logger.Metadata = [
            "session": "\(context.session)", "feature": "\(context.feature)", "version": "\(context.version)",
        ]
        if case .object(let fields) = action, case .string(let type)? = fields["type"] { metadata["action"] = "\(type)" }
        if let subject = context.subject { metadata["subject"] = "\(subject)" }
        if let token = context.tokenID { metadata["token"] = "\(token)" }
        do {
            let prepared = try next(action)
            metadata["applied"] = "\(prepared.encoded.version)"
            logger.info("audit", metadata: metadata)
            return prepared
        } catch {
            metadata["refused"] = "\(error.kind)"
            logger.info("audit", metadata: metadata)
            throw error
        }
    }
}
