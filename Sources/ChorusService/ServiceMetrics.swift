import ChorusNode
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

    /// Installs the Prometheus backend for swift-metrics. Once per process,
    /// before the node opens (metrics made earlier record nothing).
    public static func bootstrap() -> ServiceMetrics {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        // Group commits take from a few events to the 65,536 of a full transaction.
        factory.valueHistogramBuckets["chorus_writer_batch_events"] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536]
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
    }

    /// `chorus_store_<name>_<unit>` (no unit: `chorus_store_<name>`).
    static func gauge(_ name: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "chorus", subsystem: "store", metricName: name, unitName: unit, helpText: help)
    }

    /// The exposition text, with the store's gauges read now.
    public func render(node: Node) -> [UInt8] {
        let file = (try? FileManager.default.attributesOfItem(atPath: node.storePath + "/data.mdb"))?[.size] as? NSNumber
        storeFileBytes.set(Double(file?.int64Value ?? 0))
        storeMapBytes.set(Double(node.log.env.mapSize))
        storeEvents.set(Double((try? node.lastArrival()) ?? 0))
        return registry.emitToBuffer()
    }
}
