import ArgumentParser
import ChorusSimulation
import Foundation

/// A network of many relays and users in one process (Specs/sync.md §8.1,
/// §4.11, §9), measured against the many-relays targets: delivery 1.0,
/// the fullest relay within 1.5 of its ideal share, at most 8 relays per
/// sync on average, first contact within 150 bytes per scope feed plus 2 KB a
/// session.
struct NetworkBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "network",
        abstract: "Simulate a network of --users users over --relays listed relays and report delivery, relay load, connections and bytes.",
        discussion: """
            Starts --relays relays serving --host listed on 127.0.0.1 and creates --users user stores, each \
            on two random home relays and one inbox (a third relay, or with --inbox-on-home one of the two), with pictures, a power-law follow graph, likes and a \
            few private chats. Every user's node then publishes (syncs with its own and the bootstrap \
            relays), every relay exchanges the directory with the bootstrap relays (as chorus serve does \
            every --directory-interval), and every node runs --rounds rounds of syncing by its relay lists with --hops 1, the real sync \
            code over real TCP, one user at a time. Reports, after each round, the fraction of (follower, \
            followed) pairs, chat invitations and key wraps delivered; the fullest relay over its ideal \
            share (device events x 2 / relays, plus the user key feeds every listed relay keeps); relays per \
            sync; and, for a sample of users whose node then forgets what it knew of its peers, the bytes of a \
            first contact with every relay of its plan while both hold the same events.
            """)
    @Option(help: "User nodes.") var users = 1000
    @Option(help: "Listed relays.") var relays = 20
    @Option(help: "Rounds after publishing.") var rounds = 2
    @Option(help: "Seed of the follow graph and relay choices.") var seed: UInt64 = 1
    @Option(help: "Fraction of users who start a chat with two users they follow.") var chatFraction = 0.05
    @Flag(help: "Put each user's inbox on one of its two home relays (a relay listed with both roles) instead of a third relay.")
    var inboxOnHome = false
    @Flag(help: "Print machine-readable JSON.") var json = false

    func validate() throws {
        if users < 3 || relays < 1 || rounds < 1 { throw ValidationError("need --users >= 3, --relays >= 1, --rounds >= 1") }
    }

    func run() async throws {
        let dir = temporaryDirectory("network")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var p = NetworkSimulation.Parameters(users: users, relays: relays, directory: dir)
        p.rounds = rounds
        p.seed = seed
        p.chatFraction = chatFraction
        p.inboxOnHome = inboxOnHome
        let interactive = isatty(STDERR_FILENO) != 0
        let r = try await NetworkSimulation.run(p, progress: { line in
            if interactive { FileHandle.standardError.write(Data((line + "\n").utf8)) }
        })
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            print(String(decoding: try encoder.encode(r), as: UTF8.self))
            return
        }
        print("""
            \(r.users) users, \(r.relays) relays, \(r.follows) follows, \(r.chats) chats
            delivery after each round: follows \(r.deliveryFollowsByRound), invitations \(r.deliveryInvitationsByRound), key wraps \(r.deliveryKeyWrapsByRound)
            what can wait, after each round: followers known to the followed user \(r.followersKnownByRound.map { String(format: "%.3f", $0) })
            fullest relay: \(r.relayEventsMax) events, \(String(format: "%.2f", r.relayEventsMaxOverIdeal)) of its ideal share \(Int(r.relayEventsIdeal)) (target <= 1.5)
            relays per sync: mean \(String(format: "%.2f", r.connectionsPerSyncMean)), max \(r.connectionsPerSyncMax) (target mean <= 8); by round \(r.connectionsPerSyncMeanByRound.map { String(format: "%.2f", $0) }.joined(separator: ", ")); last round by reason \(r.connectionsByReasonLastRound.sorted { $0.key < $1.key }.map { "\($0.key) \(String(format: "%.2f", $0.value))" }.joined(separator: ", ")); by first reason, each round: \(r.connectionsByFirstReasonByRound.map { round in round.sorted { $0.key < $1.key }.map { "\($0.key) \(String(format: "%.2f", $0.value))" }.joined(separator: ", ") }.joined(separator: " | "))
            first contact: \(r.firstContactSessions) sessions, \(r.firstContactBytes) bytes (\(r.firstContactBytes / max(1, r.firstContactSessions)) a session) for \(r.firstContactScopeFeeds) scope feeds, \(String(format: "%.0f", r.firstContactBytesPerScopeFeed)) bytes per scope feed after 2 KB a session (target <= 150)
            missed after the last round: \(r.misses.isEmpty ? "nothing" : r.misses.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
            signatures checked in the rounds: \(r.roundSignatureChecks) for \(r.roundEventsNew) new events (\(String(format: "%.3f", r.signatureChecksPerNewEvent)) each; \(r.roundEventsDuplicate) received again from another relay)
            wall: \(String(format: "%.1f", r.wallSeconds)) s (setup and publishing \(String(format: "%.1f", r.setupSeconds)) s)
            """)
    }
}
