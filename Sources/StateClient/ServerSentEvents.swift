/// One event of a `text/event-stream`.
struct ServerSentEvent: Sendable, Equatable {
    /// The `event` field; `message` when absent.
    var type: String
    /// The `data` lines joined with `\n`.
    var data: String
    /// The `id` field of this event, if it had one.
    var id: String?
}

/// An incremental parser of `text/event-stream` (the WHATWG HTML "server-sent events" format).
///
/// Feed it bytes as they arrive, in chunks of any size (a chunk may end in the middle of a line
/// or of a UTF-8 character); it returns the events completed by each chunk. Lines end with LF,
/// CRLF or CR; a blank line ends an event; lines starting with `:` are comments (the server's
/// `: ping` heartbeats) and are skipped; unknown fields are ignored; an event with no `data`
/// line is not dispatched, as in browsers.
///
/// Not thread-safe: a value type, owned by the one task that reads a connection.
struct ServerSentEventParser: Sendable {
    private var line: [UInt8] = []
    private var lastWasCR = false
    private var type = ""
    private var data: [UInt8] = []
    private var hasData = false
    private var id: String?
    /// Lines (comments included) received so far; tells a live connection from a silent one.
    private(set) var linesReceived = 0
    /// The longest line accepted; a longer line is an error (a broken or hostile server).
    let maximumLineLength: Int

    init(maximumLineLength: Int = 16 * 1024 * 1024) {
        self.maximumLineLength = maximumLineLength
    }

    struct LineTooLong: Error {}

    /// Parses `bytes` and returns the events they complete.
    mutating func feed(_ bytes: some Sequence<UInt8>) throws(LineTooLong) -> [ServerSentEvent] {
        var events: [ServerSentEvent] = []
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
    mutating func reset() {
        line = []
        lastWasCR = false
        type = ""
        data = []
        hasData = false
        id = nil
    }

    private mutating func endLine(into events: inout [ServerSentEvent]) {
        defer { line.removeAll(keepingCapacity: true) }
        linesReceived += 1
        guard !line.isEmpty else {
            // A blank line dispatches the event.
            if hasData {
                events.append(ServerSentEvent(type: type.isEmpty ? "message" : type, data: String(decoding: data, as: UTF8.self), id: id))
            }
            type = ""
            data = []
            hasData = false
            id = nil
            return
        }
        if line.first == UInt8(ascii: ":") { return }  // a comment
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
        default:
            break  // `retry` and unknown fields: the reconnection policy is the client's own
        }
    }
}
