// `make test-sanitized`'s ThreadSanitizer build only: this file is compiled empty unless
// STATE_TSAN is defined, which Package.swift does when STATESERVER_SANITIZER=thread (set by
// scripts/test-sanitized.sh). Every module that locks has this file (a link to
// Sources/StateStore/Mutex+ThreadSanitizer.swift), so the one definition shadows
// Synchronization.Mutex in each of them: a module's own declaration wins over an imported one.
#if STATE_TSAN
import Synchronization

// ThreadSanitizer's annotations (compiler-rt's tsan_interface.h: `void __tsan_acquire(void *)`,
// `void __tsan_release(void *)`), with the address passed as an integer: the same register as
// the C pointer, and no unsafe pointer in the modules compiled with strict memory safety.
@_silgen_name("__tsan_acquire") private func tsanAcquire(_ address: UInt)
@_silgen_name("__tsan_release") private func tsanRelease(_ address: UInt)

/// A stable address for one lock's annotations, for as long as the lock lives.
private final class LockIdentity: Sendable {}

/// Synchronization.Mutex as ThreadSanitizer can see it. On Linux, Synchronization.Mutex locks
/// with a futex inside the Synchronization library, which is not instrumented: TSan sees no
/// order between two critical sections of one lock and reports every access under a Mutex as
/// a race (a ten-line program shows it; make test-sanitized reported 40 of them, all under a
/// lock). This Mutex takes the same lock and tells TSan about each acquire and release, so a
/// report is a real race. Other builds use Synchronization.Mutex itself.
struct Mutex<Value: ~Copyable>: ~Copyable, Sendable {
    private let mutex: Synchronization.Mutex<Value>
    private let identity = LockIdentity()

    init(_ initialValue: consuming sending Value) {
        mutex = Synchronization.Mutex(initialValue)
    }

    borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        let address = UInt(bitPattern: ObjectIdentifier(identity))
        return try mutex.withLock { (value: inout sending Value) throws(E) -> sending Result in
            tsanAcquire(address)
            defer { tsanRelease(address) }
            return try body(&value)
        }
    }
}
#endif
