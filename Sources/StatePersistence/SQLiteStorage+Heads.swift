/// What the writer knows of each session it wrote lately: the session's last seq, each store's
/// last version, and the activity time last written to the session row.
///
/// Only the writer thread writes the database (one process holds its lock), so a head it wrote
/// stays true until it writes another: an append is fenced against these in memory instead of
/// reading `max(version)` and rewriting the session row (two b-tree pages less in the commit
/// of every change). The cache follows the transaction: writes stage into the open savepoint,
/// a released savepoint moves into the transaction, COMMIT makes them known, and any rollback
/// forgets them (a whole rollback forgets everything: the database is asked again).
struct SQLiteHeads {
    struct Head: Equatable {
        /// The session's last seq.
        var seq: Int
        /// Each store's last version, as far as known (a miss reads the database).
        var stores: [String: Int]
        /// `sessions.last_active` as written.
        var storedActivity: Int64
    }

    /// Sessions remembered at most; past it the cache starts again (refilled from the database).
    static let capacity = 20_000

    private var committed: [String: Head] = [:]
    /// Staged by released savepoints of the open transaction; `nil`: deleted.
    private var transaction: [String: Head?] = [:]
    /// Staged by the open savepoint (or the lone batch); `nil`: deleted.
    private var batch: [String: Head?] = [:]

    /// `.some(nil)`: known to be deleted in this transaction; `nil`: not known.
    func head(of session: String) -> Head?? {
        if let staged = batch[session] { return .some(staged) }
        if let staged = transaction[session] { return .some(staged) }
        return committed[session].map { .some($0) }
    }

    mutating func set(_ session: String, _ head: Head?) {
        batch[session] = .some(head)
    }

    mutating func releaseBatch() {
        transaction.merge(batch) { _, new in new }
        batch.removeAll(keepingCapacity: true)
    }

    mutating func rollBackBatch() {
        batch.removeAll(keepingCapacity: true)
    }

    mutating func commit() {
        releaseBatch()
        if committed.count + transaction.count > Self.capacity { committed.removeAll() }
        for (session, head) in transaction {
            committed[session] = head
        }
        transaction.removeAll(keepingCapacity: true)
    }

    /// The transaction is gone: nothing staged happened, and what is committed is asked again.
    mutating func rollBack() {
        batch.removeAll()
        transaction.removeAll()
        committed.removeAll()
    }
}
