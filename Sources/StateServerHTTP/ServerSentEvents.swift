import StateSessions

/// Server-sent events framing (the `text/event-stream` format): `id:`, `event:` and one
/// `data:` line (event data is single-line JSON), then a blank line.
///
/// The one message not from a session is ``shutdown(retryAfterMilliseconds:)``.
public struct ServerSentEvents: EventEncoder {
    public init() {}

    public func encode(seq: Int, event: String, data: [UInt8]) -> [UInt8] {
        Self.frame(id: seq, event: event, data: data)
    }

    public func encode(event: String, data: [UInt8]) -> [UInt8] {
        Self.frame(id: nil, event: event, data: data)
    }

    /// One message: `id:` when it moves the client's `Last-Event-ID`, then `event:` and `data:`.
    private static func frame(id: Int?, event: String, data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(data.count + event.utf8.count + 32)
        if let id {
            out.append(contentsOf: "id: ".utf8)
            out.append(contentsOf: String(id).utf8)
            out.append(10)
        }
        out.append(contentsOf: "event: ".utf8)
        out.append(contentsOf: event.utf8)
        out.append(contentsOf: "\ndata: ".utf8)
        out.append(contentsOf: data)
        out.append(contentsOf: [10, 10])
        return out
    }

    /// The last message of every stream when the server shuts down gracefully:
    ///
    /// ```
    /// retry: 1000
    /// event: shutdown
    /// data: {"reason":"shutdown","retryAfterMs":1000}
    /// ```
    ///
    /// `retry:` sets the reconnection delay of an `EventSource` (which then reconnects with
    /// `Last-Event-ID` by itself); the data repeats it for clients that read the JSON. It has no
    /// `id:`, so it does not move the client's `Last-Event-ID`: the next connection resumes
    /// after the last change delivered, with no gap.
    public static func shutdown(retryAfterMilliseconds: Int) -> [UInt8] {
        let milliseconds = String(max(0, retryAfterMilliseconds))
        return Array("retry: \(milliseconds)\nevent: shutdown\ndata: {\"reason\":\"shutdown\",\"retryAfterMs\":\(milliseconds)}\n\n".utf8)
    }
}

extension ServerSentEvents {
    /// The last event of a stream whose token was revoked or expired (`reason`: `revoked` or
    /// `expired`): the stream then ends. A reconnect with the same token is refused.
    ///
    /// ```
    /// event: revoked
    /// data: {"reason":"revoked"}
    /// ```
    static func revoked(reason: String) -> [UInt8] {
        Array("event: revoked\ndata: {\"reason\":\"\(reason)\"}\n\n".utf8)
    }
}
