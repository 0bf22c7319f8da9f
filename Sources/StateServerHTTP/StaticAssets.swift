import MicroHTTP

/// Files compiled into the binary: the web page, its JavaScript client and the OpenAPI
/// description (sources in `Resources/`; `docs/openapi.json` links to the same file).
enum StaticAssets {
    static let indexHTML = PackageResources.index_html
    static let clientJS = PackageResources.client_js
    static let openAPI = PackageResources.openapi_json
    static let indexTag = Reply.contentTag(indexHTML)
    static let clientTag = Reply.contentTag(clientJS)
    static let openAPITag = Reply.contentTag(openAPI)
    static let devtoolsHTML = PackageResources.devtools_html
    static let devtoolsTag = Reply.contentTag(devtoolsHTML)

    /// The file with `Cache-Control: no-cache` and a strong ETag (its hash): a reload asks with
    /// `If-None-Match` and gets `304` with no body.
    static func response(_ request: HTTPRequest, _ bytes: [UInt8], etag: String, type: String, route: String) -> HTTPResponse {
        Reply.validated(
            request, bytes, etag: etag, route: route,
            headers: [
                ("Content-Type", type), ("X-Content-Type-Options", "nosniff"),
                ("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:"),
            ])
    }
}
