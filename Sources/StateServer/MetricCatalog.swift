import CoreMetrics
import Prometheus

/// Every metric `/metrics` serves: its name, type, help text and, for histograms, buckets.
///
/// The libraries make their metrics through swift-metrics by name alone (`Timer(label:)`,
/// `Counter(label:)`); ``CatalogMetricsFactory`` gives each the help text and buckets found
/// here, so the `# HELP` lines and the buckets have one place. docs/METRICS.md lists the same
/// metrics for operators (a test checks that every name here is there).
enum MetricCatalog {
    enum Kind: String, Sendable {
        case counter, gauge, histogram
    }

    struct Entry: Sendable {
        let name: String
        let kind: Kind
        let help: String
        /// Upper bounds of a duration histogram's buckets (a `Timer`).
        var durationBuckets: [Duration]? = nil
        /// Upper bounds of a value histogram's buckets (an aggregating `Recorder`).
        var valueBuckets: [Double]? = nil
    }

    // MARK: Names (the ones the executable makes itself)

    static let httpRequests = "stateserver_http_requests_total"
    static let httpRequestDuration = "stateserver_http_request_duration_seconds"
    static let dispatchDuration = "stateserver_dispatch_duration_seconds"
    static let sessionsInMemory = "stateserver_sessions_in_memory"
    static let storesInMemory = "stateserver_stores_in_memory"
    static let eventStreamsOpen = "stateserver_event_streams_open"
    static let storageCommitLatency = "stateserver_storage_commit_latency_seconds"

    // MARK: Buckets

    /// 50 µs … 1 s: a dispatch takes about 0.2 ms in memory, a few ms with an fsync.
    static let dispatchBuckets: [Duration] = [
        .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500),
        .milliseconds(1), .microseconds(2500), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1),
    ]
    /// 50 µs … 10 s: requests and commits, from a cached read to a slow disk or database.
    static let latencyBuckets: [Duration] = dispatchBuckets + [.milliseconds(2500), .seconds(5), .seconds(10)]
    /// 1 ms … 1 day: a timer fires within milliseconds of its due time, or, missed while the
    /// server was down, when it starts again.
    static let latenessBuckets: [Duration] = [
        .milliseconds(1), .milliseconds(5), .milliseconds(25), .milliseconds(100), .milliseconds(250), .seconds(1),
        .seconds(5), .seconds(30), .seconds(300), .seconds(3600), .seconds(86_400),
    ]
    /// 1 … 512 batches in one group commit.
    static let batchBuckets: [Double] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]

    // MARK: The catalog

    static let entries: [Entry] = [
        Entry(
            name: httpRequests, kind: .counter,
            help: "HTTP requests answered, by route template (- for paths no route has) and status code."),
        Entry(
            name: httpRequestDuration, kind: .histogram,
            help: "Seconds from a request's headers to its response's, by route template (an event stream: until it starts).",
            durationBuckets: latencyBuckets),
        Entry(
            name: dispatchDuration, kind: .histogram,
            help: "Seconds to answer POST /v1/sessions/{id}/dispatch, from its headers to its response (the storage commit included).",
            durationBuckets: dispatchBuckets),
        Entry(name: sessionsInMemory, kind: .gauge, help: "Sessions held in memory."),
        Entry(name: storesInMemory, kind: .gauge, help: "Feature stores held in memory, over all sessions."),
        Entry(name: eventStreamsOpen, kind: .gauge, help: "Event streams (GET /v1/sessions/{id}/events) open now."),
        Entry(name: "stateserver_events_sent_total", kind: .counter, help: "State events queued on event-stream subscribers."),
        Entry(
            name: "stateserver_subscribers_dropped_total", kind: .counter,
            help: "Event streams closed because their reader was too slow (or had gone)."),
        Entry(
            name: storageCommitLatency, kind: .histogram,
            help: "Seconds until a batch of writes is durable, as the server waits for it (queueing and group commit included); not with memory storage.",
            durationBuckets: latencyBuckets),
        Entry(
            name: "stateserver_storage_commit_duration_seconds", kind: .histogram,
            help: "SQLite storage: seconds of each group commit, from BEGIN to the end of COMMIT (the fsync).",
            durationBuckets: latencyBuckets),
        Entry(
            name: "stateserver_storage_commit_batches", kind: .histogram,
            help: "SQLite storage: batches (changes) written by each group commit.", valueBuckets: batchBuckets),
        Entry(
            name: "stateserver_storage_merge_duration_seconds", kind: .histogram,
            help: "SQLite storage: seconds of each move of the journal's log (recent_changes) into changes, commit included.",
            durationBuckets: latencyBuckets),
        Entry(
            name: "stateserver_storage_merge_failures_total", kind: .counter,
            help: "SQLite storage: moves of the journal's log into changes that failed (the rows stay in the log; tried again later)."),
        Entry(
            name: "stateserver_cluster_members", kind: .gauge,
            help: "PostgreSQL, several nodes: live members of the cluster as this node last saw them (every 0.2 s)."),
        Entry(
            name: "stateserver_cluster_nodes_declared_dead_total", kind: .counter,
            help: "PostgreSQL, several nodes: other nodes whose membership this node ended early, their liveness lock being gone (their process died)."),
        Entry(
            name: "stateserver_cluster_dead_node_detection_seconds", kind: .histogram,
            help: "PostgreSQL, several nodes: seconds from a node's last membership renewal until this node declared it dead (at most the time its sessions waited).",
            durationBuckets: latencyBuckets),
        Entry(
            name: "stateserver_presence_entries", kind: .gauge,
            help: "Event streams present now (opened with ?presence=), in every session this node serves."),
        Entry(
            name: "stateserver_timers_pending", kind: .gauge,
            help: "Timers reducers scheduled and not fired yet, in every session (as storage last counted them)."),
        Entry(
            name: "stateserver_timers_fired_total", kind: .counter,
            help: "Timers fired on this node, each as a change of cause timer."),
        Entry(
            name: "stateserver_timer_lateness_seconds", kind: .histogram,
            help: "Seconds from a timer's due time until it fired (missed while the server was down: the whole wait).",
            durationBuckets: latenessBuckets),
    ] + ProcessMetrics.entries

    private static let byName: [String: Entry] = Dictionary(uniqueKeysWithValues: entries.map { ($0.name, $0) })

    /// The entry of `name`; a name missing here is served without help text (a test fails).
    static func entry(_ name: String) -> Entry? { byName[name] }
}

/// swift-metrics' factory over the Prometheus registry, with the help text and buckets of
/// ``MetricCatalog``. (`PrometheusMetricsFactory` registers every metric without help text,
/// and the registry refuses one name with two help texts, so the catalog's must be the only.)
struct CatalogMetricsFactory: MetricsFactory {
    let registry: PrometheusCollectorRegistry

    private func descriptor(_ label: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: label, unitName: "", helpText: MetricCatalog.entry(label)?.help ?? "")
    }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
    }

    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
    }

    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        guard aggregate else { return registry.makeGauge(descriptor: descriptor(label), labels: dimensions) }
        let buckets = MetricCatalog.entry(label)?.valueBuckets ?? MetricCatalog.batchBuckets
        return registry.makeValueHistogram(descriptor: descriptor(label), labels: dimensions, buckets: buckets)
    }

    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        registry.makeGauge(descriptor: descriptor(label), labels: dimensions)
    }

    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        let buckets = MetricCatalog.entry(label)?.durationBuckets ?? MetricCatalog.latencyBuckets
        return registry.makeDurationHistogram(descriptor: descriptor(label), labels: dimensions, buckets: buckets)
    }

    func destroyCounter(_ handler: any CounterHandler) {
        if let counter = handler as? Prometheus.Counter { registry.unregisterCounter(counter) }
    }

    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {
        if let counter = handler as? Prometheus.Counter { registry.unregisterCounter(counter) }
    }

    func destroyRecorder(_ handler: any RecorderHandler) {
        switch handler {
        case let gauge as Prometheus.Gauge: registry.unregisterGauge(gauge)
        case let histogram as ValueHistogram: registry.unregisterValueHistogram(histogram)
        default: break
        }
    }

    func destroyMeter(_ handler: any MeterHandler) {
        if let gauge = handler as? Prometheus.Gauge { registry.unregisterGauge(gauge) }
    }

    func destroyTimer(_ handler: any TimerHandler) {
        if let histogram = handler as? DurationHistogram { registry.unregisterDurationHistogram(histogram) }
    }
}
