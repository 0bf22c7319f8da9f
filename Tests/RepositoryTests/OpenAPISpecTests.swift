import ExampleFeatures
import Foundation
import TestSupport
import StatePersistence
import StateServerHTTP
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The committed OpenAPI description (`docs/openapi.json`: the contract
/// `Sources/StateServerHTTP/Resources/openapi.json` assembled with the example features'
/// derived schemas) is valid JSON for OpenAPI 3.1, and its paths and methods are exactly the
/// routes the built server answers: every listed method is served, and every other method gets
/// `405` with an `Allow` header naming exactly the listed ones. The server serves the same
/// bytes at `GET /openapi.json`.
@Suite("OpenAPI description")
struct OpenAPISpecTests {
    static let specPath = "docs/openapi.json"
    static let contractPath = "Sources/StateServerHTTP/Resources/openapi.json"
    static let httpMethods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"]
    /// The methods sent to every path: those the spec does not list must be refused with 405.
    static let probedMethods = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]

    static func specData() throws -> Data {
        let url = Repository.url(specPath)
        guard let data = FileManager.default.contents(atPath: url.path) else {
            throw Repository.MissingFile(path: specPath, lookedAt: url.path)
        }
        return data
    }

    static func spec() throws -> [String: Any] {
        let object = try JSONSerialization.jsonObject(with: try specData())
        return try #require(object as? [String: Any], "\(specPath) is not a JSON object")
    }

    /// Path template → upper-case methods, as the spec lists them.
    static func operations(_ spec: [String: Any]) throws -> [String: Set<String>] {
        let paths = try #require(spec["paths"] as? [String: Any], "the spec has no 'paths' object")
        var result: [String: Set<String>] = [:]
        for (path, item) in paths {
            let item = try #require(item as? [String: Any], "paths['\(path)'] is not an object")
            result[path] = Set(item.keys.filter { httpMethods.contains($0) }.map { $0.uppercased() })
        }
        return result
    }

    // MARK: The document

    @Test("the spec parses as JSON and declares OpenAPI 3.1.x")
    func parsesAndDeclaresOpenAPI31() throws {
        let spec = try Self.spec()
        let version = try #require(spec["openapi"] as? String, "no 'openapi' version string")
        #expect(version.hasPrefix("3.1."), "openapi is \(version), expected 3.1.x")
        let info = try #require(spec["info"] as? [String: Any], "no 'info' object")
        #expect(info["title"] is String)
        #expect(info["version"] is String)
        let operations = try Self.operations(spec)
        #expect(!operations.isEmpty, "the spec lists no paths")
        #expect(operations.values.allSatisfy { !$0.isEmpty }, "a path lists no method: \(operations)")
    }

    /// Set to regenerate `docs/openapi.json`:
    /// `STATE_SERVER_WRITE_OPENAPI=1 swift test --filter OpenAPISpecTests`.
    static let regenerate = ProcessInfo.processInfo.environment["STATE_SERVER_WRITE_OPENAPI"] == "1"

    @Test("docs/openapi.json is the contract assembled with the example features (not stale)")
    func docsAreAssembled() throws {
        let assembled = OpenAPIDescription(registry: try ExampleFeatures.registry())
        #expect(assembled.warnings.isEmpty, "the example features' schemas: \(assembled.warnings)")
        if Self.regenerate {
            try Data(assembled.bytes).write(to: Repository.url(Self.specPath))
        }
        #expect(
            Data(assembled.bytes) == (try Self.specData()),
            """
            \(Self.specPath) is not what the server assembles from \(Self.contractPath) and the example features: \
            regenerate it with `STATE_SERVER_WRITE_OPENAPI=1 swift test --filter OpenAPISpecTests` and commit it
            """)
    }

    @Test("the contract has no feature's components: they are derived")
    func contractIsGeneric() throws {
        let contract = try #require(
            try JSONSerialization.jsonObject(with: Data(try Repository.text(Self.contractPath).utf8)) as? [String: Any])
        let schemas = try #require((contract["components"] as? [String: Any])?["schemas"] as? [String: Any])
        for name in ["CounterState", "TodoItem", "LoginAction", "ExampleFeatureDispatch", "CounterStoreSnapshot"] {
            #expect(schemas[name] == nil, "\(Self.contractPath) defines \(name), which the assembler derives")
        }
        for name in ["AnyAction", "GenericDispatch", "FeatureStates", "RehydrateRequest", "DispatchRequest", "FeatureName"] {
            #expect(schemas[name] != nil, "\(Self.contractPath) lacks \(name), where the assembler adds the features")
        }
    }

    @Test("every $ref in the spec points at a component that exists")
    func referencesResolve() throws {
        let spec = try Self.spec()
        var references: [String] = []
        func collect(_ value: Any) {
            if let object = value as? [String: Any] {
                if let ref = object["$ref"] as? String { references.append(ref) }
                object.values.forEach(collect)
            } else if let array = value as? [Any] {
                array.forEach(collect)
            }
        }
        collect(spec)
        #expect(!references.isEmpty)
        for ref in Set(references).sorted() {
            #expect(ref.hasPrefix("#/"), "\(ref) is not a local reference")
            var node: Any? = spec
            for token in ref.dropFirst(2).split(separator: "/", omittingEmptySubsequences: false) {
                let key = token.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
                node = (node as? [String: Any])?[key]
            }
            #expect(node != nil, "\(ref) points at nothing")
        }
    }

    @Test("operation ids are unique and every session route needs the bearer token")
    func operationIdsAndSecurity() throws {
        let spec = try Self.spec()
        let paths = try #require(spec["paths"] as? [String: Any])
        var ids: [String] = []
        for (path, item) in paths {
            let item = try #require(item as? [String: Any])
            for method in Self.httpMethods {
                guard let operation = item[method] as? [String: Any] else { continue }
                let label = "\(method.uppercased()) \(path)"
                let id = try #require(operation["operationId"] as? String, "\(label) has no operationId")
                ids.append(id)
                let responses = try #require(operation["responses"] as? [String: Any], "\(label) has no responses")
                guard path.hasPrefix("/v1/sessions/") else { continue }
                let security = operation["security"] as? [[String: Any]] ?? []
                #expect(security.contains { $0["bearerAuth"] != nil }, "\(label) does not require bearerAuth")
                #expect(responses["401"] != nil, "\(label) does not document 401 unauthorized")
                #expect(responses["404"] != nil, "\(label) does not document 404 session_not_found")
            }
        }
        #expect(Set(ids).count == ids.count, "duplicate operationIds: \(ids.sorted())")
    }

    @Test("the route table and the spec list the same paths and methods")
    func routeTableIsTheSpec() throws {
        let operations = try Self.operations(try Self.spec())
        var table: [String: Set<String>] = [:]
        for route in StateServerResponder.routeList {
            table[route.template, default: []].formUnion(route.methods)
        }
        #expect(table["/healthz"] != nil, "the route table is empty: \(table)")
        for (template, methods) in table.sorted(by: { $0.key < $1.key }) {
            let listed = try #require(operations[template], "the route table has \(template), which the spec does not list")
            // HEAD is implied by GET in the table; the spec lists it where it documents it.
            #expect(methods.subtracting(["HEAD"]) == listed.subtracting(["HEAD"]), "\(template): table \(methods.sorted()), spec \(listed.sorted())")
        }
        for template in operations.keys.sorted() {
            #expect(table[template] != nil, "the spec lists \(template), which the route table does not have")
        }
    }

    // MARK: Against the built server

    @Test("the spec's paths and methods are exactly the routes the server answers")
    func routesMatchTheServer() async throws {
        let operations = try Self.operations(try Self.spec())
        let server = try await SpecServer.start()
        defer { Task { await server.stop() } }
        let session = try await server.createSession()
        // DELETE /v1/sessions/{id} ends its session: it gets one of its own.
        let doomed = try await server.createSession()
        // DELETE /v1/sessions/{id}/tokens/{tokenId} revokes a token minted for the probe.
        let minted = try await server.send(
            "POST", "/v1/sessions/\(session.id)/tokens", headers: [("Authorization", "Bearer \(session.token)")],
            body: #"{"scope":"observe"}"#)
        let tokenID = try #require(minted.json?["id"] as? String, "mint: \(minted)")

        for (template, listed) in operations.sorted(by: { $0.key < $1.key }) {
            for method in Self.probedMethods {
                let owner = template == "/v1/sessions/{id}" && method == "DELETE" ? doomed : session
                let path = template.replacingOccurrences(of: "{id}", with: owner.id)
                    .replacingOccurrences(of: "{feature}", with: "counter").replacingOccurrences(of: "{tokenId}", with: tokenID)
                #expect(!path.contains("{"), "\(template) has a path parameter this test cannot fill")
                let token = template.hasPrefix("/v1/admin/") ? SpecServer.adminToken : owner.token
                let response = try await server.send(
                    method, path, headers: [("Authorization", "Bearer \(token)")],
                    body: listed.contains(method) ? Self.body(method, template) : nil)
                let label = "\(method) \(template)"
                // HEAD may be left implicit for a GET route: then either answer is fine.
                let implicitHead = method == "HEAD" && listed.contains("GET") && !listed.contains("HEAD")
                if implicitHead {
                    #expect(response.status != 405 || response.header("Allow")?.contains("HEAD") == false, "\(label): \(response)")
                } else if listed.contains(method) {
                    #expect(response.status != 405, "\(label) is in the spec but the server answers 405: \(response)")
                    #expect((200..<300).contains(response.status), "\(label) with a valid request: \(response)")
                } else {
                    #expect(response.status == 405, "\(label) is not in the spec but the server answers: \(response)")
                    guard response.status == 405 else { continue }
                    let allow = response.header("Allow") ?? ""
                    let allowed = Set(allow.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).uppercased() })
                    // HEAD may be left implicit for a GET route.
                    let expected = listed.contains("GET") && !listed.contains("HEAD") && allowed.contains("HEAD")
                        ? listed.union(["HEAD"]) : listed
                    #expect(allowed == expected, "\(label): Allow is '\(allow)', the spec lists \(listed.sorted())")
                    if method != "HEAD" {
                        let code = (response.json?["error"] as? [String: Any])?["code"] as? String
                        #expect(code == "method_not_allowed", "\(label): \(response)")
                    }
                }
            }
        }
    }

    @Test("GET /openapi.json serves the committed document")
    func servedDocumentIsTheFile() async throws {
        let file = try Self.specData()
        let server = try await SpecServer.start()
        defer { Task { await server.stop() } }
        let response = try await server.send("GET", "/openapi.json")
        #expect(response.status == 200)
        #expect(response.header("Content-Type")?.hasPrefix("application/json") == true, "\(response)")
        let served = try JSONSerialization.jsonObject(with: Data(response.body))
        let committed = try JSONSerialization.jsonObject(with: file)
        #expect(
            NSDictionary(dictionary: served as? [String: Any] ?? [:]).isEqual(to: committed as? [String: Any] ?? [:]),
            "GET /openapi.json is not the committed \(Self.specPath): rebuild the server (swift build)")
        #expect(Data(response.body) == file, "GET /openapi.json differs byte for byte from \(Self.specPath)")
    }

    @Test("the spec's ErrorCode lists exactly the codes docs/API.md's table and the server's sources name")
    func errorCodesAgree() throws {
        let spec = try Self.spec()
        let components = try #require(spec["components"] as? [String: Any])
        let schemas = try #require(components["schemas"] as? [String: Any])
        let errorCode = try #require(schemas["ErrorCode"] as? [String: Any], "no ErrorCode schema")
        let inSpec = Set(try #require(errorCode["enum"] as? [String], "ErrorCode has no enum"))

        // docs/API.md's table of errors: rows `| 404 | `session_not_found` | ... |`.
        let api = try String(contentsOf: Repository.url("docs/API.md"), encoding: .utf8)
        var inDocs: Set<String> = []
        for line in api.split(separator: "\n") where line.hasPrefix("| ") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 3, cells[0].count == 3, Int(cells[0]) != nil,
                cells[1].hasPrefix("`"), cells[1].hasSuffix("`"), cells[1].count > 2
            else { continue }
            inDocs.insert(String(cells[1].dropFirst().dropLast()))
        }

        // Every `code: "..."` the server's sources can send.
        var inSources: Set<String> = []
        let sources = Repository.url("Sources")
        let files = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)
        while let file = files?.nextObject() as? URL {
            guard file.pathExtension == "swift" else { continue }
            let text = try String(contentsOf: file, encoding: .utf8)
            var rest = Substring(text)
            while let found = rest.range(of: "code: \"") {
                rest = rest[found.upperBound...]
                guard let end = rest.firstIndex(of: "\"") else { break }
                let code = rest[..<end]
                if !code.isEmpty, code.allSatisfy({ $0 == "_" || ("a"..."z").contains($0) }) {
                    inSources.insert(String(code))
                }
                rest = rest[end...]
            }
        }

        #expect(inDocs.count > 20, "docs/API.md's error table was not found (\(inDocs.count) codes)")
        #expect(inSources.count > 20, "the sources' error codes were not found (\(inSources.count))")
        #expect(inSpec == inDocs, "ErrorCode and docs/API.md differ: only in the spec \(inSpec.subtracting(inDocs).sorted()), only in the docs \(inDocs.subtracting(inSpec).sorted())")
        #expect(inSources.isSubset(of: inSpec), "codes the server sends that ErrorCode lacks: \(inSources.subtracting(inSpec).sorted())")
    }

    /// A valid body for the operations that need one.
    static func body(_ method: String, _ template: String) -> String? {
        switch (method, template) {
        case ("POST", "/v1/sessions/{id}/dispatch"): #"{"feature":"counter","action":{"type":"increment"}}"#
        case ("PUT", "/v1/sessions/{id}/state/{feature}"): #"{"state":{"count":1}}"#
        case ("POST", "/v1/sessions/{id}/state/{feature}/travel"): #"{"version":0}"#
        case ("POST", "/v1/sessions/{id}/tokens"): #"{"scope":"observe","features":["counter"]}"#
        case ("POST", "/v1/recordings"): #"{"format":"stateserver-recording","version":1,"server":"","features":[],"changes":[]}"#
        default: nil
        }
    }
}

// MARK: - A server process and a one-request-per-connection HTTP client

/// The built `state-server` on a free port of 127.0.0.1, with in-memory storage and an admin
/// token: `ServerProcess`, and one `HTTPConnection` per request (`Connection: close`).
private struct SpecServer {
    let process: ServerProcess

    static let adminToken = "spec-admin-token"

    static func start() async throws -> SpecServer {
        // The admin routes answer the admin (the SHA-256 of `adminToken`, in hex).
        let hash = SHA256.hash(adminToken).map { String(format: "%02x", $0) }.joined()
        let process = try await ServerProcess.start(
            arguments: ["--storage", "memory"], environment: ["STATE_SERVER_ADMIN_TOKEN_HASH": hash])
        return SpecServer(process: process)
    }

    func stop() async {
        await process.stop()
    }

    struct Session {
        let id: String
        let token: String
    }

    func createSession() async throws -> Session {
        let response = try await send("POST", "/v1/sessions")
        try #require(response.status == 201, "POST /v1/sessions: \(response)")
        let body = try #require(response.json, "POST /v1/sessions: \(response)")
        return Session(
            id: try #require(body["id"] as? String), token: try #require(body["token"] as? String))
    }

    struct Response: CustomStringConvertible {
        let status: Int
        let headers: [(name: String, value: String)]
        let body: [UInt8]

        func header(_ name: String) -> String? {
            headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
        }

        var json: [String: Any]? {
            (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        }

        var description: String {
            let text = String(decoding: body.prefix(400), as: UTF8.self)
            return "HTTP \(status) \(headers.map { "\($0.name): \($0.value)" }) \(text)"
        }
    }

    /// One request on a new connection (`Connection: close`). An event stream is not read past its
    /// headers.
    func send(_ method: String, _ path: String, headers: [(String, String)] = [], body: String? = nil) async throws -> Response {
        let connection = try await HTTPConnection.open(port: process.port)
        defer { connection.close() }
        var fields: [Header] = [("Connection", "close")] + headers.map { (name: $0.0, value: $0.1) }
        let payload = body.map { Array($0.utf8) } ?? (["POST", "PUT", "PATCH"].contains(method) ? [] : nil)
        if payload != nil { fields.append(("Content-Type", "application/json")) }
        let response = try await connection.request(method, path, headers: fields, body: payload, streamHeadOnly: true)
        return Response(status: response.status, headers: response.headers, body: response.body)
    }
}
