import Foundation
import TestSupport
import Testing

/// `GET /metrics` of the real binary: every family with its help text and type, buckets that fit
/// what is measured, the process metrics, per-route durations labelled by template, and the
/// storage's commit latency; and each family documented in docs/METRICS.md.
@Suite("Metrics")
struct MetricsTests {
    /// The families an operator can count on (with SQLite storage, after a dispatch), and their types.
    static let families: [String: String] = [
        "stateserver_http_requests_total": "counter",
        "stateserver_http_request_duration_seconds": "histogram",
        "stateserver_dispatch_duration_seconds": "histogram",
        "stateserver_sessions_in_memory": "gauge",
        "stateserver_stores_in_memory": "gauge",
        "stateserver_event_streams_open": "gauge",
        "stateserver_events_sent_total": "counter",
        "stateserver_subscribers_dropped_total": "counter",
        "stateserver_storage_commit_latency_seconds": "histogram",
        "stateserver_storage_commit_duration_seconds": "histogram",
        "stateserver_storage_commit_batches": "histogram",
        "process_cpu_seconds_total": "counter",
        "process_resident_memory_bytes": "gauge",
        "process_virtual_memory_bytes": "gauge",
        "process_open_fds": "gauge",
        "process_max_fds": "gauge",
        "process_start_time_seconds": "gauge",
    ]

    /// One scrape, parsed: `# HELP` and `# TYPE` by family, and the samples.
    struct Scrape {
        var help: [String: String] = [:]
        var type: [String: String] = [:]
        var samples: [(name: String, labels: String, value: Double)] = []

        init(_ text: String) {
            for line in text.split(separator: "\n").map(String.init) {
                let words = line.split(separator: " ", maxSplits: 3).map(String.init)
                if line.hasPrefix("# HELP "), words.count == 4 {
                    help[words[2]] = words[3]
                } else if line.hasPrefix("# TYPE "), words.count == 4 {
                    type[words[2]] = words[3]
                } else if !line.hasPrefix("#"), let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) {
                    let series = String(line[..<space])
                    if let brace = series.firstIndex(of: "{") {
                        samples.append((String(series[..<brace]), String(series[brace...]), value))
                    } else {
                        samples.append((series, "", value))
                    }
                }
            }
        }

        func values(_ name: String) -> [(labels: String, value: Double)] {
            samples.filter { $0.name == name }.map { ($0.labels, $0.value) }
        }

        func value(_ name: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> Double {
            try #require(values(name).first?.value, "\(name) missing", sourceLocation: sourceLocation)
        }

        /// The finite `le` bounds of a histogram's buckets (+Inf left out).
        func bucketBounds(_ name: String) -> Set<Double> {
            Set(values(name + "_bucket").compactMap { sample -> Double? in
                guard let start = sample.labels.range(of: #"le=""#) else { return nil }
                let rest = sample.labels[start.upperBound...]
                return rest.firstIndex(of: "\"").flatMap { Double(rest[..<$0]) }
            }.filter(\.isFinite))
        }
    }

    @Test("GET /metrics of the real server: help text and type for every family, fitted buckets, process and storage metrics")
    func scrape() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("state-server-metrics-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let startedBefore = Date().timeIntervalSince1970

        try await withServer(arguments: ["--storage", "sqlite:\(directory.path)/state.db"]) { server in
            let api = server.api
            let session = try await api.createSession()
            for _ in 0..<5 { try await session.dispatchOK("counter", ["type": "increment"]) }
            _ = try await session.store("counter")

            let response = try await api.request("GET", "/metrics")
            #expect(response.status == 200)
            let scrape = Scrape(response.text)

            for (family, type) in Self.families {
                #expect(scrape.help[family]?.isEmpty == false, "\(family) has no HELP line")
                #expect(scrape.type[family] == type, "\(family): TYPE \(scrape.type[family] ?? "missing"), expected \(type)")
            }
            for family in scrape.type.keys {
                #expect(scrape.help[family]?.isEmpty == false, "\(family) has no HELP line")
            }

            // The dispatch histogram resolves a dispatch's fraction of a millisecond.
            let dispatchBounds = scrape.bucketBounds("stateserver_dispatch_duration_seconds")
            #expect(dispatchBounds.filter { $0 < 0.001 }.count >= 3, "dispatch buckets: \(dispatchBounds.sorted())")
            #expect(dispatchBounds.min() == 0.00005 && dispatchBounds.max() == 1, "dispatch buckets: \(dispatchBounds.sorted())")
            #expect(try scrape.value("stateserver_dispatch_duration_seconds_count") == 5)

            // Per-route durations, labelled by the template, never by a path with the session in it.
            let routes = scrape.values("stateserver_http_request_duration_seconds_count").map(\.labels)
            #expect(routes.contains(#"{route="/v1/sessions/{id}/dispatch"}"#), "\(routes)")
            #expect(routes.contains(#"{route="/v1/sessions/{id}/state/{feature}"}"#), "\(routes)")
            #expect(routes.contains(#"{route="/v1/sessions"}"#), "\(routes)")
            for sample in scrape.samples where sample.name.hasPrefix("stateserver_http_") {
                #expect(!sample.labels.contains(session.id), "a raw path in a label: \(sample)")
            }
            #expect(scrape.bucketBounds("stateserver_http_request_duration_seconds").contains { $0 < 0.001 })

            // Storage commits, timed around the storage: one per dispatch at least.
            #expect(try scrape.value("stateserver_storage_commit_latency_seconds_count") >= 5)
            #expect(scrape.bucketBounds("stateserver_storage_commit_latency_seconds").contains { $0 < 0.001 })

            // The process, from /proc.
            #expect(try scrape.value("process_resident_memory_bytes") > 1_000_000)
            #expect(try scrape.value("process_virtual_memory_bytes") >= scrape.value("process_resident_memory_bytes"))
            #expect(try scrape.value("process_open_fds") >= 4)
            #expect(try scrape.value("process_max_fds") >= scrape.value("process_open_fds"))
            #expect(try scrape.value("process_cpu_seconds_total") > 0)
            let started = try scrape.value("process_start_time_seconds")
            #expect(started >= startedBefore - 5 && started <= Date().timeIntervalSince1970 + 5, "start time \(started)")
        }
    }

    @Test("docs/METRICS.md lists every family")
    func documented() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let doc = try String(contentsOf: root.appendingPathComponent("docs/METRICS.md"), encoding: .utf8)
        for family in Self.families.keys {
            #expect(doc.contains("`\(family)"), "docs/METRICS.md does not list \(family)")
        }
    }
}
