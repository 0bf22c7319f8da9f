import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Whether the database file a ``SQLiteStorage`` has open is still the one at its path, and
/// writable: checked by `/readyz` (``SQLiteStorage/ping()``) and before every commit.
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
/// Thread-safe: the identity is immutable, the sticky failure sits behind a `Mutex`.
final class SQLiteHealth: Sendable {
    let path: String
    private let identity: (device: UInt64, inode: UInt64)?
    /// Set once the file was found deleted or replaced: it never comes back.
    private let lost = Mutex<String?>(nil)

    init(path: String) {
        self.path = path
        identity = Self.identity(of: path)
    }

    private static func identity(of path: String) -> (device: UInt64, inode: UInt64)? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return (UInt64(info.st_dev), UInt64(info.st_ino))
    }

    /// Why writes must be refused now, or nil.
    func problem() -> StorageError? {
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
