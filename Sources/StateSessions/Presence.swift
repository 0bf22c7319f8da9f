import Foundation
import StateStore

/// One stream in a session's presence (`GET .../events?presence=LABEL`): who is watching.
///
/// It joins when its stream subscribes and leaves when the stream ends — closed by its client,
/// found gone, revoked, dropped — in the session's ``EventHub``, under the hub's lock, so the
/// list and the `presence` events the other joined streams receive never disagree.
public struct PresenceEntry: Sendable, Equatable {
    /// Made by the server for this stream's entry (96 random bits, base64url).
    public let id: String
    /// What the client called itself (1 to ``maxLabelScalars`` Unicode scalars).
    public let label: String
    /// Who holds the credential: a JWT's `sub` (or the subject a minted token inherited from
    /// the JWT that minted it), else the minted token's id; nil for the owner token and the
    /// server's admin.
    public let subject: String?
    /// Milliseconds since 1970 when it joined.
    public let since: Int64

    /// Longest label, in Unicode scalars.
    public static let maxLabelScalars = 64

    public init(id: String, label: String, subject: String?, since: Int64) {
        self.id = id
        self.label = label
        self.subject = subject
        self.since = since
    }

    /// A new entry, with a fresh id, joining now.
    public static func joining(label: String, grant: Grant) -> PresenceEntry {
        PresenceEntry(
            id: SessionManager.randomString(bytes: 12), label: label, subject: grant.subject ?? grant.tokenID,
            since: WallClock.now)
    }

    /// `{"id", "label", "sub", "since"}`.
    public var json: [UInt8] {
        var out = JSONObjectWriter(capacity: 64 + label.utf8.count + (subject?.utf8.count ?? 4))
        out.string("id", id)
        out.string("label", label)
        if let subject { out.string("sub", subject) } else { out.raw("sub", nil) }
        out.int("since", Int(since))
        return out.finish()
    }

    /// The `data` of a `presence` event: `{"joined": {...}}` or `{"left": {...}}`.
    func eventData(joined: Bool) -> [UInt8] {
        var out = JSONObjectWriter(capacity: 80 + label.utf8.count)
        out.raw(joined ? "joined" : "left", json)
        return out.finish()
    }

    /// `{"present": [...]}`, oldest first.
    public static func listBody(_ entries: [PresenceEntry]) -> [UInt8] {
        var list = JSONArrayWriter()
        for entry in entries { list.append(entry.json) }
        var body = JSONObjectWriter()
        body.raw("present", list.finish())
        var bytes = body.finish()
        bytes.append(0x0A)
        return bytes
    }
}
