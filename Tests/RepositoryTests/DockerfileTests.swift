import Foundation
import Testing

/// The Dockerfile's shape, checked without a Docker engine.
@Suite("Dockerfile")
struct DockerfileTests {
    let dockerfile: Dockerfile

    init() throws {
        dockerfile = Dockerfile(try Repository.text("Dockerfile"))
    }

    var build: Dockerfile.Stage? { dockerfile.stages.first }
    var runtime: Dockerfile.Stage? { dockerfile.stages.count >= 2 ? dockerfile.stages.last : nil }

    @Test("has a build stage FROM a swift image and a runtime stage FROM debian:*-slim")
    func stages() throws {
        let stages = dockerfile.stages
        try #require(stages.count >= 2, "expected a multi-stage build, found \(stages.count) stage(s)")
        let build = try #require(build)
        let runtime = try #require(runtime)
        let buildImage = build.image.split(separator: "/").last.map(String.init) ?? ""
        #expect(buildImage.hasPrefix("swift:"), "build stage image is \(build.image)")
        let runtimeImage = runtime.image
        #expect(
            runtimeImage.hasPrefix("debian:") && runtimeImage.hasSuffix("-slim"),
            "runtime stage image is \(runtimeImage)")
    }

    @Test("the runtime stage copies the binary from the build stage and installs libmicrohttpd12")
    func runtimePackages() throws {
        let build = try #require(build)
        let runtime = try #require(runtime)
        let copies = runtime.all("COPY").map(\.arguments)
        let fromBuild = "--from=\(build.name ?? "0")"
        #expect(copies.contains { $0.hasPrefix(fromBuild) }, "no COPY \(fromBuild) in the runtime stage: \(copies)")
        let installs = runtime.all("RUN").filter { $0.arguments.contains("apt-get install") }
        let packages = installs.flatMap { words($0.arguments) }
        #expect(packages.contains("libmicrohttpd12"), "runtime stage installs: \(installs)")
        // Only runtime libraries: no compilers or -dev packages in the final image.
        let dev = packages.filter { $0.hasSuffix("-dev") }
        #expect(dev.isEmpty, "the runtime stage installs development packages: \(dev)")
    }

    @Test("the runtime stage creates a non-root user and switches to it")
    func nonRootUser() throws {
        let runtime = try #require(runtime)
        let users = runtime.all("USER")
        let user = try #require(users.last, "the runtime stage has no USER instruction").arguments
        let name = String(user.split(separator: ":").first ?? "")
        #expect(!["root", "0", ""].contains(name), "USER is \(user)")
        let runs = runtime.all("RUN").map(\.arguments).joined(separator: "\n")
        let creates = ["useradd", "adduser"].contains { tool in
            runs.contains(tool) && runs.contains(name)
        }
        #expect(creates, "the runtime stage does not create the user '\(name)' (useradd/adduser)")
        // The user is switched to before the process starts.
        let instructions = runtime.instructions.map(\.keyword)
        if let userIndex = instructions.lastIndex(of: "USER"), let entry = instructions.lastIndex(where: { $0 == "ENTRYPOINT" || $0 == "CMD" }) {
            #expect(userIndex < entry, "USER comes after the ENTRYPOINT/CMD")
        }
    }

    @Test("the runtime stage declares a VOLUME, EXPOSE 8080 and a HEALTHCHECK on /healthz")
    func volumePortHealthcheck() throws {
        let runtime = try #require(runtime)
        #expect(!runtime.all("VOLUME").isEmpty, "no VOLUME in the runtime stage")
        let exposed = runtime.all("EXPOSE").flatMap { words($0.arguments) }
        #expect(exposed.contains { $0 == "8080" || $0 == "8080/tcp" }, "EXPOSE: \(exposed)")
        let healthcheck = try #require(runtime.all("HEALTHCHECK").last, "no HEALTHCHECK in the runtime stage")
        #expect(healthcheck.arguments.contains("CMD"), "\(healthcheck)")
        #expect(healthcheck.arguments.contains("/healthz"), "\(healthcheck)")
        // The port the server listens on: STATE_SERVER_PORT when set, else the exposed 8080.
        #expect(
            healthcheck.arguments.contains("${STATE_SERVER_PORT:-8080}/"),
            "the health check does not follow the server's port: \(healthcheck)")
    }

    @Test("the build command equals the Makefile's RELEASE_BUILD word for word")
    func buildCommandMatchesMakefile() throws {
        let makefile = try Repository.text("Makefile")
        let line = try #require(
            makefile.split(separator: "\n").first { $0.hasPrefix("RELEASE_BUILD") },
            "the Makefile has no RELEASE_BUILD line")
        let separator = try #require(line.firstIndex(of: "="), "RELEASE_BUILD has no value: \(line)")
        let releaseBuild = words(line[line.index(after: separator)...])
        try #require(!releaseBuild.isEmpty)
        #expect(releaseBuild.starts(with: ["swift", "build"]), "RELEASE_BUILD is \(releaseBuild)")

        let build = try #require(build)
        // Every command run by a RUN of the build stage, split at && and ;.
        let commands = build.all("RUN").flatMap { run in
            run.arguments.components(separatedBy: "&&").flatMap { $0.components(separatedBy: ";") }.map { words($0) }
        }
        let swiftBuilds = commands.filter { $0.starts(with: ["swift", "build"]) }
        try #require(!swiftBuilds.isEmpty, "the build stage runs no 'swift build'")
        #expect(swiftBuilds.contains(releaseBuild), "Dockerfile: \(swiftBuilds); Makefile RELEASE_BUILD: \(releaseBuild)")
        // And `make release` really runs that line.
        #expect(makefile.contains("\t$(RELEASE_BUILD)"), "no recipe runs $(RELEASE_BUILD)")
    }

    @Test("the runtime stage copies the committed config/state-server.yaml")
    func copiesConfig() throws {
        let runtime = try #require(runtime)
        let copies = runtime.instructions.filter { $0.keyword == "COPY" || $0.keyword == "ADD" }
        let sources = copies.flatMap { words($0.arguments).dropLast().filter { !$0.hasPrefix("--") } }
        #expect(
            sources.contains { $0 == "config/state-server.yaml" || $0 == "./config/state-server.yaml" },
            "no COPY of config/state-server.yaml: \(copies)")
    }
}
