import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Whether the database file a ``SQLiteStorage`` has open is still the one at its path, and
/// writable: checked by `/readyz` (``SQLiteStorage/ping()``), and for commits once a second.
///
/// A file deleted or replaced under a running server (`rm`, a restore that moves another file
/// into place) stays open: SQLite would go on acknowledging changes into an unlinked inode, lost
/// at the next start. So the identity (`st_dev`, `st_ino`) of the file at the path is recorded
/// when the storage opens it and compared on every check; once it differs, or the path is gone,
/// the storage refuses every write from then on (`unavailable`, with a message that says why and
/// what to do), and `/readyz` answers 503. A file that cannot be written (a read-only mount, an
/// immutable file, permissions; `access(W_OK)`, which also answers for root on read-only
/// mounts) is refused the same way while it lasts.
///
/// Commits do not look at the file themselves (a `stat` and an `access` each, on the thread
/// that hands the change over): they read the verdict of the last look, taken again once it is
/// ``interval`` old (so at most one look a second, whatever the rate of commits). `/readyz`
/// always looks afresh. So after the file is deleted, replaced or made read-only, writes are
/// refused within about a second (at once after a `/readyz`); changes acknowledged in that
/// second went to the file that was open.
///
/// Thread-safe: the identity is immutable, the sticky failure and the last verdict sit behind
/// `Mutex`es.
final class SQLiteHealth: Sendable {
    let path: String
    private let identity: (device: UInt64, inode: UInt64)?
    /// Set once the file was found deleted or replaced: it never comes back.
    private let lost = Mutex<String?>(nil)
    /// The last verdict, and when it was taken (nanoseconds on the monotonic clock).
    private let last = Mutex<(at: UInt64, problem: StorageError?)?>(nil)
    /// How long a verdict stands for commits.
    static let interval: UInt64 = 1_000_000_000

    init(path: String) {
        self.path = path
        identity = Self.identity(of: path)
    }

    /// Why writes must be refused, by the last look at the file if it is younger than
    /// ``interval``, else by a fresh one.
    func recentProblem() -> StorageError? {
        let now = DispatchTime.now().uptimeNanoseconds
        if let (at, problem) = last.withLock({ $0 }), now &- at < Self.interval { return problem }
        return problem(at: now)
    }

    private static func identity(of path: String) -> (device: UInt64, inode: UInt64)? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return (UInt64(info.st_dev), UInt64(info.st_ino))
    }

    /// Why writes must be refused now, or nil: a fresh look at the file.
    func problem() -> StorageError? {
        problem(at: DispatchTime.now().uptimeNanoseconds)
    }

    private func problem(at now: UInt64) -> StorageError? {
        let problem = look()
        last.withLock { $0 = (now, problem) }
        return problem
    }

    private func look() -> StorageError? {
        if let reason = lost.withLock({ $0 }) { return StorageError(.unavailable, reason) }
        if let identity {
            let now = Self.identity(of: path)
            if now == nil || now! != identity {
                let what = now == nil ? "was deleted (or moved away)" : "was replaced by another file"
                let reason = "storage sqlite:\(path) refuses writes: its database file \(what) while the server had it open; "
                    + "changes would be written to a file no one can open again. Restart the server to open the file now at the path"
                lost.withLock { $0 = $0 ?? reason }
                return StorageError(.unavailable, lost.withLock { $0 } ?? reason)
            }
        }
        if access(path, W_OK) != 0 {
            let code = errno
            return StorageError(
                .unavailable, "storage sqlite:\(path) refuses writes: its database file is not writable (\(String(cString: strerror(code))))")
        }
        return nil
    }

    func check() throws(StorageError) {
        if let problem = problem() { throw problem }
    }
}

extension SQLiteStorage {
    /// Readiness: the database file is the one opened and writable (``SQLiteHealth``), and a
    /// read answers.
    public func ping() async throws(StorageError) {
        try health.check()
        _ = try await lastSeq(session: "")
    }
}
