#if Service
import ChorusLog
import ChorusNode
import ChorusProjections
import Foundation
import Metrics
import Prometheus

/// The metrics a serving node exports at `/metrics` in Prometheus' text
/// format (Specs/api.md §8): what the node, the sync server and the API
/// record through swift-metrics, plus the store's size read at each scrape.
public final class ServiceMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    private let storeFileBytes: Prometheus.Gauge
    private let storeMapBytes: Prometheus.Gauge
    private let storeEvents: Prometheus.Gauge
    private let residentBytes: Prometheus.Gauge
    private let cpuSeconds: Prometheus.Gauge
    private let openDescriptors: Prometheus.Gauge
    private let watchers: Prometheus.Gauge
    private let watchedQueries: Prometheus.Gauge

    /// Installs the Prometheus backend for swift-metrics. Once per process,
    /// before the node opens (metrics made earlier record nothing).
    public static func bootstrap() -> ServiceMetrics {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        // Group commits take from a few events to the 65,536 of a full transaction.
        factory.valueHistogramBuckets["chorus_writer_batch_events"] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536]
        // API requests take from tens of microseconds (a read on the socket) to seconds (an import).
        let requestBuckets: [Duration] = [
            .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2),
            .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(100), .milliseconds(250), .seconds(1), .seconds(5),
        ]
        factory.durationHistogramBuckets["http.server.request.duration"] = requestBuckets
        factory.durationHistogramBuckets["http_server_request_duration"] = requestBuckets
        factory.durationHistogramBuckets["chorus_writer_commit_seconds"] = [
            .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
            .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .seconds(1), .seconds(5),
        ]
        MetricsSystem.bootstrap(factory)
        return ServiceMetrics(registry: registry)
    }

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        storeFileBytes = registry.makeGauge(descriptor: Self.gauge("file", "bytes", "Size of the store's data.mdb"))
        storeMapBytes = registry.makeGauge(descriptor: Self.gauge("map", "bytes", "The LMDB map size (grows by doubling)"))
        storeEvents = registry.makeGauge(descriptor: Self.gauge("events", "", "Events in the log (the last arrival position)"))
        // The process's own figures, under the names Prometheus' client libraries use.
        func named(_ name: String, _ help: String) -> MetricNameDescriptor { MetricNameDescriptor(metricName: name, unitName: "", helpText: help) }
        residentBytes = registry.makeGauge(descriptor: named("process_resident_memory_bytes", "Resident memory of the process"))
        cpuSeconds = registry.makeGauge(descriptor: named("process_cpu_seconds_total", "User and system CPU time of the process"))
        openDescriptors = registry.makeGauge(descriptor: named("process_open_fds", "Open file descriptors of the process"))
        watchers = registry.makeGauge(descriptor: named("chorus_api_watchers", "Live queries open (GET /v1/watch)"))
        watchedQueries = registry.makeGauge(descriptor: named("chorus_api_watched_queries", "Distinct queries the live queries observe"))
        let build = registry.makeGauge(
            descriptor: named("chorus_build_info", "The formats this build writes"),
            labels: [("store_format", String(LogStore.formatVersion)), ("projections_format", String(Projections.formatVersion))])
        build.set(Double(1))
    }

    /// `chorus_store_<name>_<unit>` (no unit: `chorus_store_<name>`).
    static func gauge(_ name: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "chorus", subsystem: "store", metricName: name, unitName: unit, helpText: help)
    }

    /// The exposition text, with the store's and the process's gauges read now.
    public func render(node: Node, watchers: Int = 0, watchedQueries: Int = 0) -> [UInt8] {
        if let process = ProcessFigures.read() {
            residentBytes.set(process.residentBytes)
            cpuSeconds.set(process.cpuSeconds)
            openDescriptors.set(process.openDescriptors)
        }
        self.watchers.set(Double(watchers))
        self.watchedQueries.set(Double(watchedQueries))
        let file = (try? FileManager.default.attributesOfItem(atPath: node.storePath + "/data.mdb"))?[.size] as? NSNumber
        storeFileBytes.set(Double(file?.int64Value ?? 0))
        storeMapBytes.set(Double(node.log.env.mapSize))
        storeEvents.set(Double((try? node.lastArrival()) ?? 0))
        return registry.emitToBuffer()
    }
}
#endif
