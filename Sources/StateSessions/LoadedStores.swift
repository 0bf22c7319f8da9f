import StateStore
import Synchronization

/// The stores of a session's features that are in memory, and the lock a load from storage
/// holds (``Session/loadStore(_:)``: a store is never loaded twice at once). Owns its table;
/// thread-safe.
final class LoadedStores: Sendable {
    private let table = Mutex<[String: any AnyStateStore]>([:])
    /// Held while a store is loaded from storage.
    let loadLock = AsyncLock()

    subscript(feature: String) -> (any AnyStateStore)? { table.withLock { $0[feature] } }

    /// The store of `feature`, or the one `make` gives (made under the table's lock: once).
    func store(_ feature: String, orMake make: () -> (any AnyStateStore)?) -> (any AnyStateStore)? {
        table.withLock { table in
            if let store = table[feature] { return store }
            guard let store = make() else { return nil }
            table[feature] = store
            return store
        }
    }

    func insert(_ store: any AnyStateStore, for feature: String) { table.withLock { $0[feature] = store } }

    func remove(_ feature: String) { table.withLock { _ = $0.removeValue(forKey: feature) } }

    /// The stores in memory, by feature.
    var byFeature: [String: any AnyStateStore] { table.withLock { $0 } }

    var all: [any AnyStateStore] { table.withLock { Array($0.values) } }

    var count: Int { table.withLock { $0.count } }

    /// Whether every one of `features` that `registry` knows is in memory.
    func hold(_ features: [String], of registry: FeatureRegistry) -> Bool {
        table.withLock { held in features.allSatisfy { held[$0] != nil || registry[$0] == nil } }
    }

    /// Whether a store in memory has asynchronous work still live.
    var haveRunningWork: Bool { table.withLock { $0.values.contains { $0.hasRunningWork } } }
}
