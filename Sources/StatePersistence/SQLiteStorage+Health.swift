import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Whether the database file a ``SQLiteStorage`` has open is still the one at its path, and
/// writable: checked by `/readyz` (``SQLiteStorage/ping()``), and for commits on a timer.
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
/// Commits never look at the file (a `stat` and an `access`): they read the verdict of the last
/// look, which a timer takes again every ``interval`` on a queue of its own (Dispatch's utility
/// queue), off the commit path and whatever the rate of commits. `/readyz` always looks afresh.
/// So after the file is deleted, replaced or made read-only, writes are refused from the next
/// look, within about a second (at once after a `/readyz`); changes acknowledged before it went
/// to the file that was open. The timer stops at ``stop()`` (the storage's `close()`) or when
/// the storage is gone.
///
/// Thread-safe: the identity is immutable, the sticky failure and the last verdict sit behind
/// `Mutex`es, the timer's flag is atomic.
final class SQLiteHealth: Sendable {
    let path: String
    private let identity: (device: UInt64, inode: UInt64)?
    /// Set once the file was found deleted or replaced: it never comes back.
    private let lost = Mutex<String?>(nil)
    /// The verdict of the last look, which commits read.
    private let last = Mutex<StorageError?>(nil)
    /// Set by ``stop()``: the timer looks no more.
    private let stopped = Atomic<Bool>(false)
    /// How often the timer looks at the file.
    static let interval: DispatchTimeInterval = .seconds(1)

    init(path: String) {
        self.path = path
        identity = Self.identity(of: path)
        _ = problem()
        scheduleLook()
    }

    /// Why writes must be refused, by the last look at the file (at most about ``interval``
    /// old); reads no file.
    func recentProblem() -> StorageError? {
        last.withLock { $0 }
    }

    /// Stops the timer (the storage is closing).
    func stop() {
        stopped.store(true, ordering: .relaxed)
    }

    /// The next look, ``interval`` from now. The timer holds the health weakly: a storage
    /// released without `close()` stops it too.
    private func scheduleLook() {
        DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + Self.interval) { [weak self] in
            guard let self, !self.stopped.load(ordering: .relaxed) else { return }
            _ = self.problem()
            self.scheduleLook()
        }
    }

    private static func identity(of path: String) -> (device: UInt64, inode: UInt64)? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return (UInt64(info.st_dev), UInt64(info.st_ino))
    }

    /// Why writes must be refused now, or nil: a fresh look at the file, which commits then read.
    func problem() -> StorageError? {
        let problem = look()
        last.withLock { $0 = problem }
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
