import Foundation
import Synchronization

/// One process launch at a time in the test process: swift-corelibs-foundation's
/// `Process.run()` is not safe to call from several threads at once (a suite run crashed in its
/// `memcpy` while other threads launched curl and servers). Every test launch goes through here.
private let launching = Mutex(())

package func launchProcess(_ process: Process) throws {
    try launching.withLock { _ in try process.run() }
}
