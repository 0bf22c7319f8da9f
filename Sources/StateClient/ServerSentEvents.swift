/// One event of a `text/event-stream`.
///
/// `package`: the tests read event streams with the same parser as the client.
package struct ServerSentEvent: Sendable, Equatable {
    /// The `event` field; `message` when absent.
    package var type: String
    /// The `data` lines joined with `\n`.
    package var data: String
    /// The `id` field of this event, if it had one.
    package var id: String?
    /// The `retry` field given with this event (milliseconds, digits only), if any: the
    /// server's reconnection delay. (A `retry` in a block without `data` is not dispatched.)
    package var retry: Int?

    package init(type: String, data: String, id: String?, retry: Int? = nil) {
        self.type = type
        self.data = data
        self.id = id
        self.retry = retry
    }
}

/// What a stream carries, comments included: the server's `: ping` heartbeats are comments.
package enum ServerSentEventItem: Sendable, Equatable {
    case event(ServerSentEvent)
    /// A comment line without its `:` and one leading space (`: ping` gives `ping`).
    case comment(String)
}

/// An incremental parser of `text/event-stream` (the WHATWG HTML "server-sent events" format).
///
/// Feed it bytes as they arrive, in chunks of any size (a chunk may end in the middle of a line
/// or of a UTF-8 character); it returns the events completed by each chunk. Lines end with LF,
/// CRLF or CR; a blank line ends an event; lines starting with `:` are comments (the server's
/// `: ping` heartbeats) and are skipped by ``feed(_:)`` (``feedItems(_:)`` returns them too);
/// a `retry` field of ASCII digits is given with its event; unknown fields are ignored; an
/// event with no `data`
/// line is not dispatched, as in browsers.
///
/// Not thread-safe: a value type, owned by the one task that reads a connection.
///
/// The one SSE parser of the package: the client library and the tests both use it.
package struct ServerSentEventParser: Sendable {
    private var line: [UInt8] = []
    private var lastWasCR = false
    private var type = ""
    private var data: [UInt8] = []
    private var hasData = false
    private var id: String?
    private var retry: Int?
    /// Lines (comments included) received so far; tells a live connection from a silent one.
    package private(set) var linesReceived = 0
    /// The longest line accepted; a longer line is an error (a broken or hostile server).
    package let maximumLineLength: Int

    package init(maximumLineLength: Int = 16 * 1024 * 1024) {
        self.maximumLineLength = maximumLineLength
    }

    package struct LineTooLong: Error {}

    /// Parses `bytes` and returns the events they complete (comments are skipped).
    package mutating func feed(_ bytes: some Sequence<UInt8>) throws(LineTooLong) -> [ServerSentEvent] {
        try feedItems(bytes).compactMap { item in
            if case .event(let event) = item { return event }
            return nil
        }
    }

    /// Parses `bytes` and returns the events and comments they complete, in order.
    package mutating func feedItems(_ bytes: some Sequence<UInt8>) throws(LineTooLong) -> [ServerSentEventItem] {
        var events: [ServerSentEventItem] = []
        for byte in bytes {
            switch byte {
            case 0x0A:  // LF
                if lastWasCR {
                    lastWasCR = false  // the LF of a CRLF: the line already ended at the CR
                } else {
                    endLine(into: &events)
                }
            case 0x0D:  // CR
                lastWasCR = true
                endLine(into: &events)
            default:
                lastWasCR = false
                guard line.count < maximumLineLength else { throw LineTooLong() }
                line.append(byte)
            }
        }
        return events
    }

    /// Forgets a partial event, for a new connection.
    package mutating func reset() {
        line = []
        lastWasCR = false
        type = ""
        data = []
        hasData = false
        id = nil
        retry = nil
    }

    private mutating func endLine(into events: inout [ServerSentEventItem]) {
        defer { line.removeAll(keepingCapacity: true) }
        linesReceived += 1
        guard !line.isEmpty else {
            // A blank line dispatches the event.
            if hasData {
                events.append(.event(ServerSentEvent(
                    type: type.isEmpty ? "message" : type, data: String(decoding: data, as: UTF8.self), id: id,
                    retry: retry)))
            }
            type = ""
            data = []
            hasData = false
            id = nil
            retry = nil
            return
        }
        if line.first == UInt8(ascii: ":") {
            var comment = line.dropFirst()
            if comment.first == UInt8(ascii: " ") { comment = comment.dropFirst() }
            events.append(.comment(String(decoding: comment, as: UTF8.self)))
            return
        }
        let field: ArraySlice<UInt8>
        var value: ArraySlice<UInt8>
        if let colon = line.firstIndex(of: UInt8(ascii: ":")) {
            field = line[..<colon]
            value = line[(colon + 1)...]
            if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        } else {
            field = line[...]
            value = []
        }
        switch String(decoding: field, as: UTF8.self) {
        case "event":
            type = String(decoding: value, as: UTF8.self)
        case "data":
            if hasData { data.append(0x0A) }
            data.append(contentsOf: value)
            hasData = true
        case "id":
            if !value.contains(0) { id = String(decoding: value, as: UTF8.self) }
        case "retry":
            // Digits only, else ignored (WHATWG); one too large to hold is ignored too.
            if !value.isEmpty, value.allSatisfy({ (0x30...0x39).contains($0) }),
                let milliseconds = Int(String(decoding: value, as: UTF8.self))
            {
                retry = milliseconds
            }
        default:
            break  // unknown fields
        }
    }
}
