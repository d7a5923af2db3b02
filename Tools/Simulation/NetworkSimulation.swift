import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusParallel
import ChorusProjections
import ChorusSync
import Foundation

/// A network of many relays in one process (Specs/sync.md §8.1, §4.11, §9):
/// `relays` relays serving `--host listed` on 127.0.0.1 and `users` user
/// nodes, each a real store opened only while it acts, syncing by relay
/// lists over real TCP, `concurrency` users at a time. A power-law follow graph, posts (pictures), likes of
/// followed users' pictures and private chats; each user on two random
/// `home` relays and one `inbox`. `chorus-bench network` runs it at scale;
/// the test suite runs a small one and requires every delivery.
public struct NetworkSimulation: Sendable {
    /// What to build.
    public struct Parameters: Sendable {
        /// User nodes (stores), each opened only while it acts.
        public var users: Int
        /// Relays serving `--host listed`.
        public var relays: Int
        /// Relays every invite carries (the first ones).
        public var bootstrapRelays = 2
        /// Follows per user: a Pareto draw (shape 1.5) from `minFollows`, capped at `maxFollows`.
        public var minFollows = 3
        /// The most users one user follows.
        public var maxFollows = 500
        /// Fraction of users who start a chat with two of the users they follow.
        public var chatFraction = 0.05
        /// Pictures per user: 1 to this many.
        public var maxPosts = 3
        /// Rounds of every user syncing by its relay lists after the publishing pass.
        public var rounds = 2
        /// Users whose first contact is measured (spread evenly over the users).
        public var firstContactSample = 200
        /// Each user's inbox is one of its two home relays (a relay listed
        /// with both roles, as most relay lists are), instead of a third relay.
        public var inboxOnHome = false
        /// Fixes the follow graph, the relay choices and the chats.
        public var seed: UInt64 = 1
        /// Users acting at once, each with its own store and connections.
        /// Every random choice is made before they act, so the network is
        /// the same whatever the order in which they finish.
        public var concurrency = 8
        /// Where the stores go (a directory of its own, removed by the caller).
        public var directory: String

        /// `users` users over `relays` relays, stores under `directory`, the rest by default.
        public init(users: Int, relays: Int, directory: String) {
            self.users = users
            self.relays = relays
            self.directory = directory
        }
    }

    /// What it measured (`chorus-bench network --json` prints these keys).
    public struct Result: Sendable, Encodable {
        /// The network's size and what it held: users, relays, follows, chats.
        public var users = 0
        public var relays = 0
        public var follows = 0
        public var chats = 0
        /// Events in the users' device feeds (what `home` relays host) and in their user key feeds (the directory).
        public var deviceEvents = 0
        /// Events in the user key feeds.
        public var directoryEvents = 0
        /// Per round after the publishing pass: the fraction of (follower,
        /// followed user) pairs whose follower holds every event the followed
        /// user's device feed held when the round began (what a round can
        /// deliver: events written during the round, such as chat keys
        /// wrapped for devices the round made known, are the next round's),
        /// of chat invitations (a member holds the chat) and of key wraps (a
        /// member reads the title).
        public var deliveryFollowsByRound: [Double] = []
        public var deliveryInvitationsByRound: [Double] = []
        public var deliveryKeyWrapsByRound: [Double] = []
        /// Per round, what can wait (Specs/sync.md §9 step 5): the fraction
        /// of (follower, followed user) pairs whose followed user's node
        /// lists the follower (its follow notice was left at the followed
        /// user's inbox and the follower's feed fetched). Not a delivery
        /// target: it measures how fast what waits moves.
        public var followersKnownByRound: [Double] = []
        /// All three after the last round, together.
        public var delivery = 0.0
        /// Why deliveries missed after the last round, by cause:
        /// `invitation_not_left` (no relay holds the notice of the chat's
        /// invitation for the member), `invitation_not_taken` (the member's
        /// node does not hold it), `creator_list_unknown`
        /// (the member lacks the creator's relay list), `creator_feed_not_at_home` (no
        /// home relay of the creator holds its device feed), `creator_home_not_met`,
        /// `creator_home_failed`, `creator_home_not_covering` (the member's last sync
        /// met a home relay of the creator but not to bring it), `creator_feed_not_fetched`,
        /// `wrap_not_written` (the creator does not know the member's device),
        /// `wrap_not_arrived`, `followed_feed_not_fetched` (none of it held),
        /// `followed_feed_behind_KIND` (not all of it, the last event due of kind KIND).
        public var misses: [String: Int] = [:]
        /// The most events any relay holds (log and inbox notices) over the
        /// ideal share: device events × 2 / relays, plus the directory.
        public var relayEventsMax = 0
        public var relayEventsIdeal = 0.0
        public var relayEventsMaxOverIdeal = 0.0
        /// Relays contacted per user sync (each relay once) in the rounds after publishing.
        public var connectionsPerSyncMean = 0.0
        public var connectionsPerSyncMax = 0
        /// The mean by round (the first round also meets the bootstrap
        /// relays and the home relays that lack the publishing's events),
        /// and, over the last round, the mean number of relays a sync met
        /// for each reason (a relay met for several counts for each).
        public var connectionsPerSyncMeanByRound: [Double] = []
        public var connectionsByReasonLastRound: [String: Double] = [:]
        /// By round, the mean number of relays a sync met for the reason
        /// that first chose each (these add up to the round's mean).
        public var connectionsByFirstReasonByRound: [[String: Double]] = []
        /// First contacts of a sample of users with every relay of their plan
        /// once all hold the same events: bytes both ways, and those bytes
        /// over the users' scope feeds after 2 KB per session.
        public var firstContactSessions = 0
        public var firstContactBytes = 0
        public var firstContactBytesPerScopeFeed = 0.0
        /// The sample's scope feeds, summed over its users.
        public var firstContactScopeFeeds = 0
        /// Over the rounds' syncs of the users (each with every relay of its
        /// plan at once): events stored new, events received again from
        /// another relay, and signatures checked, which concurrent sessions
        /// share (Specs/events.md §7.4): at best one per new event.
        public var roundEventsNew = 0
        public var roundEventsDuplicate = 0
        public var roundSignatureChecks = 0
        public var signatureChecksPerNewEvent = 0.0
        /// The whole run, and its part before the rounds (creating and publishing).
        public var wallSeconds = 0.0
        public var setupSeconds = 0.0

        enum CodingKeys: String, CodingKey {
            case users, relays, follows, chats
            case deviceEvents = "device_events", directoryEvents = "directory_events"
            case deliveryFollowsByRound = "delivery_follows_by_round", deliveryInvitationsByRound = "delivery_invitations_by_round"
            case deliveryKeyWrapsByRound = "delivery_key_wraps_by_round", delivery, misses
            case followersKnownByRound = "followers_known_by_round"
            case relayEventsMax = "relay_events_max", relayEventsIdeal = "relay_events_ideal"
            case relayEventsMaxOverIdeal = "relay_events_max_over_ideal"
            case connectionsPerSyncMean = "connections_per_sync_mean", connectionsPerSyncMax = "connections_per_sync_max"
            case connectionsPerSyncMeanByRound = "connections_per_sync_mean_by_round"
            case connectionsByReasonLastRound = "connections_by_reason_last_round"
            case connectionsByFirstReasonByRound = "connections_by_first_reason_by_round"
            case firstContactSessions = "first_contact_sessions", firstContactBytes = "first_contact_bytes"
            case firstContactBytesPerScopeFeed = "first_contact_bytes_per_scope_feed", firstContactScopeFeeds = "first_contact_scope_feeds"
            case wallSeconds = "wall_seconds", setupSeconds = "setup_seconds"
        }
    }

    struct User: Sendable {
        let store: String
        let user: PublicKey
        let device: PublicKey
        var follows: [Int] = []
    }

    /// A relay a user's sync met in the last round: the users it was to
    /// bring, and how the session failed if it did.
    struct Met: Sendable {
        let relay: PublicKey
        let covers: Set<PublicKey>
        let failure: String?
    }

    struct Chat: Sendable {
        let creator: Int
        let members: [Int]
        let id: ChatID
    }

    /// Builds the network, runs the publishing pass and `rounds` rounds,
    /// and measures. `progress` hears a line per phase.
    public static func run(_ p: Parameters, progress: @Sendable (String) -> Void = { _ in }) async throws -> Result {
        let began = ContinuousClock.now
        var rng = SeededRandom(seed: p.seed)
        let network = NetworkConfig(networkKey: Random.bytes32())
        try FileManager.default.createDirectory(atPath: p.directory, withIntermediateDirectories: true)

        // Relays, serving what their users list.
        let relayOptions = SyncOptions.relay(hostsListed: true)
        var relays: [Served] = []
        for i in 0..<p.relays {
            let node = try await Node.create(at: p.directory + "/relay\(i)", deviceName: "relay\(i)", network: network)
            let server = try SyncServer(node: node, options: relayOptions)
            let listener = try await server.listen(host: "127.0.0.1", port: 0)
            let address = "127.0.0.1:\(listener.port)"
            let key = node.identity.device.raw
            relays.append((node, server, listener, { Relay(address: address, key: key, roles: $0) }))
        }
        do {
            let result = try await simulate(p, relays: relays, network: network, rng: &rng, started: began, progress: progress)
            for r in relays { await r.listener.shutdown(); await r.server.shutdown(); await r.node.close() }
            return result
        } catch {
            for r in relays { await r.listener.shutdown(); await r.server.shutdown(); await r.node.close() }
            throw error
        }
    }

    typealias Served = (node: Node, server: SyncServer, listener: SecureListener, relay: @Sendable (Relay.Roles) -> Relay)

    static func simulate(
        _ p: Parameters, relays: [Served], network: NetworkConfig, rng: inout SeededRandom, started began: ContinuousClock.Instant,
        progress: @Sendable (String) -> Void
    ) async throws -> Result {
        var network = network
        network.bootstrapRelays = relays.prefix(p.bootstrapRelays).map {
            let relay = $0.relay(.home)
            return BootstrapRelay(address: relay.address, key: relay.key)
        }
        progress("\(p.relays) relays listening")

        // Every random choice first, in user order, from the seed.
        var lists: [[Relay]] = []
        var postCounts: [Int] = []
        for _ in 0..<p.users {
            var homes = Set<Int>()
            while homes.count < min(2, p.relays) { homes.insert(Int.random(in: 0..<p.relays, using: &rng)) }
            var inbox = Int.random(in: 0..<p.relays, using: &rng)
            if p.inboxOnHome {
                inbox = homes.sorted()[inbox % homes.count]
            } else if p.relays > 2 {
                while homes.contains(inbox) { inbox = Int.random(in: 0..<p.relays, using: &rng) }
            }
            var list = homes.sorted().map { relays[$0].relay(homes.contains(inbox) && $0 == inbox ? .all : .home) }
            if !homes.contains(inbox) { list.append(relays[inbox].relay(.inbox)) }
            lists.append(list)
            postCounts.append(Int.random(in: 1...p.maxPosts, using: &rng))
        }

        // Users: identities, relay lists, posts.
        let made = try await eachUser(p) { [network, lists, postCounts] i -> (User, [PictureID]) in
            let store = p.directory + "/u\(i)"
            let node = try await Node.create(at: store, deviceName: "u\(i)", network: network)
            do {
                _ = try await node.setRelays(lists[i])
                var mine: [PictureID] = []
                for k in 0..<postCounts[i] {
                    mine.append(try await node.addPicture(Array("picture \(k) of u\(i) ".utf8) + Random.bytes(64), mime: "image/png").object)
                }
                await node.close()
                return (User(store: store, user: node.identity.user.raw, device: node.identity.device.raw), mine)
            } catch {
                await node.close()
                throw error
            }
        }
        var users = made.map(\.0)
        let pictures = made.map(\.1)
        progress("\(p.users) users created")

        // A power-law follow graph: popularity by Zipf rank, follow counts by Pareto.
        let weights = (0..<p.users).map { 1 / pow(Double($0 + 1), 0.9) }
        var cumulative: [Double] = []
        var sum = 0.0
        for w in weights {
            sum += w
            cumulative.append(sum)
        }
        let order = (0..<p.users).shuffled(using: &rng)  // who is popular
        func popular(_ rng: inout SeededRandom) -> Int {
            let x = Double.random(in: 0..<sum, using: &rng)
            var lo = 0
            var hi = cumulative.count - 1
            while lo < hi {
                let mid = (lo + hi) / 2
                if cumulative[mid] < x { lo = mid + 1 } else { hi = mid }
            }
            return order[lo]
        }
        var result = Result()
        var chatMembers: [Int: [Int]] = [:]  // creator → the two members
        for i in 0..<p.users {
            let u = Double.random(in: Double.ulpOfOne..<1, using: &rng)
            let want = min(p.maxFollows, p.users - 1, Int(Double(p.minFollows) / pow(u, 1 / 1.5)))
            var follows = Set<Int>()
            var tries = 0
            while follows.count < want, tries < want * 20 {
                let j = popular(&rng)
                if j != i { follows.insert(j) }
                tries += 1
            }
            users[i].follows = follows.sorted()
            result.follows += follows.count
            if users[i].follows.count >= 2, Double.random(in: 0..<1, using: &rng) < p.chatFraction {
                chatMembers[i] = Array(users[i].follows.shuffled(using: &rng).prefix(2))
            }
        }
        let everyone = users
        let started = try await eachUser(p) { [chatMembers] i -> Chat? in
            let me = everyone[i]
            let node = try await Node.open(at: me.store)
            do {
                for j in me.follows { _ = try await node.follow(UserID(everyone[j].user)) }
                // Likes of a followed user's picture (held or not: a like names its object).
                for j in me.follows.prefix(3) {
                    if let picture = pictures[j].first { _ = try await node.like(picture) }
                }
                var chat: Chat? = nil
                if let members = chatMembers[i] {
                    let id = try await node.createChat(title: "chat of u\(i)", members: members.map { UserID(everyone[$0].user) }).object
                    _ = try await node.sendMessage(id, text: "hello from u\(i)")
                    chat = Chat(creator: i, members: members, id: id)
                }
                await node.close()
                return chat
            } catch {
                await node.close()
                throw error
            }
        }
        let chats = started.compactMap { $0 }
        result.chats = chats.count
        progress("\(result.follows) follows, \(chats.count) chats")

        // Publishing: each user's node syncs with its own relays and the bootstrap relays.
        _ = try await eachUser(p) { i in
            try await withNode(at: everyone[i].store) { node in
                _ = try await SyncNetwork.syncByRelayLists(node, scope: ReplicationScope(hops: 0))
            }
        }
        // The relays' directory exchange with the bootstrap relays, as
        // `chorus serve` runs it every minute (Specs/sync.md §4.12): every
        // relay then holds every user's relay list.
        for r in relays {
            for exchange in await SyncNetwork.exchangeDirectory(r.node, hostsListed: true, bootstrapRelays: network.bootstrapRelays) {
                if case .failure(let error) = exchange.outcome {
                    throw SyncError.local("relay \(r.node.identity.device.short)'s directory exchange with \(exchange.relay.address) failed: \(error)")
                }
            }
        }
        // Each chat's creator syncs once more, as an app does after a while:
        // its own relays now tell it its members' devices (the directory), so
        // it wraps the chat key to them and leaves the wraps at their inboxes.
        let creators = chats.map(\.creator)
        _ = try await eachUser(p, creators) { i in
            try await withNode(at: everyone[i].store) { node in
                _ = try await SyncNetwork.syncByRelayLists(node, scope: ReplicationScope(hops: 0))
            }
        }
        result.setupSeconds = seconds(ContinuousClock.now - began)
        progress("published in \(String(format: "%.1f", result.setupSeconds)) s")

        // The rounds: every user syncs by its relay lists with its scope.
        var connections: [Int] = []
        var reasons: [String: Int] = [:]
        var scopeFeedsAtFirstContact = 0
        var due = try await heights(of: users)
        for round in 0..<p.rounds {
            let synced = try await eachUser(p) { i in
                try await withNode(at: everyone[i].store) { node in
                    let checksBefore = node.signatureChecks.load(ordering: .relaxed)
                    let (plan, results) = try await SyncNetwork.syncByRelayLists(node, scope: ReplicationScope(hops: 1))
                    let met = results.map { r -> Met in
                        if case .failure(let error) = r.outcome { return Met(relay: r.relay.key, covers: Set(r.relay.covers), failure: "\(error)") }
                        return Met(relay: r.relay.key, covers: Set(r.relay.covers), failure: nil)
                    }
                    var counts = (new: 0, duplicate: 0, checks: node.signatureChecks.load(ordering: .relaxed) - checksBefore)
                    for r in results {
                        guard case .success(let report) = r.outcome else { continue }
                        counts.new += report.eventsReceived
                        counts.duplicate += report.duplicatesReceived
                    }
                    return (plan.relays.map(\.reasons), met, counts)
                }
            }
            let plans = synced.map(\.0)
            let met = synced.map(\.1)
            for (_, _, counts) in synced {
                result.roundEventsNew += counts.new
                result.roundEventsDuplicate += counts.duplicate
                result.roundSignatureChecks += counts.checks
            }
            var firstReasons: [String: Int] = [:]
            for plan in plans {
                connections.append(plan.count)
                for relay in plan { if let first = relay.first { firstReasons[first, default: 0] += 1 } }
                if round == p.rounds - 1 { for relay in plan { for reason in relay { reasons[reason, default: 0] += 1 } } }
            }
            result.connectionsByFirstReasonByRound.append(firstReasons.mapValues { Double($0) / Double(max(1, p.users)) })
            let thisRound = connections.suffix(p.users)
            result.connectionsPerSyncMeanByRound.append(Double(thisRound.reduce(0, +)) / Double(max(1, thisRound.count)))
            let measured = try await measure(users: users, chats: chats, relays: relays.map(\.node), due: due, met: met)
            due = measured.heights
            result.deliveryFollowsByRound.append(measured.follows)
            result.deliveryInvitationsByRound.append(measured.invitations)
            result.deliveryKeyWrapsByRound.append(measured.keyWraps)
            result.followersKnownByRound.append(measured.followersKnown)
            result.delivery = measured.all
            result.misses = measured.misses
            progress("round \(round + 1): delivery \(measured.all)")
        }
        // First contact as the scoped benchmark measures it: nodes that hold
        // the same events, nothing remembered of each other (peer records
        // forgotten), so the bytes are the protocol's, not the events'.
        let sample = Array(stride(from: 0, to: p.users, by: max(1, p.users / p.firstContactSample)))
        let contacts = try await eachUser(p, sample) { i in
            try await withNode(at: everyone[i].store) { node in
                let peers = try PeerStore(node: node)
                for record in try peers.all() { try await peers.forget(record.key) }
                let (_, results) = try await SyncNetwork.syncByRelayLists(node, scope: ReplicationScope(hops: 1))
                let bytes = results.compactMap { r -> Int? in
                    guard case .success(let report) = r.outcome else { return nil }
                    return report.bytesSent + report.bytesReceived
                }
                return (bytes, try ReplicationScope(hops: 1).feeds(of: node)?.count ?? 0)
            }
        }
        for (bytes, feeds) in contacts {
            result.firstContactSessions += bytes.count
            result.firstContactBytes += bytes.reduce(0, +)
            scopeFeedsAtFirstContact += feeds
        }
        result.signatureChecksPerNewEvent = Double(result.roundSignatureChecks) / Double(max(1, result.roundEventsNew))
        result.connectionsPerSyncMean = connections.isEmpty ? 0 : Double(connections.reduce(0, +)) / Double(connections.count)
        result.connectionsPerSyncMax = connections.max() ?? 0
        result.connectionsByReasonLastRound = reasons.mapValues { Double($0) / Double(max(1, p.users)) }
        result.firstContactScopeFeeds = scopeFeedsAtFirstContact
        if scopeFeedsAtFirstContact > 0 {
            let overhead = 2048 * result.firstContactSessions
            result.firstContactBytesPerScopeFeed = Double(max(0, result.firstContactBytes - overhead)) / Double(scopeFeedsAtFirstContact)
        }

        // What the relays hold against the ideal share.
        for u in users {
            let node = try await Node.open(at: u.store, readOnly: true)
            result.deviceEvents += Int(try node.head(of: u.device)?.seq ?? 0)
            result.directoryEvents += Int(try node.head(of: u.user)?.seq ?? 0)
            await node.close()
        }
        for r in relays {
            let held = try r.node.log.eventCount() + (try InboxStore(readingFrom: r.node.store).count())
            result.relayEventsMax = max(result.relayEventsMax, held)
        }
        result.relayEventsIdeal = Double(result.deviceEvents) * 2 / Double(max(1, p.relays)) + Double(result.directoryEvents)
        result.relayEventsMaxOverIdeal = Double(result.relayEventsMax) / max(1, result.relayEventsIdeal)
        result.users = p.users
        result.relays = p.relays
        result.wallSeconds = seconds(ContinuousClock.now - began)
        return result
    }

    /// `body` for every user (or those of `only`), `p.concurrency` at a
    /// time; the results in user order, or the first error.
    static func eachUser<T: Sendable>(
        _ p: Parameters, _ only: [Int]? = nil, _ body: @escaping @Sendable (Int) async throws -> T
    ) async throws -> [T] {
        let outcomes = await concurrentMap(only ?? Array(0..<p.users), limit: p.concurrency) { i -> Swift.Result<T, any Error> in
            do { return .success(try await body(i)) } catch { return .failure(error) }
        }
        return try outcomes.map { try $0.get() }
    }

    /// `body` with the store at `path` open, closed after whatever happens.
    static func withNode<T: Sendable>(at path: String, _ body: (Node) async throws -> T) async throws -> T {
        let node = try await Node.open(at: path)
        do {
            let value = try await body(node)
            await node.close()
            return value
        } catch {
            await node.close()
            throw error
        }
    }

    /// Each user's device feed height in its own store.
    static func heights(of users: [User]) async throws -> [UInt64] {
        var out: [UInt64] = []
        for u in users {
            let node = try await Node.open(at: u.store, readOnly: true)
            out.append(try node.head(of: u.device)?.seq ?? 0)
            await node.close()
        }
        return out
    }

    /// Delivery as it stands: every (follower, followed) pair against the
    /// followed feed's height `due` (at the round's start), every chat
    /// invitation and key wrap; and every device feed's height now.
    static func measure(
        users: [User], chats: [Chat], relays: [Node], due: [UInt64], met: [[Met]]
    ) async throws -> (
        follows: Double, invitations: Double, keyWraps: Double, all: Double, followersKnown: Double, misses: [String: Int], heights: [UInt64]
    ) {
        var heights: [UInt64] = []
        var headKinds: [String] = []
        var knownDevices: [Int: Set<PublicKey>] = [:]  // creator → member devices it knows
        let creators = Set(chats.map(\.creator))
        for (i, u) in users.enumerated() {
            let node = try await Node.open(at: u.store, readOnly: true)
            heights.append(try node.head(of: u.device)?.seq ?? 0)
            headKinds.append(try node.feed(u.device, fromSeq: max(1, due[i]), limit: 1).first.map { $0.event.header.kind.name } ?? "none")
            if creators.contains(i) {
                for chat in chats where chat.creator == i {
                    for m in chat.members { for d in try node.projections.devices(of: users[m].user) { knownDevices[i, default: []].insert(d.device.raw) } }
                }
            }
            await node.close()
        }
        var pairs = 0
        var delivered = 0
        var invitations = 0
        var invited = 0
        var wraps = 0
        var readable = 0
        var misses: [String: Int] = [:]
        var membership: [Int: [Chat]] = [:]
        for chat in chats { for m in chat.members { membership[m, default: []].append(chat) } }
        var followers: [Int: Set<PublicKey>] = [:]  // followed → its followers' user keys
        for (i, u) in users.enumerated() { for j in u.follows { followers[j, default: []].insert(users[i].user) } }
        var followerPairs = 0
        var followersKnown = 0
        for (i, u) in users.enumerated() {
            let node = try await Node.open(at: u.store, readOnly: true)
            if let expected = followers[i] {
                followerPairs += expected.count
                followersKnown += expected.intersection(try node.projections.followers(of: u.user)).count
            }
            for j in u.follows {
                pairs += 1
                let held = try node.head(of: users[j].device)?.seq ?? 0
                if held >= due[j] {
                    delivered += 1
                } else {
                    // Behind: the kind of the last event due says what was missed.
                    misses[held == 0 ? "followed_feed_not_fetched" : "followed_feed_behind_\(headKinds[j])", default: 0] += 1
                }
            }
            for chat in membership[i] ?? [] {
                invitations += 1
                wraps += 1
                let creator = users[chat.creator]
                guard let view = try node.projections.chatView(chat.id) else {
                    misses[try invitationMiss(member: u, creator: creator, chat: chat.id, at: node, relays: relays, met: met[i]), default: 0] += 1
                    continue
                }
                invited += 1
                if (try? node.readableChat(view).title?.value) != nil {
                    readable += 1
                } else {
                    misses[knownDevices[chat.creator, default: []].contains(u.device) ? "wrap_not_arrived" : "wrap_not_written", default: 0] += 1
                }
            }
            await node.close()
        }
        func ratio(_ a: Int, _ b: Int) -> Double { b == 0 ? 1 : Double(a) / Double(b) }
        return (
            ratio(delivered, pairs), ratio(invited, invitations), ratio(readable, wraps), ratio(delivered + invited + readable, pairs + invitations + wraps),
            ratio(followersKnown, followerPairs), misses, heights
        )
    }

    /// Where a chat invitation stopped on its way from `creator` to `member`.
    static func invitationMiss(member: User, creator: User, chat: ChatID, at node: Node, relays: [Node], met: [Met]) throws -> String {
        // The notice of this chat's invitation, not any notice of the creator's.
        func isInvitation(_ envelope: [UInt8]) -> Bool {
            guard let event = try? Event.decode(envelope) else { return false }
            return event.author == creator.device && event.kind == .chatCreated && event.object == chat.raw
        }
        let atRelay = try relays.contains { relay in
            try InboxStore(readingFrom: relay.store).notices(for: member.user).notices.contains { isInvitation($0.envelope) }
        }
        if !atRelay { return "invitation_not_left" }
        if !(try InboxStore(readingFrom: node.store).notices(for: member.user).notices.contains { isInvitation($0.envelope) }) {
            return "invitation_not_taken"
        }
        guard let list = try node.projections.relays(of: UserID(creator.user)) else { return "creator_list_unknown" }
        let homes = list.relays.filter { $0.roles.contains(.home) }.map(\.key)
        let atHome = try relays.contains { relay in
            try homes.contains(relay.identity.device.raw) && (relay.head(of: creator.device)?.seq ?? 0) > 0
        }
        if !atHome { return "creator_feed_not_at_home" }
        let metHomes = met.filter { homes.contains($0.relay) }
        if metHomes.isEmpty { return "creator_home_not_met" }
        if metHomes.allSatisfy({ $0.failure != nil }) { return "creator_home_failed" }
        if !metHomes.contains(where: { $0.covers.contains(creator.user) }) { return "creator_home_not_covering" }
        return "creator_feed_not_fetched"
    }
}

/// SplitMix64: a small seeded generator, so a network or a workload can be
/// built again from its seed.
public struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    /// A generator whose sequence is fixed by `seed`.
    public init(seed: UInt64) { state = seed }
    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func seconds(_ d: Duration) -> Double { Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18 }
