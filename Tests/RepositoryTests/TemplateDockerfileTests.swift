import Foundation
import Testing

/// Examples/CartServer's Dockerfile, checked without a Docker engine: built like the project's
/// own image (the same images, the same release build with the package's product), from a
/// context that holds what it copies and nothing else.
@Suite("Examples/CartServer's Dockerfile")
struct TemplateDockerfileTests {
    static let path = "Examples/CartServer/Dockerfile"
    let template: Dockerfile
    let own: Dockerfile

    init() throws {
        template = Dockerfile(try Repository.text(Self.path))
        own = Dockerfile(try Repository.text("Dockerfile"))
    }

    @Test("its stages start from the same images as the project's Dockerfile")
    func sameImages() throws {
        try #require(template.stages.count == 2, "\(template.stages.count) stages")
        #expect(template.stages.map(\.image) == own.stages.map(\.image))
    }

    @Test("it builds the package's product with the Makefile's RELEASE_BUILD, and strips it")
    func releaseBuild() throws {
        let makefile = try Repository.text("Makefile")
        let line = try #require(makefile.split(separator: "\n").first { $0.hasPrefix("RELEASE_BUILD") })
        let separator = try #require(line.firstIndex(of: "="))
        var expected = words(line[line.index(after: separator)...].replacingOccurrences(of: "$$", with: "$"))
        let product = try #require(expected.firstIndex(of: "--product"), "RELEASE_BUILD names no --product")
        expected[product + 1] = "CartServer"
        let build = try #require(template.stages.first)
        let commands = build.all("RUN").flatMap { run in
            run.arguments.components(separatedBy: "&&").map { words($0) }
        }
        #expect(commands.contains(expected), "no RUN of \(expected.joined(separator: " ")): \(commands)")
        let runs = build.all("RUN").map(\.arguments).joined(separator: "\n")
        #expect(runs.contains("strip /out/cart-server"), "the binary is not stripped")
    }

    @Test("what it copies exists, and its ignore file lets in exactly that")
    func context() throws {
        let ignore = DockerIgnore(try Repository.text(Self.path + ".dockerignore"))
        let copied = template.instructions.filter { $0.keyword == "COPY" && !$0.arguments.contains("--from=") }
            .flatMap { words($0.arguments).dropLast().filter { !$0.hasPrefix("--") } }
        try #require(copied.count >= 4, "copies \(copied)")
        for path in copied {
            #expect(FileManager.default.fileExists(atPath: Repository.url(path).path), "\(path) does not exist")
            #expect(!ignore.excludes(path), "\(path) is copied but the ignore file excludes it")
        }
        for path in [".build", "Examples/CartServer/.build", "Examples/CartServer/Tests", "Tests", "docs", ".git", "data"] {
            #expect(ignore.excludes(path), "\(path) is sent to the build")
        }
    }

    @Test("the runtime stage runs as a non-root user, with a volume and the binary's own health check")
    func runtime() throws {
        let runtime = try #require(template.stages.last)
        let user = try #require(runtime.all("USER").last).arguments
        #expect(!["root", "0"].contains(user))
        #expect(!runtime.all("VOLUME").isEmpty)
        let healthcheck = try #require(runtime.all("HEALTHCHECK").last).arguments
        #expect(healthcheck.contains("/usr/local/bin/cart-server") && healthcheck.contains("healthcheck"), "\(healthcheck)")
        let packages = runtime.all("RUN").filter { $0.arguments.contains("apt-get install") }.flatMap { words($0.arguments) }
        #expect(packages.contains("libmicrohttpd12") && !packages.contains { $0.hasSuffix("-dev") }, "\(packages)")
        let entry = try #require(runtime.all("ENTRYPOINT").last).arguments
        #expect(entry.contains("/usr/local/bin/cart-server"))
    }
}
