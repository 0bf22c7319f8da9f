import StateSessions

/// Server-sent events framing (the `text/event-stream` format): `id:`, `event:` and one
/// `data:` line (event data is single-line JSON), then a blank line.
public struct ServerSentEvents: EventEncoder {
    public init() {}

    public func encode(seq: Int, event: String, data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(data.count + 40)
        out.append(contentsOf: "id: ".utf8)
        out.append(contentsOf: String(seq).utf8)
        out.append(contentsOf: "\nevent: ".utf8)
        out.append(contentsOf: event.utf8)
        out.append(contentsOf: "\ndata: ".utf8)
        out.append(contentsOf: data)
        out.append(contentsOf: [10, 10])
        return out
    }
}
