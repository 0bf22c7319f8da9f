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

/// What an import did (``Session/importRecording(_:asRecorded:workWait:)``).
public struct ImportSummary: Sendable {
    /// Changes the import applied: starting states and steps.
    public var changes = 0
    /// Recorded follow-ups (actions a client may not send) not copied: the work of the
    /// recorded dispatches ran again on the server and sent its own.
    public var leftToServer = 0
}

extension Session {
    /// Applies `recording` to this (new) session, step by step through the change path.
    ///
    /// As a client (`asRecorded` false, anyone may): each starting state that is not the
    /// initial state is set as a client's rehydrate would be (cause `import`:
    /// ``Feature/clientRehydrate(_:current:)``, ``Feature/validated(_:)``, the size ceiling);
    /// each step is sent as a client would send it — a dispatch through the client rules and the
    /// middleware, starting its asynchronous work; a rehydrate or travel through the rehydrate
    /// rules; a reset. A recorded action a client may not send was a follow-up of the server's
    /// work: it is not copied, the work runs again here and sends its own. After a dispatch that
    /// started work the import waits (up to `workWait` over the whole import) for that work to
    /// return, so follow-ups land where they did in the recording.
    ///
    /// As recorded (the admin's): starting states and steps are applied as the server's own —
    /// follow-ups copied, no client rule, no middleware, no work started — still validated and
    /// held to the size ceiling.
    ///
    /// Stops at the first refusal, which it throws (the caller deletes the session).
    public func importRecording(
        _ recording: Recording, asRecorded: Bool, workWait: Duration
    ) async throws(SessionFailure) -> ImportSummary {
        var summary = ImportSummary()
        let clock = ContinuousClock()
        let waitUntil = clock.now.advanced(by: workWait)
        func apply(_ request: ChangeRequest) async throws(SessionFailure) {
            _ = try await store(request.feature)
            if case .failed(let why) = await submit(request) { throw why }
            summary.changes += 1
        }
        for start in recording.features {
            let initial = registry[start.name].flatMap { JSONCoding.parse($0.initialStateJSON) }
            if start.state != initial {
                try await apply(ChangeRequest(feature: start.name, kind: .importStart(start.state, asRecorded: asRecorded)))
            }
        }
        for step in recording.changes {
            if asRecorded {
                try await apply(ChangeRequest(feature: step.feature, kind: .replay(cause: step.cause, payload: step.payload)))
                continue
            }
            let kind: ChangeRequest.Kind
            switch step.cause {
            case "dispatch":
                guard let action = step.action else { throw .store(StoreError(.invalidAction, "a recorded dispatch has no action", currentVersion: 0)) }
                guard let store = try await store(step.feature) else { throw .unknownFeature(step.feature) }
                if !store.acceptsFromClient(json: action) {
                    summary.leftToServer += 1
                    continue
                }
                kind = .dispatch(action)
            case "rehydrate": kind = .rehydrate(step.state)
            case "travel": kind = .travel(step.state)
            case "import": kind = .importStart(step.state, asRecorded: false)
            case "reset": kind = .reset
            default:
                throw .store(StoreError(.invalidAction, "unknown recorded cause '\(step.cause)'", currentVersion: 0))
            }
            try await apply(ChangeRequest(feature: step.feature, kind: kind))
            if case .dispatch = kind { await workReturned(step.feature, until: waitUntil, clock: clock) }
        }
        return summary
    }

    /// Waits until `feature`'s store has no live asynchronous work, or `deadline`.
    private func workReturned(_ feature: String, until deadline: ContinuousClock.Instant, clock: ContinuousClock) async {
        while let store = loadedStore(feature), store.hasRunningWork, clock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}
