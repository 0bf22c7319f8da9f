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

    @Test("the runtime stage declares a VOLUME, EXPOSE 8080 and a HEALTHCHECK by the binary's own healthcheck")
    func volumePortHealthcheck() throws {
        let runtime = try #require(runtime)
        #expect(!runtime.all("VOLUME").isEmpty, "no VOLUME in the runtime stage")
        let exposed = runtime.all("EXPOSE").flatMap { words($0.arguments) }
        #expect(exposed.contains { $0 == "8080" || $0 == "8080/tcp" }, "EXPOSE: \(exposed)")
        let healthcheck = try #require(runtime.all("HEALTHCHECK").last, "no HEALTHCHECK in the runtime stage")
        let command = try #require(healthcheck.arguments.range(of: "CMD"), "\(healthcheck)")
        // `state-server healthcheck` reads STATE_SERVER_PORT and the config file as the server
        // does (HealthcheckCommandTests runs it), so no port is spelled out here.
        let check = healthcheck.arguments[command.upperBound...]
        #expect(check.contains("/usr/local/bin/state-server") && check.contains("healthcheck"), "\(healthcheck)")
        #expect(!check.contains("curl") && !check.contains("wget"), "\(healthcheck)")
    }

    @Test("the runtime image installs no curl (the health check is the binary's)")
    func noCurl() throws {
        let runtime = try #require(runtime)
        let packages = runtime.all("RUN").filter { $0.arguments.contains("apt-get install") }.flatMap { words($0.arguments) }
        for tool in ["curl", "wget"] {
            #expect(!packages.contains(tool), "the runtime stage installs \(tool): \(packages)")
        }
    }

    @Test("the build stage copies only the manifest and Sources, and strips the binary")
    func buildStageInputs() throws {
        let build = try #require(build)
        let copies = build.all("COPY") + build.all("ADD")
        let sources = copies.flatMap { words($0.arguments).dropLast().filter { !$0.hasPrefix("--") } }
            .map { $0.hasPrefix("./") ? String($0.dropFirst(2)) : $0 }
        try #require(!sources.isEmpty, "the build stage copies nothing")
        // Tests/, docs/ or scripts/ in the build layer would rebuild it on every change to them.
        let allowed: Set<String> = ["Package.swift", "Package.resolved", "Sources"]
        #expect(Set(sources).isSubset(of: allowed), "the build stage copies \(sources)")
        let runs = build.all("RUN").map(\.arguments).joined(separator: "\n")
        #expect(runs.contains("strip /out/state-server"), "the binary is not stripped: \(runs)")
    }

    @Test(".dockerignore keeps builds, caches, data and tests out of the context, and lets in what is copied")
    func dockerignore() throws {
        let ignore = DockerIgnore(try Repository.text(".dockerignore"))
        let kept = [
            ".build", ".build/release/state-server", ".build-release", ".cache", ".cache/venv/bin/python", "data",
            "data/state-server.db", "Tests", "Tests/RepositoryTests/DockerfileTests.swift", ".git", "test-artifacts", "bench",
        ]
        for path in kept {
            #expect(ignore.excludes(path), "\(path) is sent to the Docker build")
        }
        let copied = dockerfile.instructions.filter { $0.keyword == "COPY" || $0.keyword == "ADD" }
            .filter { !$0.arguments.contains("--from=") }
            .flatMap { words($0.arguments).dropLast().filter { !$0.hasPrefix("--") } }
            .map { $0.hasPrefix("./") ? String($0.dropFirst(2)) : $0 }
        try #require(!copied.isEmpty)
        for path in copied + ["Sources/StateServer/StateServerCommand.swift", "Sources/state-server/main.swift"] {
            #expect(!ignore.excludes(path), "\(path) is copied by the Dockerfile but .dockerignore excludes it")
        }
    }

    @Test("the build command equals the Makefile's RELEASE_BUILD word for word, in a cleared environment")
    func buildCommandMatchesMakefile() throws {
        let makefile = try Repository.text("Makefile")
        let line = try #require(
            makefile.split(separator: "\n").first { $0.hasPrefix("RELEASE_BUILD") },
            "the Makefile has no RELEASE_BUILD line")
        let separator = try #require(line.firstIndex(of: "="), "RELEASE_BUILD has no value: \(line)")
        // `$$` in a Makefile is the shell's `$`.
        let releaseBuild = words(line[line.index(after: separator)...].replacingOccurrences(of: "$$", with: "$"))
        try #require(!releaseBuild.isEmpty)
        // `env -i NAME=VALUE ... swift build`: the same environment for every build, so that
        // SwiftPM does not re-plan (and recompile) because a variable changed.
        #expect(releaseBuild.starts(with: ["env", "-i"]), "RELEASE_BUILD is \(releaseBuild)")
        #expect(Self.command(releaseBuild).starts(with: ["swift", "build"]), "RELEASE_BUILD is \(releaseBuild)")

        let build = try #require(build)
        // Every command run by a RUN of the build stage, split at && and ;.
        let commands = build.all("RUN").flatMap { run in
            run.arguments.components(separatedBy: "&&").flatMap { $0.components(separatedBy: ";") }.map { words($0) }
        }
        let swiftBuilds = commands.filter { Self.command($0).starts(with: ["swift", "build"]) }
        try #require(!swiftBuilds.isEmpty, "the build stage runs no 'swift build'")
        #expect(swiftBuilds.contains(releaseBuild), "Dockerfile: \(swiftBuilds); Makefile RELEASE_BUILD: \(releaseBuild)")
        // And `make release` really runs that line.
        #expect(makefile.contains("\t$(RELEASE_BUILD)"), "no recipe runs $(RELEASE_BUILD)")
    }

    /// The command's words without a leading `env [-i] NAME=VALUE...`.
    static func command(_ words: [String]) -> ArraySlice<String> {
        var rest = words[...]
        guard rest.first == "env" else { return rest }
        rest = rest.dropFirst()
        while let word = rest.first, word.hasPrefix("-") || word.contains("=") { rest = rest.dropFirst() }
        return rest
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
