import StateJSON
import StatePersistence
import StateStore

/// A session's recording being exported: its head (every feature's starting state) is read;
/// ``writeChanges(maxBytes:write:)`` streams the changes and the document's end. Made by
/// ``Session/recordingExport(server:)``.
///
/// Each change is written as the journal keeps it — a patch from the feature's previous state,
/// or whole — so the document costs about what the journal costs on disk, and the export holds
/// one page of the journal at a time, never a state per change.
public struct RecordingExport: Sendable {
    /// `{"format", "version", "server", "features", "changes": [`.
    public let head: [UInt8]
    let source: Source

    enum Source: Sendable {
        /// The journal of `session` after seq `after`, through `through`; each feature's changes
        /// follow on from its starting version in `versions`. `states`: each feature's starting
        /// state, when the journal keeps whole states (memory mode), so each change is written
        /// as a patch from the one before where that is smaller.
        case journal(
            any SessionStorage, session: String, after: Int, through: Int, versions: [String: Int], states: [String: [UInt8]]?)
    }

    /// Journal entries read at a time.
    static let page = 256
    /// Bytes handed to `write` at a time (changes are grouped up to about this much).
    public static let chunk = 64 << 10

    /// Writes the head, the changes in order and the document's end through `write`, which
    /// returns `false` once the reader is gone (then nothing more is read or written). Stops
    /// before a change would take the body past `maxBytes` — the head (the starting states) is
    /// always written — and then, or when the journal lost a change meanwhile (compacted
    /// under the export), ends the document with `"complete": false`.
    public func writeChanges(maxBytes: Int, write: (_ bytes: [UInt8]) async -> Bool) async {
        var pending = head
        var total = head.count
        var first = true
        var complete = true
        let tailBytes = Recording.tail(complete: false).count
        /// Adds one change; false once the cap is reached.
        func add(_ step: [UInt8]) -> Bool {
            let size = step.count + (first ? 0 : 1)
            guard total + size + tailBytes <= maxBytes else { return false }
            if !first { pending.append(UInt8(ascii: ",")) }
            first = false
            pending += step
            total += size
            return true
        }
        func flush() async -> Bool {
            guard !pending.isEmpty else { return true }
            defer { pending = [] }
            return await write(pending)
        }
        switch source {
        case .journal(let storage, let session, let after, let through, var versions, var states):
            var cursor = after
            reading: while cursor < through {
                guard let entries = try? await storage.journal(session: session, afterSeq: cursor, limit: Self.page), !entries.isEmpty
                else { complete = false; break }
                for entry in entries where entry.seq <= through {
                    // A gap in a feature's versions: its changes were compacted away while the
                    // export read (the patch would not apply to the state the reader holds).
                    guard let version = versions[entry.feature], entry.version == version + 1 else { complete = false; break reading }
                    versions[entry.feature] = entry.version
                    cursor = entry.seq
                    var delta = entry.delta
                    if states != nil, case .state(let state) = delta {
                        delta = StateDelta.between(states?[entry.feature], state)
                        states?[entry.feature] = state
                    }
                    let (key, content) = delta.isPatch ? ("patch", delta.bytes) : ("state", delta.bytes)
                    let step = Recording.step(
                        seq: entry.seq, feature: entry.feature, version: entry.version, cause: entry.cause,
                        action: entry.action, key: key, content: content, effect: entry.effect)
                    guard add(step) else { complete = false; break reading }
                }
                if entries.last.map({ $0.seq >= through }) ?? true { break }
                if pending.count >= Self.chunk, !(await flush()) { return }
            }
        }
        pending += Recording.tail(complete: complete)
        _ = await flush()
    }
}

extension Session {
    /// The session's recording, ready to stream: each feature's starting state (its initial
    /// state, or the state before its oldest change still kept) is read now, so a failure is
    /// an error reply; the changes follow in ``RecordingExport/writeChanges(maxBytes:write:)``.
    /// The journal is read as it is now (changes made meanwhile are not in it).
    public func recordingExport(server: String) async throws(SessionFailure) -> RecordingExport {
        let storage = self.storage
        var starts: [Recording.Start] = []
        var states: [String: [UInt8]] = [:]
        let through: Int
        // Each feature's oldest kept change, found a page at a time.
        var first: [String: JournalEntry] = [:]
        var after = 0
        do throws(StorageError) {
            through = try await storage.lastSeq(session: id)
            while first.count < registry.features.count, after < through {
                let entries = try await storage.journal(session: id, afterSeq: after, limit: RecordingExport.page)
                guard let last = entries.last else { break }
                for entry in entries where entry.seq <= through && first[entry.feature] == nil { first[entry.feature] = entry }
                after = last.seq
            }
            for definition in registry.features {
                let name = definition.name
                let (version, state): (Int, [UInt8]?)
                if let entry = first[name] {
                    version = entry.version - 1
                    state = try await storage.state(session: id, feature: name, at: version, initial: definition.initialStateJSON)
                } else if let base = try await storage.latestSnapshot(session: id, feature: name) {
                    (version, state) = (base.version, base.state)
                } else {
                    (version, state) = (0, definition.initialStateJSON)
                }
                guard let state, let json = JSONCoding.parse(state) else {
                    throw StorageError(.unusable, "the state of \(name) at version \(version) cannot be rebuilt")
                }
                starts.append(Recording.Start(name: name, stateVersion: definition.stateVersion, version: version, state: json))
                states[name] = state
            }
        } catch {
            throw error.kind == .sessionGone ? .sessionGone : .storage(error)
        }
        let from = first.values.map(\.seq).min().map { $0 - 1 } ?? through
        let versions = Dictionary(uniqueKeysWithValues: starts.map { ($0.name, $0.version) })
        return RecordingExport(
            head: Recording.head(server: server, features: starts),
            source: .journal(
                storage, session: id, after: from, through: through, versions: versions,
                states: storage.lifetime == .process ? states : nil))
    }
}

/// What an import did (``Session/importRecording(_:asRecorded:workWait:)``).
public struct ImportSummary: Sendable {
    /// Changes the import applied: starting states and steps.
    public var changes = 0
    /// Recorded follow-ups (actions a client may not send) and timer firings not copied: the
    /// work and the timers of the recorded dispatches ran again on the server and sent their own.
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
            if case .failed(let why) = await submit(request).value() { throw why }
            summary.changes += 1
        }
        for start in recording.features {
            let initial = registry[start.name].flatMap { JSONCoding.parse($0.initialStateJSON) }
            if start.state != initial {
                try await apply(ChangeRequest(feature: start.name, kind: .importStart(start.state, asRecorded: asRecorded)))
            }
        }
        var current: [String: JSONValue] = [:]
        for start in recording.features { current[start.name] = start.state }
        for (index, step) in recording.changes.enumerated() {
            // The state the step led to, from the feature's previous one (a patch at a time).
            guard let previous = current[step.feature], let state = try? step.state(after: previous) else {
                throw .store(StoreError(
                    .invalidState, "changes[\(index)] does not follow from the feature's state before it", currentVersion: 0))
            }
            current[step.feature] = state
            if asRecorded {
                try await apply(ChangeRequest(feature: step.feature, kind: .replay(cause: step.cause, payload: step.payload(state: state))))
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
            case "rehydrate": kind = .rehydrate(state)
            case "travel": kind = .travel(state)
            case "import": kind = .importStart(state, asRecorded: false)
            case "reset": kind = .reset
            case "timer":
                // The timer a recorded dispatch scheduled was scheduled again by that dispatch
                // here, and fires on its own when due: the recorded firing is not copied.
                summary.leftToServer += 1
                continue
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

extension Session {
    /// The session's pending timers, every store's, due first (as storage keeps them: a timer
    /// is there once the change that scheduled it is committed).
    public func pendingTimers() async throws(SessionFailure) -> [StoredTimer] {
        do throws(StorageError) {
            return try await storage.timers(session: id)
        } catch {
            throw .storage(error)
        }
    }
}
