import MicroHTTP

/// Files compiled into the binary: the web page, its JavaScript client and the contract part of
/// the OpenAPI description (sources in `Resources/`; the served document is assembled from the
/// contract and the registered features, see ``OpenAPIDescription``).
enum StaticAssets {
    static let indexHTML = PackageResources.index_html
    static let clientJS = PackageResources.client_js
    /// The generic parts of `/openapi.json` (`Resources/openapi.json`), without any feature.
    static let openAPIContract = PackageResources.openapi_json
    static let indexTag = Reply.contentTag(indexHTML)
    static let clientTag = Reply.contentTag(clientJS)
    static let devtoolsHTML = PackageResources.devtools_html
    static let devtoolsTag = Reply.contentTag(devtoolsHTML)
    /// The pages' own scripts, files of their own so that no page needs inline script.
    static let appJS = PackageResources.app_js
    static let appTag = Reply.contentTag(appJS)
    static let devtoolsJS = PackageResources.devtools_js
    static let devtoolsJSTag = Reply.contentTag(devtoolsJS)

    /// What the pages and scripts may load and do: scripts only from this origin, never inline
    /// (the pages' scripts are `/client.js`, `/app.js`, `/devtools.js`); connections only to
    /// this origin; never shown inside a frame (`frame-ancestors 'none'`: no clickjacking of
    /// the dispatch buttons); no `<base>` and no plugins. Inline styles stay allowed (the pages
    /// have a `<style>` block and a few `style=` attributes; a style cannot run code).
    static let contentSecurityPolicy =
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
        + "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

    /// The file with `Cache-Control: no-cache` and a strong ETag (its hash): a reload asks with
    /// `If-None-Match` and gets `304` with no body.
    static func response(_ request: HTTPRequest, _ bytes: [UInt8], etag: String, type: String, route: String) -> HTTPResponse {
        Reply.validated(
            request, bytes, etag: etag, route: route,
            headers: [
                ("Content-Type", type), ("X-Content-Type-Options", "nosniff"),
                ("Content-Security-Policy", contentSecurityPolicy),
            ])
    }
}
