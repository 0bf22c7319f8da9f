import MicroHTTP
import StatePersistence

/// The page, its client, the OpenAPI description, health, metrics and the feature list.
extension StateServerResponder {
    /// `GET /healthz`'s answer, made once (load balancers ask it often).
    static let healthy = Reply.json(200, Reply.statusOK, route: "/healthz", headers: [Reply.noStore])

    static let staticRoutes: [Route] = [
        .open(["GET"], "/") { _, request in
            .now(StaticAssets.response(request.http, StaticAssets.indexHTML, etag: StaticAssets.indexTag, type: "text/html; charset=utf-8", route: "/"))
        },
        .open(["GET"], "/healthz") { _, _ in
            .now(healthy)
        },
        // Readiness for load balancers and Kubernetes: can this node reach its storage (and,
        // with several nodes, does it hear the others' changes)?
        .open(["GET"], "/readyz") { responder, _ throws(APIError) in
            let storage = responder.sessions.storage
            // Not hearing the other nodes is known at once (and then PostgreSQL may not answer
            // a ping for a while): answer it without waiting.
            guard responder.sessions.isFollowing else { throw .notFollowing }
            return .later { () throws(APIError) in
                do throws(StorageError) {
                    try await storage.ping()
                } catch {
                    throw .storage(error)
                }
                guard responder.sessions.isFollowing else { throw .notFollowing }
                return Reply.json(200, Array(#"{"status":"ok"}"#.utf8), route: "/readyz", headers: [Reply.noStore])
            }
        },
        .open(["GET"], "/metrics") { responder, _ throws(APIError) in
            guard let metrics = responder.metrics else { throw .notFound }
            return .now(HTTPResponse(
                status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8"), Reply.noStore],
                body: .bytes(metrics()), route: "/metrics"))
        },
        .open(["GET"], "/openapi.json") { responder, request in
            .now(Reply.validated(
                request.http, responder.openAPI.bytes, etag: responder.openAPI.tag, route: "/openapi.json",
                headers: [Reply.jsonType]))
        },
        .open(["GET"], "/devtools") { _, request in
            .now(StaticAssets.response(
                request.http, StaticAssets.devtoolsHTML, etag: StaticAssets.devtoolsTag, type: "text/html; charset=utf-8",
                route: "/devtools"))
        },
        .open(["GET"], "/client.js") { _, request in
            .now(StaticAssets.response(request.http, StaticAssets.clientJS, etag: StaticAssets.clientTag, type: "text/javascript; charset=utf-8", route: "/client.js"))
        },
        .open(["GET"], "/app.js") { _, request in
            .now(StaticAssets.response(request.http, StaticAssets.appJS, etag: StaticAssets.appTag, type: "text/javascript; charset=utf-8", route: "/app.js"))
        },
        .open(["GET"], "/devtools.js") { _, request in
            .now(StaticAssets.response(
                request.http, StaticAssets.devtoolsJS, etag: StaticAssets.devtoolsJSTag, type: "text/javascript; charset=utf-8",
                route: "/devtools.js"))
        },
        .open(["GET"], "/v1/features") { responder, request in
            .now(Reply.validated(
                request.http, responder.featuresBody, etag: responder.featuresTag, route: "/v1/features",
                headers: [Reply.jsonType]))
        },
    ]
}
