import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusStorage
import Foundation

/// Which relays a node syncs with when no address is given (Specs/sync.md
/// §9): its own user's relays (to publish its events and receive what is
/// addressed to it), the network's bootstrap relays (where relay lists are
/// found), the `inbox` relays of the members of its chats (to deliver
/// invitations and chat keys), and a small set of `home` relays covering
/// every user in its scope, picked greedily.
public struct RelayPlan: Sendable, Hashable {
    /// One relay to sync with and why.
    public struct Entry: Sendable, Hashable {
        /// `host:port`.
        public let address: String
        /// The device key the relay's handshake must prove.
        public let key: PublicKey
        /// Users in scope whose feeds this relay is chosen to bring (their `home`).
        public var covers: [PublicKey]
        /// Why it is in the plan: `own`, `bootstrap`, `inbox` or `home`, in that order.
        public var reasons: [String]

        /// A relay at `address` proving `key`, chosen for `reasons`.
        public init(address: String, key: PublicKey, covers: [PublicKey], reasons: [String]) {
            self.address = address
            self.key = key
            self.covers = covers
            self.reasons = reasons
        }
    }

    /// The relays, own relays first, at most `maxRelays`.
    public var relays: [Entry]
    /// Users in scope with a relay list whose `home` relays the plan could not include (over `maxRelays`).
    public var uncovered: [PublicKey]
    /// Users in scope without a relay list: fetched from whichever relays the plan holds.
    public var unlisted: [PublicKey]

    /// A plan of these relays (`make` chooses them from relay lists).
    public init(relays: [Entry], uncovered: [PublicKey], unlisted: [PublicKey]) {
        self.relays = relays
        self.uncovered = uncovered
        self.unlisted = unlisted
    }

    /// The plan for `node` (its scope from `scope`), with at most `maxRelays` relays.
    public static func make(for node: Node, scope: ReplicationScope, maxRelays: Int) throws -> RelayPlan {
        let p = node.projections
        let me = node.identity.user
        var entries: [Entry] = []
        func add(_ address: String, _ key: PublicKey, _ reason: String, covering users: [PublicKey] = []) {
            if let i = entries.firstIndex(where: { $0.key == key }) {
                if !entries[i].reasons.contains(reason) { entries[i].reasons.append(reason) }
                entries[i].covers += users.filter { !entries[i].covers.contains($0) }
            } else if entries.count < maxRelays {
                entries.append(Entry(address: address, key: key, covers: users, reasons: [reason]))
            }
        }
        // Own relays first: publishing and the own inbox never wait on coverage.
        for relay in try p.relays(of: me)?.relays ?? [] { add(relay.address, relay.key, "own", covering: relay.roles.contains(.home) ? [me.raw] : []) }
        // The network's bootstrap relays: where relay lists are found before any is known.
        for relay in node.network.bootstrapRelays { add(relay.address, relay.key, "bootstrap") }
        // Inboxes of the people this user writes to (chat members).
        var members: Set<PublicKey> = []
        for chat in try p.chats(of: me.raw) { for m in chat.members where m.user.raw != me.raw { members.insert(m.user.raw) } }
        for user in members.sorted() {
            for relay in try p.relays(of: UserID(user))?.relays ?? [] where relay.roles.contains(.inbox) {
                add(relay.address, relay.key, "inbox")
            }
        }
        // Home relays covering the users in scope, greedily.
        let users = try Self.users(of: node, scope: scope).subtracting([me.raw])
        var homes: [PublicKey: [Relay]] = [:]
        var unlisted: [PublicKey] = []
        for user in users.sorted() {
            let list = try p.relays(of: UserID(user))?.relays.filter { $0.roles.contains(.home) } ?? []
            if list.isEmpty { unlisted.append(user) } else { homes[user] = list }
        }
        // Users a relay chosen above is home to are covered already.
        var pending = Set(homes.keys)
        for i in entries.indices {
            let served = homes.filter { $0.value.contains { $0.key == entries[i].key } }.keys.sorted()
            entries[i].covers += served.filter { !entries[i].covers.contains($0) }
            pending.subtract(served)
        }
        // A user left uncovered by earlier syncs weighs more (one more per
        // sync it waited), so when `maxRelays` cannot cover everyone, the
        // next syncs take the users this one left out.
        let waited = try RoutingMemory(env: node.log.env).syncsWaited(pending)
        // The members of this user's chats and whoever invited it or wrapped
        // it a key come before followed users and followers: an invitation
        // or a key wrap waits on them.
        let urgent = members.union(try InboxStore.correspondents(of: me.raw, at: node).chats)
        while !pending.isEmpty, entries.count < maxRelays {
            // The relay that serves the most pending users, by weight; ties
            // go to the relay users list earlier, then the smaller key, so
            // every node with the same lists and history picks alike.
            var tally: [PublicKey: (relay: Relay, users: [PublicKey], rank: Int, weight: UInt64)] = [:]
            for user in pending.sorted() {
                for (rank, relay) in (homes[user] ?? []).enumerated() {
                    var t = tally[relay.key] ?? (relay, [], 0, 0)
                    t.users.append(user)
                    t.rank += rank
                    t.weight += 1 + (waited[user] ?? 0) + (urgent.contains(user) ? Self.urgentWeight : 0)
                    tally[relay.key] = t
                }
            }
            func better(
                _ a: (relay: Relay, users: [PublicKey], rank: Int, weight: UInt64), _ b: (relay: Relay, users: [PublicKey], rank: Int, weight: UInt64)
            ) -> Bool {
                if a.weight != b.weight { return a.weight > b.weight }
                if a.rank != b.rank { return a.rank < b.rank }
                return a.relay.key.bytes.lexicographicallyPrecedes(b.relay.key.bytes)
            }
            guard let best = tally.values.min(by: better) else { break }
            add(best.relay.address, best.relay.key, "home", covering: best.users)
            pending.subtract(best.users)
        }
        // Inboxes where this node's own addressed events (follows, gifts)
        // still wait to be left, most waiting first, while there is room.
        for waiting in try InboxStore.pending(at: node) {
            add(waiting.relay.address, waiting.relay.key, "inbox")
        }
        return RelayPlan(relays: entries, uncovered: pending.sorted(), unlisted: unlisted)
    }

    /// The weight a chat member or a correspondent adds in the greedy cover:
    /// more than any number of followed users can.
    static let urgentWeight: UInt64 = 1 << 32

    /// The users whose feeds the node replicates: those of `scope`, or,
    /// for every feed, every user whose relay list this node holds.
    static func users(of node: Node, scope: ReplicationScope) throws -> Set<PublicKey> {
        if let users = try scope.users(of: node) { return users }
        return Set(try node.projections.relayLists().map(\.user.raw)).union([node.identity.user.raw])
            .union(try InboxStore.correspondents(of: node.identity.user.raw, at: node).users)
    }
}

/// What one relay of a routed sync did (`SyncNetwork.syncRouted`).
public struct RelaySyncResult: Sendable {
    /// The relay and why it was chosen.
    public let relay: RelayPlan.Entry
    /// Its sync's report, or why it failed.
    public let outcome: Result<SyncReport, any Error>
}

/// Why a relay connection was refused before its session.
public struct RelayIdentityMismatch: Error, CustomStringConvertible, Sendable {
    /// The relay's address.
    public let address: String
    /// The key the relay list names.
    public let expected: PublicKey
    /// The key the handshake proved.
    public let proved: PublicKey

    /// What was refused and why.
    public var description: String {
        "the relay at \(address) proved device key \(proved.short), not \(expected.short) as its relay list says: not syncing with it"
    }
}

extension SyncNetwork {
    /// Connects to `host:port`, checks that the peer proves `key` (the pinned
    /// key of a relay list), and runs one sync as `sync` does.
    public static func sync(
        _ node: Node, relay address: String, key: PublicKey, options: SyncOptions = SyncOptions()
    ) async throws -> SyncReport {
        guard let (host, port) = parseAddress(address) else { throw SyncError.local("\"\(address)\" is not HOST:PORT") }
        return try await sync(node, host: host, port: port, options: options, expecting: key)
    }

    /// Syncs by relay lists (Specs/sync.md §9) in rounds: with the relays
    /// of the plan, then, since those syncs may have brought relay lists and
    /// notices this node did not hold, with the relays a new plan adds or
    /// changes, at most `maxRounds` rounds. Returns the final plan and every
    /// session's result.
    public static func syncByRelayLists(
        _ node: Node, scope: ReplicationScope, maxRelays: Int = 8, options: SyncOptions = SyncOptions()
    ) async throws -> (plan: RelayPlan, results: [RelaySyncResult]) {
        // Each session replicates the scope the plan is made for.
        var options = options
        options.scope = scope
        options.inbox = true
        var plan = try RelayPlan.make(for: node, scope: scope, maxRelays: maxRelays)
        var round = plan
        var results: [RelaySyncResult] = []
        var covered: [PublicKey: Set<PublicKey>] = [:]
        for _ in 0..<maxRounds {
            let synced = await syncRouted(node, plan: round, options: options)
            results += synced
            for entry in round.relays { covered[entry.key, default: []].formUnion(entry.covers) }
            // A session that ran while a parallel one took notices missed
            // their senders: every relay is met again (a full session, the
            // scope having changed). Otherwise the relays the new plan adds,
            // those that now cover users they did not, and those where own
            // addressed events wait to be left (their addressees' lists
            // arrived in this round).
            let noticed = synced.contains { if case .success(let r) = $0.outcome { r.noticesReceived > 0 } else { false } }
            plan = try RelayPlan.make(for: node, scope: scope, maxRelays: maxRelays)
            let waiting = Set(try InboxStore.pending(at: node).map(\.relay.key))
            round = plan
            round.relays = plan.relays.filter { entry in
                guard let before = covered[entry.key] else { return true }
                return noticed || !Set(entry.covers).isSubset(of: before) || waiting.contains(entry.key)
            }
            if round.relays.isEmpty { break }
        }
        // Users whose home relay was synced wait no more; the others one sync more.
        let synced = results.filter { if case .success = $0.outcome { true } else { false } }.flatMap(\.relay.covers)
        try RoutingMemory(env: node.log.env).endSync(covered: Set(synced))
        // Every relay synced, each once.
        var seen: Set<PublicKey> = []
        plan.relays = results.map(\.relay).filter { seen.insert($0.key).inserted }
        return (plan, results)
    }

    /// Rounds of `syncByRelayLists`, at most: a notice's sender is found in
    /// the second (its relay list) and fetched in the third (its home relays).
    public static let maxRounds = 3

    /// Syncs with every relay of `plan` at once (Specs/sync.md §9), each
    /// pinned to its listed key; one failing relay does not stop the others.
    public static func syncRouted(_ node: Node, plan: RelayPlan, options: SyncOptions = SyncOptions()) async -> [RelaySyncResult] {
        await withTaskGroup(of: (Int, RelaySyncResult).self) { group in
            for (i, relay) in plan.relays.enumerated() {
                group.addTask {
                    do {
                        return (i, RelaySyncResult(relay: relay, outcome: .success(try await sync(node, relay: relay.address, key: relay.key, options: options))))
                    } catch {
                        return (i, RelaySyncResult(relay: relay, outcome: .failure(error)))
                    }
                }
            }
            var results: [(Int, RelaySyncResult)] = []
            for await r in group { results.append(r) }
            return results.sorted { $0.0 < $1.0 }.map(\.1)
        }
    }
}

/// What syncing by relay lists remembers between syncs (the `routing`
/// database, Specs/storage.md): a counter of syncs, and per user the sync at
/// which one of its home relays was last synced, so that users a plan could
/// not cover weigh more in the next plan (Specs/sync.md §9).
public final class RoutingMemory: Sendable {
    let env: Environment
    let db: Database
    static let counterKey: [UInt8] = [0]
    static let userPrefix: UInt8 = 1

    /// Opens (creating if needed) the `routing` database of `env`.
    public init(env: Environment) throws {
        self.env = env
        db = try env.openDatabase("routing", create: !env.readOnly)
    }

    /// Syncs each of `users` has waited since one of its home relays was
    /// last synced (since the first sync, for a user never covered).
    public func syncsWaited(_ users: Set<PublicKey>) throws -> [PublicKey: UInt64] {
        try env.read { txn in
            let now = try txn.get(db, Self.counterKey).map { InboxStore.readBE($0) } ?? 0
            var out: [PublicKey: UInt64] = [:]
            for user in users {
                let last = try txn.get(db, [Self.userPrefix] + user.bytes).map { InboxStore.readBE($0) } ?? 0
                if now > last { out[user] = now - last }
            }
            return out
        }
    }

    /// Ends a sync: `covered` were synced now; the counter moves on.
    public func endSync(covered: Set<PublicKey>) throws {
        try env.write { txn in
            let now = (try txn.get(db, Self.counterKey).map { InboxStore.readBE($0) } ?? 0) + 1
            for user in covered { try txn.put(db, [Self.userPrefix] + user.bytes, InboxStore.be(now)) }
            try txn.put(db, Self.counterKey, InboxStore.be(now))
        }
    }
}
