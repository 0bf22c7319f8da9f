import MicroHTTP
import StateSchema
import StateStore

/// The OpenAPI description served at `GET /openapi.json`: the contract
/// (`Resources/openapi.json`, the generic parts) with the schemas of every registered feature,
/// derived from its `Codable` types and refined by its ``Feature/refineSchema(_:)``
/// (``OpenAPIAssembler``). Assembled once, when the responder is made.
public struct OpenAPIDescription: Sendable {
    /// The document as served (two-space indentation, a final newline).
    public let bytes: [UInt8]
    let tag: String
    /// What could not be derived (each names the feature and the type), logged once at start
    /// by ``StateServerApplication``.
    public let warnings: [String]

    /// The contract, parsed once per process.
    private static let contract: OrderedJSON = {
        do {
            return try OrderedJSON.parse(StaticAssets.openAPIContract)
        } catch {
            // The contract is compiled in and checked by the repository's tests.
            return ["openapi": "3.1.0", "info": ["title": "StateServer", "version": "1"], "paths": [:]]
        }
    }()

    public init(registry: FeatureRegistry) {
        let result = OpenAPIAssembler.assemble(contract: Self.contract, features: registry.features)
        bytes = result.document.pretty()
        tag = Reply.contentTag(bytes)
        warnings = result.warnings
    }
}
