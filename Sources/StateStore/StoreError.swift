/// Why a store did not apply a change. Nothing was applied when this is thrown.
///
/// A struct rather than an enum so that kinds can be added without breaking users.
public struct StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private let raw: String
        private init(_ raw: String) { self.raw = raw }
        public var description: String { raw }

        /// `If-Match`-style precondition failed: the store is at another version.
        public static let versionConflict = Kind("version_conflict")
        /// The reducer refused the action (a rule of the feature).
        public static let actionRejected = Kind("action_rejected")
        /// A middleware refused the action: the client may not send it (authorization).
        public static let forbidden = Kind("forbidden")
        /// The action JSON does not decode as the feature's `Action`.
        public static let invalidAction = Kind("invalid_action")
        /// The state JSON does not decode as the feature's `State`.
        public static let invalidState = Kind("invalid_state")
        /// The state could not be encoded (a feature bug, e.g. a non-finite Double).
        public static let encodingFailed = Kind("encoding_failed")
        /// A follow-up action sent by asynchronous work that was cancelled (or has returned):
        /// it is dropped. Owners routing follow-ups should drop it silently, not report it.
        public static let workCancelled = Kind("work_cancelled")
        /// A timer to fire is no longer pending (it fired, or was cancelled or replaced): there
        /// is nothing to fire. Owners firing timers drop it silently.
        public static let timerNotPending = Kind("timer_not_pending")
    }

    public let kind: Kind
    public let message: String
    /// The store's version when the error happened.
    public let currentVersion: Int

    public init(_ kind: Kind, _ message: String, currentVersion: Int) {
        self.kind = kind
        self.message = message
        self.currentVersion = currentVersion
    }

    public var description: String { "\(kind): \(message)" }
}
