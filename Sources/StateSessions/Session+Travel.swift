import StateJSON
import StatePersistence
import StateStore

/// Where a time travel would go: the state of the version asked for, or why there is none.
public enum TravelSource: Sendable {
    case state(JSONValue)
    /// The version is not reachable. Reachable are 0 (the initial state) and `oldest...current`.
    case unreachable(oldest: Int, current: Int)
}

extension Session {
    /// The state `store` had at `version`, from the journal (its base at or before it, then the
    /// patches after). History is never changed,
    /// so this is read outside the session's pipeline; the travel itself is a change like any
    /// other (``ChangeRequest/Kind/travel(_:)``).
    public func stateForTravel(_ store: any AnyStateStore, to version: Int) async throws(SessionFailure) -> TravelSource {
        let feature = store.featureName
        guard let definition = registry[feature] else { throw .unknownFeature(feature) }
        let (currentState, current): ([UInt8], Int)
        do throws(StoreError) {
            (currentState, current) = try store.currentJSON()
        } catch {
            throw .store(error)
        }
        let found: [UInt8]?
        if version == current {
            found = currentState
        } else if version == 0 {
            found = definition.initialStateJSON
        } else if version > current {
            found = nil
        } else {
            do throws(StorageError) {
                found = try await storage.state(session: id, feature: feature, at: version, initial: definition.initialStateJSON)
            } catch {
                throw error.kind == .sessionGone ? .sessionGone : .storage(error)
            }
        }
        if let found, let json = JSONCoding.parse(found) { return .state(json) }
        return .unreachable(oldest: try await oldestReachable(feature, current: current), current: current)
    }

    /// The oldest version after 0 whose state the journal still gives.
    func oldestReachable(_ feature: String, current: Int) async throws(SessionFailure) -> Int {
        do throws(StorageError) {
            guard let first = try await storage.journal(session: id, feature: feature, afterVersion: 0, through: current).first else {
                return current
            }
            if first.version == 1 { return 0 }
            let before = first.version - 1
            let initial = registry[feature]?.initialStateJSON ?? []
            return try await storage.state(session: id, feature: feature, at: before, initial: initial) == nil ? first.version : before
        } catch {
            throw error.kind == .sessionGone ? .sessionGone : .storage(error)
        }
    }
}
