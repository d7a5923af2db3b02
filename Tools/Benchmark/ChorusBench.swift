// chorus-bench: measures the machine's limits and Chorus against them in one
// run, and prints each Chorus figure as a ratio to its limit, so the figures
// hold on a noisy machine. Run with `Tools/bench` (release build).
import ArgumentParser

@main
struct ChorusBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chorus-bench",
        abstract: "Measure Chorus against the machine's limits, measured in the same run.",
        discussion: "Without a subcommand, runs `base`. Build in release mode (Tools/bench does).",
        subcommands: [BaseBench.self, ProjectionsBench.self, SyncBench.self, CryptoBench.self, ImportBench.self, PeersBench.self, ObserveBench.self, APIBench.self, FoldBench.self, PagesBench.self, VerifyLimitBench.self, ScopedBench.self, NetworkBench.self, ChatKeysBench.self, InboxBench.self],
        defaultSubcommand: BaseBench.self)
}

struct BaseBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "base",
        abstract: "Raw Ed25519 and LMDB limits, then local append and remote ingest as ratios to them.",
        discussion: """
            Measures raw libsodium sign/verify (one core, all cores) and raw LMDB batched durable \
            append, then Chorus's durable local append (1, 8 and 64 concurrent writers), the p50/p99 \
            latency of one acknowledged append against one raw durable LMDB commit, Node.appendBatch, \
            and remote ingest of a batch from 100 authors, each as a ratio to its limit.
            """)
    @OptionGroup var options: BaseOptions
    func run() async throws { try await runBaseBenchmark(options) }
}

struct ProjectionsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "projections",
        abstract: "Ingest, rebuild, queries and the replay tool over a realistic social workload.",
        discussion: """
            Generates N events of a realistic mix from U users with one or two devices each, signs \
            them on all cores, then measures in one run: raw LMDB batched durable append of N values \
            of the same sizes, the all-core Ed25519 verify rate, ingest of all N into an empty node \
            through Node.ingest in sync-like batches (feed by feed), Store.rebuild(), and the \
            latency of profile, balance and chat-page queries. Then, on the closed store, the replay \
            tool: `verify` as a ratio to the verify rate and `rebuild --out` as a ratio to LMDB append.
            """)
    @OptionGroup var options: ProjectionsOptions
    func run() async throws { try await runProjectionsBenchmark(options) }
}

struct SyncBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "A full sync over loopback, wire overhead, and the bytes two nodes in sync exchange.",
        discussion: """
            Builds node A with N events from U users (pictures with real blob bytes), signed and \
            ingested before any timing, and an empty node B in the same network. Measures the \
            all-core verify rate, then times a full sync of B from A over 127.0.0.1 and reports \
            events/s against it, wire bytes per event against the envelopes' bytes (blobs apart), and \
            checks that B ends with A's events and digest. Then two fresh nodes with F feeds of E \
            events sync twice, and the second sync's bytes are compared with a naive full height \
            exchange (F x (32 + 8 + 32) bytes plus framing, one direction).
            """)
    @OptionGroup var options: SyncBenchOptions
    func run() async throws { try await runSyncBenchmark(options) }
}
