import TestSupport
import Testing

@Suite("Health and discovery", .inProcessServer())
struct HealthAndDiscoveryTests {
    @Test("GET /healthz answers 200 {\"status\":\"ok\"} as JSON")
    func healthz() async throws {
        let api = try SharedServer.api()
        let response = try await api.request("GET", "/healthz")
        #expect(response.status == 200)
        #expect(response.json == ["status": "ok"])
        #expect(response.header("Content-Type")?.lowercased().hasPrefix("application/json") == true, "\(response)")
    }

    @Test("GET /v1/features lists the four example features with their initial states")
    func features() async throws {
        let api = try SharedServer.api()
        let response = try await api.request("GET", "/v1/features")
        #expect(response.status == 200)
        let features = try #require(response.json?["features"]?.array, "\(response)")
        var byName: [String: JSON] = [:]
        for feature in features {
            let name = try #require(feature["name"]?.string, "feature without name: \(feature)")
            #expect(byName[name] == nil, "\(name) listed twice")
            let initialState = try #require(feature["initialState"], "\(name) without initialState")
            byName[name] = initialState
        }
        #expect(Set(byName.keys) == Examples.names)
        #expect(byName["counter"] == Examples.counter)
        #expect(byName["settings"] == Examples.settings)
        #expect(byName["login"] == Examples.login)
        #expect(byName["todos"]?["items"] == [])
    }
}

/// Health and discovery: what only a real connection shows (HEAD framing, keep-alive).
extension SocketContractTests {
    @Test("HEAD works on the GET JSON routes and sends no body", arguments: ["/healthz", "/v1/features"])
    func head(path: String) async throws {
        let api = try SharedServer.api()
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        let head = try await connection.request("HEAD", path)
        #expect(head.status == 200, "\(head)")
        // A body sent after HEAD would corrupt the next response on the keep-alive connection.
        let get = try await connection.request("GET", path)
        #expect(get.status == 200, "\(get)")
        #expect(get.json != nil, "\(get)")
        if let length = head.header("Content-Length"), let getLength = get.header("Content-Length") {
            #expect(length == getLength)
        }
    }

    @Test("keep-alive: many requests on one connection")
    func keepAlive() async throws {
        let api = try SharedServer.api()
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        let session = try await api.createSession()
        for index in 1...10 {
            let target = index.isMultiple(of: 2) ? "/healthz" : session.path + "/state/counter"
            let response = try await connection.request("GET", target, headers: session.auth)
            #expect(response.status == 200, "request \(index): \(response)")
        }
        let post = try await connection.request(
            "POST", session.path + "/dispatch", headers: session.auth,
            body: JSON.object(["feature": "counter", "action": ["type": "increment"]]).bytes)
        #expect(post.json?["version"] == 1, "\(post)")
        let after = try await connection.request("GET", "/healthz")
        #expect(after.status == 200)
    }
}
