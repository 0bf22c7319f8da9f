import Foundation
import TestSupport
import Testing

/// deploy/compose.yaml and deploy/kubernetes/, checked without a Docker engine or a cluster:
/// they parse, and what they name exists (the Dockerfile, the nginx configuration, the
/// environment variables the server reads, the probe routes, the image's user and port).
@Suite("Deployment files")
struct DeploymentFilesTests {
    /// Every `STATE_SERVER_*` variable the binary says it reads (`state-server --help`).
    static func serverEnvironmentNames() async throws -> Set<String> {
        let binary = try #require(ServerBinary.locate(), "state-server binary not found (swift build)")
        let help = try await runCommand(binary, ["--help"])
        try #require(help.status == 0, "state-server --help: \(help)")
        let names = help.stdout.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "_") })
            .filter { $0.hasPrefix("STATE_SERVER_") }.map(String.init)
        return Set(names)
    }

    @Test("the server reads the variables the deployment sets")
    func knownVariables() async throws {
        let names = try await Self.serverEnvironmentNames()
        for required in ["STATE_SERVER_STORAGE", "STATE_SERVER_PORT", "STATE_SERVER_HOST", "STATE_SERVER_CONFIG"] {
            #expect(names.contains(required), "state-server --help does not list \(required): \(names.sorted())")
        }
    }

    // MARK: compose

    @Test("compose.yaml: three nodes built from the Dockerfile, on PostgreSQL, ready by /readyz")
    func composeNodes() async throws {
        let compose = try #require(try Repository.yamlDocuments("deploy/compose.yaml").first)
        let services = try #require(compose.map("services"), "no services")
        let nodes = services.filter { ($0.value as? [String: Any])?["build"] != nil }
        #expect(nodes.count == 3, "services built from the repository: \(nodes.keys.sorted())")
        let known = try await Self.serverEnvironmentNames()
        for (name, value) in nodes {
            let node = try #require(value as? [String: Any])
            let build = try #require(node.map("build"), "\(name): build is not a mapping")
            let context = try #require(build.string("context"))
            let dockerfile = build.string("dockerfile") ?? "Dockerfile"
            let path = Repository.url("deploy").appendingPathComponent(context).appendingPathComponent(dockerfile).standardized.path
            #expect(path == Repository.url("Dockerfile").standardized.path && Repository.exists("Dockerfile"), "\(name) builds \(path)")

            let environment = try #require(node.map("environment"), "\(name): environment is not a mapping")
            for key in environment.keys where key.hasPrefix("STATE_SERVER_") {
                #expect(known.contains(key), "\(name) sets \(key), which the server does not read")
            }
            let storage = try #require(environment.string("STATE_SERVER_STORAGE"), "\(name): no STATE_SERVER_STORAGE")
            #expect(storage.hasPrefix("postgres://"), "\(name): storage \(storage)")
            #expect(storage.contains("@postgres:5432/"), "\(name): the database host is not the postgres service: \(storage)")
            // The password is a reference to deploy/.env, never a literal.
            #expect(storage.contains(":${POSTGRES_PASSWORD"), "\(name): the password is not taken from the environment: \(storage)")
            // cluster.secret (required on PostgreSQL), from deploy/.env too: compose refuses to
            // start without it.
            let secret = environment.string("STATE_SERVER_CLUSTER_SECRET") ?? "-"
            #expect(secret.hasPrefix("${CLUSTER_SECRET:?"), "\(name): cluster.secret is not taken from deploy/.env: \(secret)")
            #expect(environment.string("STATE_SERVER_HOST") == "0.0.0.0", "\(name) listens on \(environment.string("STATE_SERVER_HOST") ?? "-")")
            #expect(environment.string("STATE_SERVER_PORT") == "8080", "\(name) port \(environment.string("STATE_SERVER_PORT") ?? "-")")
            // cluster.advertiseUrl: the address the other nodes reach this one by, its service name.
            #expect(environment.string("STATE_SERVER_CLUSTER_ADVERTISE_URL") == "http://\(name):8080",
                    "\(name) advertises \(environment.string("STATE_SERVER_CLUSTER_ADVERTISE_URL") ?? "-")")

            let condition = node.map("depends_on")?.map("postgres")?.string("condition")
            #expect(condition == "service_healthy", "\(name) does not wait for a healthy postgres")
            let check = (node.map("healthcheck")?.list("test") ?? []).compactMap { $0 as? String }.joined(separator: " ")
            #expect(check.contains("/readyz"), "\(name) healthcheck: \(check)")
            // The image's own check (HealthcheckCommandTests): the runtime image has no curl.
            #expect(check.contains("state-server healthcheck"), "\(name) healthcheck: \(check)")
        }
    }

    @Test("compose.yaml: PostgreSQL 15 with a named volume and a health check; nginx publishes 8080")
    func composePostgresAndNginx() async throws {
        let compose = try #require(try Repository.yamlDocuments("deploy/compose.yaml").first)
        let services = try #require(compose.map("services"))
        let postgres = try #require(services.map("postgres"), "no postgres service")
        #expect(postgres.string("image")?.hasPrefix("postgres:15") == true, "postgres image: \(postgres.string("image") ?? "-")")
        let volumes = (postgres.list("volumes") ?? []).compactMap { $0 as? String }
        let dataVolume = volumes.first { $0.hasSuffix(":/var/lib/postgresql/data") }?.split(separator: ":").first.map(String.init)
        let declared = compose.map("volumes")?.keys.map { $0 } ?? []
        #expect(dataVolume.map { declared.contains($0) } == true, "postgres data volume \(dataVolume ?? "-") not among \(declared)")
        let check = (postgres.map("healthcheck")?.list("test") ?? []).compactMap { $0 as? String }.joined(separator: " ")
        #expect(check.contains("pg_isready"), "postgres healthcheck: \(check)")
        let environment = try #require(postgres.map("environment"))
        let node = try #require(services.map("node1")?.map("environment")?.string("STATE_SERVER_STORAGE"))
        let user = try #require(environment.string("POSTGRES_USER"))
        let database = try #require(environment.string("POSTGRES_DB"))
        #expect(node.hasPrefix("postgres://\(user):") && node.hasSuffix("/\(database)"), "\(node) vs user \(user), db \(database)")
        #expect(environment.string("POSTGRES_PASSWORD")?.hasPrefix("${POSTGRES_PASSWORD") == true, "postgres password is a literal")

        let nginx = try #require(services.map("nginx"), "no nginx service")
        let ports = (nginx.list("ports") ?? []).compactMap { $0 as? String }
        #expect(ports.contains("8080:8080"), "nginx ports: \(ports)")
        let mounts = (nginx.list("volumes") ?? []).compactMap { $0 as? String }
        let config = try #require(mounts.first { $0.contains("/etc/nginx/conf.d/") }, "nginx mounts no configuration: \(mounts)")
        let source = String(config.split(separator: ":").first ?? "")
        let sourcePath = Repository.url("deploy").appendingPathComponent(source).standardized.path
        #expect(
            sourcePath == Repository.url("deploy/nginx/stateserver.conf").standardized.path && Repository.exists("deploy/nginx/stateserver.conf"),
            "nginx mounts \(sourcePath)")
        // nginx's upstream servers are exactly the node services, on the nodes' port.
        let upstreams = try Repository.text("deploy/nginx/stateserver.conf").split(separator: "\n")
            .compactMap { line -> String? in
                let words = line.split(separator: " ")
                // Upstream "server HOST:PORT ...;" lines, not "server {" blocks.
                return words.first == "server" && words.count > 1 && line.hasSuffix(";") ? String(words[1]) : nil
            }
        let nodes = services.filter { ($0.value as? [String: Any])?["build"] != nil }.keys.sorted()
        #expect(upstreams.sorted() == nodes.map { "\($0):8080" }, "nginx upstreams \(upstreams) vs nodes \(nodes)")
        let waits = nginx.map("depends_on") ?? [:]
        for node in nodes {
            #expect(waits.map(node)?.string("condition") == "service_healthy", "nginx does not wait for \(node)")
        }
    }

    @Test("no real password is committed: .env.example holds a placeholder, deploy/.env is ignored")
    func noPassword() throws {
        let example = try Repository.text("deploy/.env.example")
        #expect(example.contains("POSTGRES_PASSWORD=change-me"), "deploy/.env.example: \(example)")
        // The cluster secret's placeholder is too short for the server (at least 32 characters):
        // a copy left as it is refuses to start rather than run with a known secret.
        let secret = example.split(separator: "\n").first { $0.hasPrefix("CLUSTER_SECRET=") }?.dropFirst("CLUSTER_SECRET=".count)
        #expect(secret.map { !$0.isEmpty && $0.count < 32 } == true, "deploy/.env.example: CLUSTER_SECRET=\(secret ?? "-")")
        let ignored = try Repository.text(".gitignore").split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(ignored.contains("/deploy/.env") || ignored.contains("deploy/.env"), ".gitignore does not ignore deploy/.env")
    }

    // MARK: Kubernetes

    static let kubernetesFiles = ["deployment.yaml", "service.yaml", "pdb.yaml", "ingress.yaml", "secret.example.yaml", "kustomization.yaml"]

    static func kubernetes(_ file: String) throws -> [String: Any] {
        try #require(try Repository.yamlDocuments("deploy/kubernetes/\(file)").first, "\(file) is empty")
    }

    @Test("every Kubernetes file parses and names its kind", arguments: kubernetesFiles)
    func kubernetesParses(file: String) throws {
        let documents = try Repository.yamlDocuments("deploy/kubernetes/\(file)")
        try #require(!documents.isEmpty, "\(file) has no document")
        for document in documents {
            #expect(document.string("apiVersion") != nil && document.string("kind") != nil, "\(file): \(document.keys.sorted())")
            if document.string("kind") != "Kustomization" {
                #expect(document.map("metadata")?.string("name") != nil, "\(file): no metadata.name")
            }
        }
    }

    @Test("no other files in deploy/kubernetes than the ones checked")
    func kubernetesFileList() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Repository.url("deploy/kubernetes").path)
            .filter { $0.hasSuffix(".yaml") || $0.hasSuffix(".yml") }
        #expect(Set(files) == Set(Self.kubernetesFiles), "deploy/kubernetes has \(files.sorted())")
    }

    @Test("Deployment: 3 replicas, probes on /readyz and /healthz, preStop, non-root uid of the Dockerfile, database URL from the Secret")
    func deployment() async throws {
        let deployment = try Self.kubernetes("deployment.yaml")
        #expect(deployment.string("kind") == "Deployment")
        let spec = try #require(deployment.map("spec"))
        #expect(spec["replicas"] as? Int == 3, "replicas: \(spec["replicas"] ?? "-")")
        let podLabels = try #require(spec.map("template")?.map("metadata")?.map("labels"))
        let selector = try #require(spec.map("selector")?.map("matchLabels"))
        #expect(selector.allSatisfy { podLabels.string($0.key) == $0.value as? String }, "selector \(selector) vs labels \(podLabels)")
        let pod = try #require(spec.map("template")?.map("spec"))
        let container = try #require(pod.list("containers")?.first as? [String: Any])

        let readiness = container.map("readinessProbe")?.map("httpGet")
        let liveness = container.map("livenessProbe")?.map("httpGet")
        #expect(readiness?.string("path") == "/readyz", "readinessProbe: \(String(describing: readiness))")
        #expect(liveness?.string("path") == "/healthz", "livenessProbe: \(String(describing: liveness))")

        // The port the probes and the Service use is the one the server listens on.
        let ports = (container.list("ports") ?? []).compactMap { $0 as? [String: Any] }
        let http = try #require(ports.first, "no container port")
        #expect(http["containerPort"] as? Int == 8080)
        for probe in [readiness, liveness] {
            let port = probe?.string("port")
            #expect(port == http.string("name") || port == "8080", "probe port \(port ?? "-")")
        }
        let environment = (container.list("env") ?? []).compactMap { $0 as? [String: Any] }
        let known = try await Self.serverEnvironmentNames()
        var values: [String: [String: Any]] = [:]
        for variable in environment {
            let name = try #require(variable.string("name"))
            values[name] = variable
            if name.hasPrefix("STATE_SERVER_") { #expect(known.contains(name), "the Deployment sets \(name), which the server does not read") }
        }
        #expect(values["STATE_SERVER_PORT"]?.string("value") == "8080")
        #expect(values["STATE_SERVER_HOST"]?.string("value") == "0.0.0.0")
        // cluster.advertiseUrl from the pod's own IP (downward API), defined before its use.
        #expect(values["POD_IP"]?.map("valueFrom")?.map("fieldRef")?.string("fieldPath") == "status.podIP", "POD_IP: \(values["POD_IP"] ?? [:])")
        #expect(values["STATE_SERVER_CLUSTER_ADVERTISE_URL"]?.string("value") == "http://$(POD_IP):8080",
                "STATE_SERVER_CLUSTER_ADVERTISE_URL: \(values["STATE_SERVER_CLUSTER_ADVERTISE_URL"] ?? [:])")
        let names = environment.compactMap { $0.string("name") }
        #expect((names.firstIndex(of: "POD_IP") ?? .max) < (names.firstIndex(of: "STATE_SERVER_CLUSTER_ADVERTISE_URL") ?? -1), "order: \(names)")
        let secretRef = try #require(values["STATE_SERVER_STORAGE"]?.map("valueFrom")?.map("secretKeyRef"), "STATE_SERVER_STORAGE does not come from a Secret")
        let secret = try Self.kubernetes("secret.example.yaml")
        #expect(secretRef.string("name") == secret.map("metadata")?.string("name"), "secretKeyRef \(secretRef)")
        let secretURL = secret.map("stringData")?.string(secretRef.string("key") ?? "")
        #expect(secretURL?.hasPrefix("postgres://") == true, "the Secret example's \(secretRef.string("key") ?? "-"): \(secretURL ?? "-")")
        // cluster.secret from the same Secret, whose example holds a placeholder the server refuses.
        let clusterRef = try #require(
            values["STATE_SERVER_CLUSTER_SECRET"]?.map("valueFrom")?.map("secretKeyRef"), "STATE_SERVER_CLUSTER_SECRET does not come from a Secret")
        #expect(clusterRef.string("name") == secret.map("metadata")?.string("name"), "secretKeyRef \(clusterRef)")
        let clusterSecret = secret.map("stringData")?.string(clusterRef.string("key") ?? "")
        #expect(clusterSecret.map { !$0.isEmpty && $0.count < 32 } == true, "the Secret example's \(clusterRef.string("key") ?? "-"): \(clusterSecret ?? "-")")

        // Non-root, as the Dockerfile's user.
        let dockerfile = try Repository.text("Dockerfile")
        #expect(dockerfile.contains("--uid 10001"), "the Dockerfile's user is no longer uid 10001")
        let podSecurity = try #require(pod.map("securityContext"))
        #expect(podSecurity["runAsNonRoot"] as? Bool == true)
        #expect(podSecurity["runAsUser"] as? Int == 10001, "runAsUser: \(podSecurity["runAsUser"] ?? "-")")
        #expect(container.map("securityContext")?["allowPrivilegeEscalation"] as? Bool == false)

        // preStop waits before SIGTERM; the grace period covers that wait plus the server's drain.
        let preStop = (container.map("lifecycle")?.map("preStop")?.map("exec")?.list("command") ?? []).compactMap { $0 as? String }
        let wait = try #require(preStop.count == 2 && preStop[0] == "sleep" ? Int(preStop[1]) : nil, "preStop: \(preStop)")
        let grace = try #require(pod["terminationGracePeriodSeconds"] as? Int)
        #expect(wait >= 1 && grace >= wait + 10, "preStop sleep \(wait) s, grace \(grace) s")
    }

    @Test("Service and PodDisruptionBudget select the Deployment's pods; minAvailable 2 of 3")
    func serviceAndBudget() throws {
        let deployment = try Self.kubernetes("deployment.yaml")
        let podLabels = try #require(deployment.map("spec")?.map("template")?.map("metadata")?.map("labels"))
        func selects(_ selector: [String: Any]?) -> Bool {
            guard let selector, !selector.isEmpty else { return false }
            return selector.allSatisfy { podLabels.string($0.key) == $0.value as? String }
        }
        let service = try Self.kubernetes("service.yaml")
        #expect(service.string("kind") == "Service")
        #expect(selects(service.map("spec")?.map("selector")), "Service selector")
        let servicePort = (service.map("spec")?.list("ports")?.first as? [String: Any])?.string("targetPort")
        #expect(servicePort == "http" || servicePort == "8080", "Service targetPort \(servicePort ?? "-")")
        #expect(service.map("spec")?.string("sessionAffinity") == nil, "no affinity is needed: any node serves any session")

        let budget = try Self.kubernetes("pdb.yaml")
        #expect(budget.string("kind") == "PodDisruptionBudget")
        #expect(budget.map("spec")?["minAvailable"] as? Int == 2)
        #expect(selects(budget.map("spec")?.map("selector")?.map("matchLabels")), "PodDisruptionBudget selector")
    }

    @Test("Ingress: session routes hashed by the session id of the path (a named capture), the rest round robin, no snippets")
    func ingress() throws {
        let documents = try Repository.yamlDocuments("deploy/kubernetes/ingress.yaml")
        let deployment = try Self.kubernetes("deployment.yaml")
        let podLabels = try #require(deployment.map("spec")?.map("template")?.map("metadata")?.map("labels"))
        var services = (try Repository.yamlDocuments("deploy/kubernetes/service.yaml")).filter { $0.string("kind") == "Service" }
        services += documents.filter { $0.string("kind") == "Service" }
        var ingresses = documents.filter { $0.string("kind") == "Ingress" }
        try #require(ingresses.count == 3, "Ingresses: \(ingresses.count)")
        // /metrics and the admin routes: an Ingress of their own that allows no client (issue 25
        // item 3: off the public listener), on the catch-all's Service.
        let internalIngress = try #require(
            ingresses.first { $0.map("metadata")?.map("annotations")?.string("nginx.ingress.kubernetes.io/whitelist-source-range") != nil },
            "no Ingress keeps /metrics and /v1/admin off the public")
        ingresses.removeAll { $0.map("metadata")?.string("name") == internalIngress.map("metadata")?.string("name") }
        let allowed = internalIngress.map("metadata")?.map("annotations")?.string("nginx.ingress.kubernetes.io/whitelist-source-range")
        #expect(allowed == "127.0.0.1/32", "the internal Ingress allows \(allowed ?? "-")")
        let internalPaths = (internalIngress.map("spec")?.list("rules") ?? []).compactMap { $0 as? [String: Any] }
            .flatMap { ($0.map("http")?.list("paths") ?? []).compactMap { $0 as? [String: Any] } }
            .map { "\($0.string("pathType") ?? "-") \($0.string("path") ?? "-") \($0.map("backend")?.map("service")?.string("name") ?? "-")" }
        #expect(internalPaths.sorted() == ["Exact /metrics state-server", "Prefix /v1/admin state-server"], "\(internalPaths)")
        var backends: [String: String] = [:]  // Ingress name -> its Service
        for ingress in ingresses {
            let name = try #require(ingress.map("metadata")?.string("name"))
            let annotations = ingress.map("metadata")?.map("annotations") ?? [:]
            // The pods cannot count clients' connections behind the controller: it does.
            #expect(Int(annotations.string("nginx.ingress.kubernetes.io/limit-connections") ?? "") ?? 0 > 0, "\(name): limit-connections")
            // Snippets are off by default in ingress-nginx (and a risk): none is needed.
            #expect(!annotations.keys.contains { $0.contains("snippet") }, "\(name): \(annotations.keys.sorted())")
            #expect(!annotations.values.contains { "\($0)".contains("non_idempotent") }, "\(name): a POST must never be re-sent")
            #expect(ingress.map("spec")?.string("ingressClassName") == "nginx", "\(name): ingressClassName")
            let rules = (ingress.map("spec")?.list("rules") ?? []).compactMap { $0 as? [String: Any] }
            let paths = rules.flatMap { ($0.map("http")?.list("paths") ?? []).compactMap { $0 as? [String: Any] } }
            try #require(paths.count == 1, "\(name): paths \(paths)")
            let path = try #require(paths[0].string("path"))
            let service = try #require(paths[0].map("backend")?.map("service")?.string("name"))
            backends[name] = service
            let target = try #require(services.first { $0.map("metadata")?.string("name") == service }, "\(name): no Service \(service)")
            let selector = target.map("spec")?.map("selector") ?? [:]
            #expect(!selector.isEmpty && selector.allSatisfy { podLabels.string($0.key) == $0.value as? String }, "Service \(service) selector")
            if let hashBy = annotations.string("nginx.ingress.kubernetes.io/upstream-hash-by") {
                // The key is the session id alone: a named group of the path, not the path
                // itself ($uri and $request_uri include the action, $request_uri the token).
                #expect(hashBy == "$stateserver_session", "\(name): upstream-hash-by \(hashBy)")
                #expect(path == "/v1/sessions/(?P<stateserver_session>[^/]+)", "\(name): path \(path)")
                #expect(paths[0].string("pathType") == "ImplementationSpecific", "\(name): a regex path must be ImplementationSpecific")
                #expect(annotations.string("nginx.ingress.kubernetes.io/use-regex") == "true", "\(name): use-regex")
                #expect(annotations.string("nginx.ingress.kubernetes.io/proxy-buffering") == "off", "\(name): event streams need proxy-buffering off")
                let timeout = Int(annotations.string("nginx.ingress.kubernetes.io/proxy-read-timeout") ?? "") ?? 0
                #expect(timeout >= 600, "\(name): proxy-read-timeout \(timeout)")
            } else {
                #expect(path == "/", "\(name): the round-robin Ingress is the catch-all: \(path)")
            }
        }
        // ingress-nginx keeps one balancing setting per Service: the two must not share one.
        #expect(Set(backends.values).count == 2, "Ingress backends: \(backends)")
    }

    @Test("the Secret is an example with a placeholder password, and kustomize never applies it")
    func secretExample() throws {
        let text = try Repository.text("deploy/kubernetes/secret.example.yaml")
        #expect(text.contains("CHANGE-ME"), "the example should carry an obvious placeholder")
        let kustomization = try Self.kubernetes("kustomization.yaml")
        let resources = (kustomization.list("resources") ?? []).compactMap { $0 as? String }
        #expect(!resources.contains("secret.example.yaml"), "kustomization applies the example Secret")
        for resource in resources {
            #expect(Repository.exists("deploy/kubernetes/\(resource)"), "kustomization names a missing \(resource)")
        }
        #expect(Set(resources) == ["deployment.yaml", "service.yaml", "pdb.yaml", "ingress.yaml"], "resources: \(resources)")
    }

    @Test("the deploy files' abuse limits, trusted proxies and CORS settings are ones the server accepts, and every limit is set")
    func deployLimitsAccepted() async throws {
        let compose = try #require(try Repository.yamlDocuments("deploy/compose.yaml").first)
        let node = try #require(compose.map("services")?.map("node1")?.map("environment"))
        let deployment = try Self.kubernetes("deployment.yaml")
        let container = try #require(
            (deployment.map("spec")?.map("template")?.map("spec")?.list("containers")?.first as? [String: Any]))
        var kubernetes: [String: String] = [:]
        for entry in (container.list("env") ?? []).compactMap({ $0 as? [String: Any] }) {
            if let name = entry.string("name"), let value = entry.string("value") { kubernetes[name] = value }
        }
        let keys = ["STATE_SERVER_HTTP_TRUSTED_PROXIES", "STATE_SERVER_LIMITS_REQUESTS_PER_SECOND", "STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE",
                    "STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND", "STATE_SERVER_LIMITS_CONNECTIONS_PER_ADDRESS", "STATE_SERVER_CORS_ALLOWED_ORIGINS"]
        let binary = try #require(ServerBinary.locate())
        for (file, values) in [("compose.yaml", keys.reduce(into: [String: String]()) { $0[$1] = node.string($1) }), ("deployment.yaml", kubernetes)] {
            var environment: [String: String] = [:]
            for key in keys {
                let value = try #require(values[key], "\(file) does not set \(key)")
                environment[key] = value
            }
            #expect(!(environment["STATE_SERVER_HTTP_TRUSTED_PROXIES"] ?? "").isEmpty, "\(file): behind a proxy, it must be trusted")
            let (process, output) = try ServerProcess.launch(binary, arguments: ["--print-config"], environment: environment)
            let ended = try await eventually(timeout: .seconds(30)) { !process.isRunning && output.allClosed }
            #expect(ended && process.terminationStatus == 0, "\(file): \(output.stderrText)")
            let printed = try JSONSerialization.jsonObject(with: Data(output.stdoutText.utf8)) as? [String: Any] ?? [:]
            #expect(printed["limits.requestsPerSecond"] as? Int == Int(environment["STATE_SERVER_LIMITS_REQUESTS_PER_SECOND"] ?? ""), "\(file): \(printed)")
        }
    }

    @Test("the probe routes answer on the real server")
    func probeRoutes() async throws {
        try await withServer(arguments: ["--storage", "memory"]) { server in
            let health = try await server.api.request("GET", "/healthz")
            #expect(health.status == 200, "/healthz: \(health)")
            let ready = try await server.api.request("GET", "/readyz")
            #expect(ready.status == 200, "/readyz: \(ready)")
        }
    }
}
