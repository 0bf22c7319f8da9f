import Foundation
import Prometheus
import Synchronization

/// The standard `process_*` metrics (the names every Prometheus client library uses), read
/// from `/proc/self` at each scrape. Linux only: where `/proc/self/stat` cannot be read,
/// ``init(registry:)`` returns nil and the metrics are left out.
final class ProcessMetrics: Sendable {
    static let entries: [MetricCatalog.Entry] = [
        .init(name: "process_cpu_seconds_total", kind: .counter, help: "User and system CPU time of the process, in seconds."),
        .init(name: "process_resident_memory_bytes", kind: .gauge, help: "Resident memory of the process, in bytes."),
        .init(name: "process_virtual_memory_bytes", kind: .gauge, help: "Virtual memory of the process, in bytes."),
        .init(name: "process_open_fds", kind: .gauge, help: "Open file descriptors of the process (connections included)."),
        .init(name: "process_max_fds", kind: .gauge, help: "The process's open-file limit (soft RLIMIT_NOFILE)."),
        .init(name: "process_start_time_seconds", kind: .gauge, help: "When the process started, in seconds since 1970."),
    ]

    private let cpu: Prometheus.Counter
    private let resident: Prometheus.Gauge
    private let virtual: Prometheus.Gauge
    private let openFDs: Prometheus.Gauge
    private let maxFDs: Prometheus.Gauge
    /// CPU seconds already added to the counter (a counter only goes up, by increments).
    private let cpuCounted = Mutex<Double>(0)
    private let ticksPerSecond: Double
    private let pageSize: Double

    init?(registry: PrometheusCollectorRegistry) {
        let ticks = sysconf(Int32(_SC_CLK_TCK))
        let page = sysconf(Int32(_SC_PAGESIZE))
        guard ticks > 0, page > 0, let stat = Self.stat() else { return nil }
        ticksPerSecond = Double(ticks)
        pageSize = Double(page)
        func descriptor(_ name: String) -> MetricNameDescriptor {
            MetricNameDescriptor(metricName: name, unitName: "", helpText: MetricCatalog.entry(name)?.help ?? "")
        }
        cpu = registry.makeCounter(descriptor: descriptor("process_cpu_seconds_total"))
        resident = registry.makeGauge(descriptor: descriptor("process_resident_memory_bytes"))
        virtual = registry.makeGauge(descriptor: descriptor("process_virtual_memory_bytes"))
        openFDs = registry.makeGauge(descriptor: descriptor("process_open_fds"))
        maxFDs = registry.makeGauge(descriptor: descriptor("process_max_fds"))
        // Start time: clock ticks after boot (stat's field 22) plus the boot time (/proc/stat).
        let started = registry.makeGauge(descriptor: descriptor("process_start_time_seconds"))
        if let boot = Self.bootTime() {
            started.set(boot + stat.startTicks / ticksPerSecond)
        } else {
            started.set(Date().timeIntervalSince1970)
        }
        update()
    }

    /// Reads `/proc/self` and sets the metrics; called before each scrape is written.
    func update() {
        if let stat = Self.stat() {
            resident.set(stat.residentPages * pageSize)
            virtual.set(stat.virtualBytes)
            let seconds = stat.cpuTicks / ticksPerSecond
            cpuCounted.withLock { counted in
                if seconds > counted {
                    cpu.increment(by: seconds - counted)
                    counted = seconds
                }
            }
        }
        if let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
            openFDs.set(Double(descriptors.count))
        }
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 {
            maxFDs.set(limit.rlim_cur == rlim_t.max ? Double(Int64.max) : Double(limit.rlim_cur))
        }
    }

    private struct Stat {
        /// utime + stime, in clock ticks.
        var cpuTicks: Double
        var startTicks: Double
        var virtualBytes: Double
        var residentPages: Double
    }

    /// `/proc/self/stat` (proc(5)): the fields after the command name, which is in parentheses
    /// and may itself hold spaces and parentheses.
    private static func stat() -> Stat? {
        guard let text = read("/proc/self/stat"), let close = text.lastIndex(of: ")") else { return nil }
        // Field 3 (state) is fields[0], so field n is fields[n - 3].
        let fields = text[text.index(after: close)...].split(separator: " ")
        func field(_ n: Int) -> Double? { fields.count > n - 3 ? Double(fields[n - 3]) : nil }
        guard let utime = field(14), let stime = field(15), let start = field(22), let vsize = field(23), let rss = field(24)
        else { return nil }
        return Stat(cpuTicks: utime + stime, startTicks: start, virtualBytes: vsize, residentPages: rss)
    }

    /// The boot time, in seconds since 1970 (`btime` in `/proc/stat`).
    private static func bootTime() -> Double? {
        guard let text = read("/proc/stat") else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("btime ") {
            return Double(line.dropFirst("btime ".count))
        }
        return nil
    }

    /// A file of /proc (they report size 0, so read to the end).
    private static func read(_ path: String) -> String? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        guard let data = try? handle.readToEnd() else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
}
