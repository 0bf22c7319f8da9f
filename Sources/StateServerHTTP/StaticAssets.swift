import MicroHTTP

/// Files compiled into the binary: the web page, its JavaScript client and the OpenAPI
/// description (sources in `Resources/`; `docs/openapi.json` links to the same file).
enum StaticAssets {
    static let indexHTML = PackageResources.index_html
    static let clientJS = PackageResources.client_js
    static let openAPI = PackageResources.openapi_json

    static func response(_ bytes: [UInt8], type: String, route: String) -> HTTPResponse {
        HTTPResponse(
            status: 200,
            headers: [
                ("Content-Type", type), ("Cache-Control", "no-cache"), ("X-Content-Type-Options", "nosniff"),
                ("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:"),
            ],
            body: .bytes(bytes), route: route)
    }
}
