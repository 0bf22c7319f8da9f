import StateJSON
import StatePersistence
import StateStore

extension Session {
    /// The session as a ``Recording``: each feature's starting state (its initial state, or
    /// the state before its oldest change still kept), then every kept change with the state it
    /// led to. Durable modes read the journal; memory mode has what its replay buffer holds.
    public func recording(server: String) async throws(SessionFailure) -> Recording {
        var starts: [Recording.Start] = []
        var steps: [Recording.Step] = []
        if let storage {
            let entries: [JournalEntry]
            do throws(StorageError) {
                entries = try await storage.journal(session: id, afterSeq: 0, limit: 10_000_000)
            } catch {
                throw error.kind == .sessionGone ? .sessionGone : .storage(error)
            }
            var current: [String: [UInt8]] = [:]
            for definition in registry.features {
                let name = definition.name
                let first = entries.first { $0.feature == name }
                let (version, state): (Int, [UInt8]?)
                do throws(StorageError) {
                    if let first {
                        version = first.version - 1
                        state = try await storage.state(session: id, feature: name, at: version, initial: definition.initialStateJSON)
                    } else if let base = try await storage.latestSnapshot(session: id, feature: name) {
                        (version, state) = (base.version, base.state)
                    } else {
                        (version, state) = (0, definition.initialStateJSON)
                    }
                } catch {
                    throw error.kind == .sessionGone ? .sessionGone : .storage(error)
                }
                guard let state, let json = JSONCoding.parse(state) else {
                    throw .storage(StorageError(.unusable, "the state of \(name) at version \(version) cannot be rebuilt"))
                }
                current[name] = state
                starts.append(Recording.Start(name: name, stateVersion: definition.stateVersion, version: version, state: json))
            }
            for entry in entries {
                let state: [UInt8]
                do throws(StorageError) {
                    state = try entry.delta.state(after: current[entry.feature])
                } catch {
                    throw .storage(error)
                }
                current[entry.feature] = state
                steps.append(Recording.Step(
                    seq: entry.seq, feature: entry.feature, version: entry.version, cause: entry.cause,
                    action: entry.action.flatMap { JSONCoding.parse($0) }, state: JSONCoding.parse(state) ?? .null,
                    effect: entry.effect.flatMap { JSONCoding.parse($0) }))
            }
        } else {
            let held = hub.held(after: 0, limit: .max).changes.compactMap { held -> Recording.Step? in
                guard case .object(let fields)? = JSONCoding.parse(held.data), case .int(let version)? = fields["version"],
                    case .string(let cause)? = fields["cause"], let state = fields["state"]
                else { return nil }
                let action = fields["action"].flatMap { $0 == .null ? nil : $0 }
                let effect = fields["effect"].flatMap { $0 == .null ? nil : $0 }
                return Recording.Step(
                    seq: held.seq, feature: held.feature, version: Int(version), cause: cause, action: action, state: state, effect: effect)
            }
            var skipped: Set<Int> = []
            for definition in registry.features {
                let name = definition.name
                if let first = held.first(where: { $0.feature == name }), first.version > 1 {
                    // Older changes are gone: start at the oldest state held.
                    starts.append(Recording.Start(name: name, stateVersion: definition.stateVersion, version: first.version, state: first.state))
                    skipped.insert(first.seq)
                } else if held.contains(where: { $0.feature == name }) {
                    starts.append(Recording.Start(
                        name: name, stateVersion: definition.stateVersion, version: 0,
                        state: JSONCoding.parse(definition.initialStateJSON) ?? .null))
                } else {
                    let now = try? loadedStore(name)?.currentJSON()
                    starts.append(Recording.Start(
                        name: name, stateVersion: definition.stateVersion, version: now?.version ?? 0,
                        state: JSONCoding.parse(now?.state ?? definition.initialStateJSON) ?? .null))
                }
            }
            steps = held.filter { !skipped.contains($0.seq) }
        }
        return Recording(server: server, features: starts, changes: steps)
    }
}
