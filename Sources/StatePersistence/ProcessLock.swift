#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// One owner per database: an exclusive `flock` on `<database>.lock`, taken before the
/// database is opened and held until the storage is closed or the process ends.
///
/// Why a separate file and `flock`:
/// - `flock` belongs to the open file description, so the kernel drops it when the process
///   dies however it dies (SIGKILL included); there is no stale lock to clean up. The file is
///   opened `O_CLOEXEC` so no child process inherits it.
/// - Not the database file itself: SQLite locks the database with POSIX `fcntl` locks, and
///   closing *any* descriptor of a file drops all of a process's `fcntl` locks on it; on NFS
///   Linux emulates `flock` with `fcntl` locks, which would then collide with SQLite's own.
///   A file of its own touches none of that.
/// - The holder writes its pid into the file, so a refused process can say who holds it. The
///   file stays when the holder ends; its content is only information, the lock is the truth.
///
/// - A storage of this process that holds the lock is known from a list kept in the process
///   (by the lock file's device and inode), and is refused at once. While another thread forks
///   a child (`posix_spawn`, as `Process` does), the child holds a copy of every descriptor
///   until its `exec` closes the `O_CLOEXEC` ones: a lock just released can then still be seen
///   held, with this process's own pid in the file. That refusal is transient, and the lock is
///   tried again for up to `spawnWindow`.
///
/// Thread-safety: the descriptor sits behind a `Mutex`; `release` may be called from anywhere.
final class ProcessLock: Sendable {
    let path: String
    private let descriptor: Mutex<Int32?>
    private let file: FileID

    /// A lock file, by device and inode (two paths may name one file).
    private struct FileID: Hashable {
        var device: UInt64
        var inode: UInt64
    }

    /// The lock files held by storages of this process.
    private static let held = Mutex<Set<FileID>>([])

    /// How long a lock held by this process's pid, but by none of its storages, is tried again.
    static let spawnWindow: Duration = .seconds(10)

    /// Takes the lock on `lockPath`, or throws `.unusable` naming `database` and the pid of the
    /// process holding it.
    init(lockPath: String, database: String) throws(StorageError) {
        path = lockPath
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw StorageError(.unusable, "cannot open the lock file \(lockPath): \(Self.lastError())")
        }
        var status = stat()
        guard fstat(fd, &status) == 0 else {
            let message = Self.lastError()
            close(fd)
            throw StorageError(.unusable, "cannot stat the lock file \(lockPath): \(message)")
        }
        let file = FileID(device: UInt64(truncatingIfNeeded: status.st_dev), inode: UInt64(truncatingIfNeeded: status.st_ino))
        let deadline = ContinuousClock.now + Self.spawnWindow
        while true {
            let ours = Self.held.withLock { $0.contains(file) }
            let locked = !ours && flock(fd, LOCK_EX | LOCK_NB) == 0
            if locked {
                Self.held.withLock { _ = $0.insert(file) }
                break
            }
            let code = ours ? EWOULDBLOCK : errno
            let holder = Self.readPid(fd)
            if !ours && code == EWOULDBLOCK && holder == getpid() && ContinuousClock.now < deadline {
                // A child being spawned holds a copy of a descriptor just closed.
                usleep(5_000)
                continue
            }
            close(fd)
            guard code == EWOULDBLOCK else {
                throw StorageError(.unusable, "cannot lock \(lockPath): \(String(cString: strerror(code)))")
            }
            let who: String
            switch holder {
            case getpid(): who = "another storage of this process (pid \(getpid()))"
            case let pid?: who = "another process (pid \(pid))"
            case nil: who = "another process (pid unknown)"
            }
            throw StorageError(.unusable, "\(database) is in use by \(who); lock file \(lockPath)")
        }
        self.file = file
        // Ours now: say who holds it. A failure here costs only the pid in a later message.
        let text = Array("\(getpid())\n".utf8)
        if ftruncate(fd, 0) == 0 {
            _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        }
        descriptor = Mutex(fd)
    }

    deinit { release() }

    /// Drops the lock (closes the descriptor); later calls do nothing.
    func release() {
        if let fd = descriptor.withLock({ fd -> Int32? in defer { fd = nil }; return fd }) {
            // Out of the list first: a storage of this process opening the file now waits for
            // the close below (its flock fails with our pid) instead of being refused.
            Self.held.withLock { _ = $0.remove(file) }
            close(fd)
        }
    }

    private static func readPid(_ fd: Int32) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let digits = buffer.prefix(count).prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        guard let pid = Int32(String(decoding: digits, as: UTF8.self)), pid > 0 else { return nil }
        return pid
    }

    private static func lastError() -> String { String(cString: strerror(errno)) }
}
