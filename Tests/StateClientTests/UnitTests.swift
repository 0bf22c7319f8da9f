// The client's parts without a server: the SSE parser, the event decoder's exactly-once rule,
// the wire shape of actions, and the backoff.

import ExampleFeatures
import Foundation
import StateStore
import Testing

@testable import StateClient

@Suite("Server-sent events parser")
struct ServerSentEventParserTests {
    @Test("events, comments, multi-line data, CRLF and CR line ends")
    func basics() throws {
        var parser = ServerSentEventParser()
        let text = ": ping\n\nid: 3\nevent: state\ndata: {\"a\":1}\n\nid: 4\r\nevent: snapshot\r\ndata: one\r\ndata:two\r\n\r\ndata: bare\r\rretry: 10\n\n"
        let events = try parser.feed(Array(text.utf8))
        #expect(events == [
            ServerSentEvent(type: "state", data: "{\"a\":1}", id: "3"),
            ServerSentEvent(type: "snapshot", data: "one\ntwo", id: "4"),
            ServerSentEvent(type: "message", data: "bare", id: nil),
        ])
    }

    @Test("chunks split anywhere, even inside a CRLF or a UTF-8 character")
    func chunked() throws {
        let text = "id: 1\r\nevent: state\r\ndata: {\"title\":\"Café ☕️\"}\r\n\r\n: ping\r\n\r\nid: 2\nevent: state\ndata: x\n\n"
        let bytes = Array(text.utf8)
        for size in 1...7 {
            var parser = ServerSentEventParser()
            var events: [ServerSentEvent] = []
            var index = 0
            while index < bytes.count {
                events += try parser.feed(bytes[index..<min(index + size, bytes.count)])
                index += size
            }
            #expect(events.map(\.data) == ["{\"title\":\"Café ☕️\"}", "x"], "chunks of \(size)")
            #expect(events.map(\.id) == ["1", "2"])
        }
    }

    @Test("an event without data is not dispatched; a partial event waits for its blank line")
    func incomplete() throws {
        var parser = ServerSentEventParser()
        #expect(try parser.feed(Array("event: state\nid: 9\n\ndata: half".utf8)).isEmpty)
        #expect(try parser.feed(Array("\n".utf8)).isEmpty)
        #expect(try parser.feed(Array("\n".utf8)) == [ServerSentEvent(type: "message", data: "half", id: nil)])
    }

    @Test("feedItems gives comments too, in order with the events (the tests read heartbeats with it)")
    func comments() throws {
        var parser = ServerSentEventParser()
        let items = try parser.feedItems(Array(": ping\n\nid: 1\nevent: state\ndata: x\n\n:no space\r\n:  two\n".utf8))
        #expect(items == [
            .comment("ping"),
            .event(ServerSentEvent(type: "state", data: "x", id: "1")),
            .comment("no space"),
            .comment(" two"),
        ])
    }

    @Test("a retry field of digits is given with its event; anything else in it is ignored")
    func retry() throws {
        var parser = ServerSentEventParser()
        let text = "retry: 1500\nevent: shutdown\ndata: {}\n\nretry: 1.5\ndata: a\n\nretry: -1\nretry:\ndata: b\n\ndata: c\n\n"
        let events = try parser.feed(Array(text.utf8))
        #expect(events.map(\.retry) == [1500, nil, nil, nil])
        #expect(events.first == ServerSentEvent(type: "shutdown", data: "{}", id: nil, retry: 1500))
    }

    @Test("a line over the limit is an error")
    func lineLimit() {
        var parser = ServerSentEventParser(maximumLineLength: 8)
        #expect(throws: ServerSentEventParser.LineTooLong.self) { try parser.feed(Array("data: 0123456789".utf8)) }
    }
}

@Suite("Event decoding")
struct ChangeDecoderTests {
    func stateEvent(id: Int, version: Int, reason: String) -> ServerSentEvent {
        ServerSentEvent(
            type: "state",
            data: """
                {"feature":"login","version":\(version),"cause":"dispatch","action":{"type":"failed","reason":"\(reason)"},\
                "state":{"error":"\(reason)","isLoading":false,"isLoggedIn":false,"username":"ada"},\
                "effect":{"type":"toast","message":"\(reason)"}}
                """,
            id: String(id))
    }

    func snapshot(id: Int, version: Int) -> ServerSentEvent {
        ServerSentEvent(
            type: "snapshot",
            data: """
                {"features":{"login":{"version":\(version),"state":{"error":null,"isLoading":false,"isLoggedIn":false,"username":""}}}}
                """,
            id: String(id))
    }

    @Test("typed snapshot and change; a change at or before the last id is dropped (effects once)")
    func exactlyOnce() throws {
        var decoder = ChangeDecoder<LoginFeature>(featureName: "login")
        let first = try decoder.decode(snapshot(id: 3, version: 1))
        #expect(first?.isSnapshot == true && first?.version == 1 && decoder.lastEventID == 3)

        let change = try #require(try decoder.decode(stateEvent(id: 4, version: 2, reason: "no")))
        #expect(change.effect == .toast(message: "no"))
        #expect(change.change?.action == .failed(reason: "no"))
        #expect(change.state.error == "no" && change.eventID == 4)

        // A replay that overlaps what was delivered: dropped.
        #expect(try decoder.decode(stateEvent(id: 4, version: 2, reason: "no")) == nil)
        #expect(try decoder.decode(stateEvent(id: 2, version: 1, reason: "old")) == nil)
        #expect(decoder.lastEventID == 4)

        // Another feature's change and unknown events are skipped, but count.
        let counter = ServerSentEvent(
            type: "state", data: #"{"feature":"counter","version":1,"cause":"dispatch","action":null,"state":{"count":1},"effect":null}"#,
            id: "5")
        #expect(try decoder.decode(counter) == nil && decoder.lastEventID == 5)
        #expect(try decoder.decode(ServerSentEvent(type: "other", data: "{}", id: "6")) == nil)

        // A snapshot restarts the count, even backwards.
        #expect(try decoder.decode(snapshot(id: 2, version: 9))?.version == 9)
        #expect(try decoder.decode(stateEvent(id: 3, version: 10, reason: "again"))?.effect == .toast(message: "again"))
    }

    @Test("a state of the wrong shape is a decoding error")
    func wrongShape() {
        var decoder = ChangeDecoder<CounterFeature>(featureName: "counter")
        let event = ServerSentEvent(
            type: "state", data: #"{"feature":"counter","version":1,"cause":"dispatch","action":null,"state":{"count":"one"},"effect":null}"#,
            id: "1")
        #expect { try decoder.decode(event) } throws: { ($0 as? StateClientError)?.kind == .decoding }
    }

    @Test("an event without an integer id is invalid")
    func missingID() {
        var decoder = ChangeDecoder<CounterFeature>(featureName: "counter")
        #expect { try decoder.decode(ServerSentEvent(type: "snapshot", data: "{}", id: nil)) } throws: {
            ($0 as? StateClientError)?.kind == .invalidResponse
        }
    }
}

@Suite("Wire shapes and backoff")
struct WireAndBackoffTests {
    @Test("actions go out tagged, effects come in untagged")
    func tagged() throws {
        #expect(try WireCoding.tagged(CounterFeature.Action.increment(by: 2)) == .object(["type": .string("increment"), "by": .int(2)]))
        #expect(try WireCoding.tagged(CounterFeature.Action.increment(by: nil)) == .object(["type": .string("increment")]))
        #expect(try WireCoding.tagged(TodosFeature.Action.clearCompleted) == .object(["type": .string("clearCompleted")]))
        let effect = try WireCoding.effect(
            LoginFeature.Effect.self, from: .object(["type": .string("toast"), "message": .string("hi")]))
        #expect(effect == .toast(message: "hi"))
        #expect(try WireCoding.effect(LoginFeature.Effect.self, from: .null) == nil)
    }

    @Test("exponential backoff, capped; jitter stays within its fraction")
    func backoff() {
        let policy = ReconnectPolicy(initialDelay: .milliseconds(500), maximumDelay: .seconds(30), multiplier: 2, jitter: 0.2)
        #expect(policy.delay(beforeAttempt: 1) == .milliseconds(500))
        #expect(policy.delay(beforeAttempt: 2) == .seconds(1))
        #expect(policy.delay(beforeAttempt: 4) == .seconds(4))
        #expect(policy.delay(beforeAttempt: 10) == .seconds(30))
        #expect(policy.delay(beforeAttempt: 10_000) == .seconds(30))
        for attempt in 1...12 {
            let delay = policy.jitteredDelay(beforeAttempt: attempt)
            let base = policy.delay(beforeAttempt: attempt)
            #expect(delay >= base * 0.8 - .milliseconds(1) && delay <= base * 1.2 + .milliseconds(1))
        }
    }

    @Test("a shutdown event's delay: retry, else retryAfterMs, else the default; capped, lengthened by up to jitter, never shortened")
    func shutdownDelay() {
        typealias Decoder = ChangeDecoder<CounterFeature>
        let data = #"{"reason":"shutdown","retryAfterMs":700}"#
        #expect(Decoder.shutdownDelay(ServerSentEvent(type: "shutdown", data: data, id: nil, retry: 300), default: .seconds(9)) == .milliseconds(300))
        #expect(Decoder.shutdownDelay(ServerSentEvent(type: "shutdown", data: data, id: nil), default: .seconds(9)) == .milliseconds(700))
        #expect(Decoder.shutdownDelay(ServerSentEvent(type: "shutdown", data: "{}", id: nil), default: .seconds(9)) == .seconds(9))
        #expect(Decoder.shutdownDelay(ServerSentEvent(type: "state", data: data, id: "1", retry: 300), default: .seconds(9)) == nil)
        let policy = ReconnectPolicy(jitter: 0.2)
        for _ in 0..<50 {
            let delay = policy.jitteredDelay(after: .seconds(1))
            #expect(delay >= .seconds(1) && delay <= .milliseconds(1200) + .milliseconds(1))
        }
        #expect(ReconnectPolicy(jitter: 0).jitteredDelay(after: .milliseconds(250)) == .milliseconds(250))
        #expect(policy.jitteredDelay(after: .zero) == .zero)
        #expect(ReconnectPolicy(maximumDelay: .seconds(30), jitter: 0).jitteredDelay(after: .seconds(3600)) == .seconds(30))
    }

    @Test("transient errors are the ones worth retrying")
    func transient() {
        #expect(StateClientError(kind: .transport, message: "").isTransient)
        #expect(StateClientError(kind: .server, status: 503, code: .storageUnavailable, message: "").isTransient)
        #expect(StateClientError(kind: .server, status: 429, code: .tooManyStreams, message: "").isTransient)
        #expect(!StateClientError(kind: .server, status: 500, code: .internalError, message: "").isTransient)
        #expect(!StateClientError(kind: .server, status: 404, code: .sessionNotFound, message: "").isTransient)
        #expect(!StateClientError(kind: .decoding, message: "").isTransient)
    }
}
