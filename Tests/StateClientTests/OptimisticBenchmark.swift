// bench/optimistic.sh's measurement (skipped unless STATESERVER_BENCH=optimistic): how long an
// OptimisticStore takes from `send` to the predicted state, and from `send` to the server's
// confirmation with 100 ms of round-trip latency added by a FaultProxy. Prints one
// `OPTIMISTICJSON {...}` line.

import ExampleFeatures
import Foundation
import StateClient
import TestSupport
import Testing

@Suite("OptimisticStore benchmark", .timeLimit(.minutes(5)))
struct OptimisticBenchmark {
    static let enabled = ProcessInfo.processInfo.environment["STATESERVER_BENCH"] == "optimistic"
    static func setting(_ name: String, _ fallback: Int) -> Int {
        ProcessInfo.processInfo.environment[name].flatMap(Int.init) ?? fallback
    }

    @Test("send → predicted, send → confirmed with 100 ms added latency", .enabled(if: enabled))
    func measure() async throws {
        let predictions = Self.setting("OPTIMISTIC_SENDS", 2000)
        let confirmations = Self.setting("OPTIMISTIC_ROUNDS", 30)
        let burst = Self.setting("OPTIMISTIC_BURST", 50)
        let latencyMs = Self.setting("OPTIMISTIC_LATENCY_MS", 100)
        try await withServer { server in
            let proxy = try FaultProxy(targetPort: server.port)
            defer { proxy.stop() }
            proxy.latency = .milliseconds(latencyMs)
            let client = StateServerClient(baseURL: proxy.baseURL)
            let credentials = try await StateServerClient(baseURL: server.baseURL).createSession()
            let clock = ContinuousClock()

            // send → predicted: the synchronous send itself (no run(): nothing else competes).
            let offline = try client.optimisticStore(CounterFeature(), credentials: credentials)
            var predicted: [Duration] = []
            for _ in 0..<predictions {
                let start = clock.now
                _ = try offline.send(.increment(by: 1))
                predicted.append(clock.now - start)
            }

            // send → confirmed, one at a time, then a burst.
            let store = try client.optimisticStore(CounterFeature(), credentials: credentials)
            let sync = Task { try await store.run() }
            defer { sync.cancel() }
            try await waitUntil("the first snapshot") { store.confirmedVersion != nil }
            var confirmed: [Duration] = []
            for _ in 0..<confirmations {
                let start = clock.now
                try store.send(.increment(by: 1))
                for await _ in store.updates() where store.pendingCount == 0 { break }
                confirmed.append(clock.now - start)
            }
            let burstStart = clock.now
            for _ in 0..<burst { try store.send(.increment(by: 1)) }
            try await store.settled(timeout: .seconds(120))
            let burstTime = clock.now - burstStart
            #expect(try await StateServerClient(baseURL: server.baseURL).store(CounterFeature(), credentials: credentials)
                .state().state == store.state)

            func micros(_ duration: Duration) -> Double {
                Double(duration.components.seconds) * 1e6 + Double(duration.components.attoseconds) / 1e12
            }
            func percentile(_ values: [Duration], _ p: Double) -> Double {
                let sorted = values.map(micros).sorted()
                return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
            }
            let result: [String: Double] = [
                "added_latency_ms": Double(latencyMs),
                "predicted_sends": Double(predictions),
                "predicted_p50_us": percentile(predicted, 0.5), "predicted_p99_us": percentile(predicted, 0.99),
                "confirmed_rounds": Double(confirmations),
                "confirmed_p50_ms": percentile(confirmed, 0.5) / 1000, "confirmed_p99_ms": percentile(confirmed, 0.99) / 1000,
                "burst_sends": Double(burst), "burst_confirmed_ms": micros(burstTime) / 1000,
            ]
            let line = try JSONSerialization.data(withJSONObject: result, options: [.sortedKeys])
            print("OPTIMISTICJSON " + String(decoding: line, as: UTF8.self))
        }
    }
}
