@testable import MicroHTTP
import Testing

/// The event stream's queue rules, without a connection (nothing to suspend or resume).
@Suite("EventStream")
struct EventStreamTests {
    private func drain(_ stream: EventStream, max: Int = 1 << 16) -> [UInt8] {
        var out: [UInt8] = []
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: max)
        defer { buffer.deallocate() }
        while true {
            let count = stream.read(into: buffer, max: max)
            guard count > 0 else { break }
            buffer.withMemoryRebound(to: UInt8.self, capacity: count) { out += UnsafeBufferPointer(start: $0, count: count) }
        }
        return out
    }

    @Test func bytesComeOutInOrderInPiecesOfAtMostMax() {
        let stream = EventStream(bufferLimit: 1000)
        #expect(stream.send(Array("hello ".utf8)))
        #expect(stream.send(Array("world".utf8)))
        #expect(String(decoding: drain(stream, max: 3), as: UTF8.self) == "hello world")
    }

    @Test func aBacklogPastTheLimitClosesTheStreamAndDropsIt() {
        let stream = EventStream(bufferLimit: 10)
        #expect(stream.send(Array(repeating: 65, count: 8)))
        #expect(!stream.send(Array(repeating: 66, count: 8)), "over the limit")
        #expect(!stream.isOpen)
        #expect(drain(stream).isEmpty, "queued bytes are dropped")
        #expect(!stream.send([67]), "a closed stream takes nothing")
    }

    @Test func oneFrameIsAlwaysAcceptedOnAnEmptyQueue() {
        let stream = EventStream(bufferLimit: 10)
        #expect(stream.send(Array(repeating: 65, count: 50)))
        #expect(drain(stream).count == 50)
    }

    @Test func offerChangesNothingWhenItDoesNotFit() {
        let stream = EventStream(bufferLimit: 10)
        #expect(stream.offer(Array(repeating: 65, count: 8)))
        #expect(!stream.offer(Array(repeating: 66, count: 8)))
        #expect(stream.isOpen, "offer does not close")
        #expect(drain(stream) == Array(repeating: 65, count: 8))
    }

    @Test func anIdleStreamGetsAPingEveryTickAndABusyOneNone() {
        let stream = EventStream(bufferLimit: 1000)
        let ping = Array(": ping\n\n".utf8)
        stream.heartbeat(ping)
        stream.heartbeat(ping)
        #expect(drain(stream) == ping + ping, "a ping does not count as activity")
        #expect(stream.send(Array("data\n\n".utf8)))
        stream.heartbeat(ping)
        #expect(drain(stream) == Array("data\n\n".utf8), "a stream that sent data since the last tick gets no ping")
        stream.heartbeat(ping)
        #expect(drain(stream) == ping)
    }

    @Test func closeEndsAfterTheQueueAndFinishCallsBackOnce() {
        let stream = EventStream(bufferLimit: 1000)
        #expect(stream.send(Array("last".utf8)))
        stream.close()
        #expect(!stream.send([1]))
        #expect(drain(stream) == Array("last".utf8))
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: 8)
        defer { buffer.deallocate() }
        #expect(stream.read(into: buffer, max: 8) == -1, "end of stream")
        let calls = Counter()
        stream.onFinish { calls.increment() }
        stream.finish()
        stream.finish()
        stream.onFinish { calls.increment() }
        #expect(calls.value == 2, "once per callback, also when added after the end")
    }

    @Test func aFarewellComesAfterTheQueueEvenPastTheLimitAndNothingAfterIt() {
        let stream = EventStream(bufferLimit: 10)
        #expect(stream.send(Array("0123456789".utf8)))
        #expect(stream.close(after: Array("bye".utf8)), "a full queue still takes the farewell")
        #expect(!stream.send([1]))
        #expect(!stream.close(after: Array("again".utf8)), "one farewell")
        #expect(drain(stream) == Array("0123456789bye".utf8))
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: 8)
        defer { buffer.deallocate() }
        #expect(stream.read(into: buffer, max: 8) == -1, "end of stream")

        let closed = EventStream(bufferLimit: 10)
        closed.close()
        #expect(!closed.close(after: Array("bye".utf8)), "a stream already ending gets no farewell")
        #expect(drain(closed).isEmpty)
    }
}

private final class Counter: @unchecked Sendable {
    // @unchecked: touched only from the test's own thread (callbacks run synchronously).
    var value = 0
    func increment() { value += 1 }
}
