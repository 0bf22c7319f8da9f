import Foundation
import Synchronization

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One HTTP response read as it arrives, bridged from `URLSessionDataDelegate` callbacks to an
/// `AsyncThrowingStream`.
///
/// `URLSession.bytes(for:)` does not exist in swift-corelibs-foundation (Linux), so the body is
/// read through `urlSession(_:dataTask:didReceive:)` instead, which works on every platform:
/// the response head, then each chunk of data as libcurl (Linux) or the system (Apple) hands it
/// over, then the end of the response or the error that ended it.
///
/// Each connection has a `URLSession` of its own, because a session keeps a strong reference to
/// its delegate until it is invalidated; the session is invalidated (and the request cancelled)
/// when the stream ends or its consumer goes away, so nothing outlives the connection.
///
/// **Thread safety.** `Sendable`. The delegate runs on the session's serial delegate queue and
/// only yields to the stream's continuation, which is thread-safe; the consumer reads the
/// stream from one task.
final class EventStreamConnection: Sendable {
    /// The status and the headers the client needs, copied out of `HTTPURLResponse`.
    struct Head: Sendable {
        var status: Int
        var contentType: String?
        var retryAfter: Duration?
        var etagVersion: Int?
    }

    enum Part: Sendable {
        case head(Head)
        case data(Data)
    }

    /// The response: one `.head`, then `.data` chunks; finishes at the end of the response and
    /// throws the transport error that ended it, if any.
    let parts: AsyncThrowingStream<Part, any Error>
    private let session: URLSession

    /// Starts `request` at once.
    ///
    /// - Parameter idleTimeout: how long the connection may stay silent (no byte, heartbeats
    ///   included) before it fails with a timeout. `URLSession` restarts its request timeout on
    ///   every byte received, on Linux as on Apple platforms.
    init(request: URLRequest, idleTimeout: Duration) {
        let (parts, continuation) = AsyncThrowingStream.makeStream(of: Part.self, throwing: (any Error).self)
        self.parts = parts
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        let seconds = max(1, Double(idleTimeout.components.seconds) + Double(idleTimeout.components.attoseconds) / 1e18)
        configuration.timeoutIntervalForRequest = seconds
        configuration.timeoutIntervalForResource = 7 * 24 * 3600
        var request = request
        request.timeoutInterval = seconds
        let session = URLSession(configuration: configuration, delegate: Delegate(continuation), delegateQueue: nil)
        self.session = session
        continuation.onTermination = { _ in session.invalidateAndCancel() }
        session.dataTask(with: request).resume()
    }

    /// Cancels the request; the stream finishes.
    func cancel() {
        session.invalidateAndCancel()
    }

    /// Forwards the session's callbacks to the stream.
    ///
    /// `Sendable` without `@unchecked`: its stored properties are the continuation and a
    /// `Mutex`, both `Sendable`.
    private final class Delegate: NSObject, URLSessionDataDelegate, Sendable {
        let continuation: AsyncThrowingStream<Part, any Error>.Continuation
        /// Whether `.head` was sent: by the response callback, or else (an SDK whose signature
        /// differs does not call it) before the first data or at the end.
        private let headSent = Mutex(false)

        init(_ continuation: AsyncThrowingStream<Part, any Error>.Continuation) {
            self.continuation = continuation
        }

        /// Sends the head of `response` once; false when it is not an HTTP response.
        private func sendHead(_ response: URLResponse?) -> Bool {
            guard !headSent.withLock({ sent in defer { sent = true }; return sent }) else { return true }
            guard let http = response as? HTTPURLResponse else {
                continuation.finish(throwing: StateClientError(kind: .invalidResponse, message: "the answer is not an HTTP response"))
                return false
            }
            let retryAfter = http.value(forHTTPHeaderField: "Retry-After")
                .flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }.map { Duration.seconds($0) }
            let etag = http.value(forHTTPHeaderField: "ETag").flatMap(StateServerClient.Reply.version(ofEntityTag:))
            continuation.yield(.head(Head(
                status: http.statusCode, contentType: http.value(forHTTPHeaderField: "Content-Type"),
                retryAfter: retryAfter, etagVersion: etag)))
            return true
        }

        func urlSession(
            _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
            completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
        ) {
            completionHandler(sendHead(response) ? .allow : .cancel)
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            guard sendHead(dataTask.response) else {
                dataTask.cancel()
                return
            }
            continuation.yield(.data(data))
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            if let error {
                continuation.finish(throwing: StateClientError(
                    kind: .transport, message: "the event stream's connection failed", underlyingError: error))
            } else {
                if task.response != nil { _ = sendHead(task.response) }
                continuation.finish()
            }
            session.finishTasksAndInvalidate()
        }
    }
}
