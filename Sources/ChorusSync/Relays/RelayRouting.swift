import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusParallel
import ChorusProjections
import ChorusStorage
import ChorusStore
import Foundation

/// Which relays a node syncs with when no address is given (Specs/sync.md
/// §9): its own user's relays (to publish its events and receive what is
/// addressed to it), the network's bootstrap relays while relay lists are
/// missing, the `inbox` relays where its addressed events wait (invitations,
/// chat keys, follows), and a small set of `home` relays covering every user
/// in its scope, picked greedily.
public struct RelayPlan: Sendable, Hashable {
    /// One relay to sync with and why.
    public struct Entry: Sendable, Hashable {
        /// `host:port`.
        public let address: String
        /// The device key the relay's handshake must prove.
        public let key: PublicKey
        /// Users in scope whose feeds this relay is chosen to bring (their `home`).
        public var covers: [PublicKey]
        /// Why it is in the plan: `own`, `former`, `bootstrap`, `inbox` or `home`, in that order.
        public var reasons: [String]

        /// A relay at `address` proving `key`, chosen for `reasons`.
        package init(address: String, key: PublicKey, covers: [PublicKey], reasons: [String]) {
            self.address = address
            self.key = key
            self.covers = covers
            self.reasons = reasons
        }
    }

    /// The relays, own relays first.
    public var relays: [Entry]
    /// Users in scope with a relay list every `home` relay of which failed earlier in the sync.
    public var uncovered: [PublicKey]
    /// Users in scope without a relay list: fetched from whichever relays the plan holds.
    public var unlisted: [PublicKey]
    /// Users in scope only because they followed or unfollowed this user
    /// (their notices wait here) whose home relays the plan leaves to a
    /// later sync (§9 step 5): no session fetches them this time.
    package var deferred: [PublicKey] = []
    /// Whether step 5 added its one relay more (a sync allows it once).
    package var addedForWhatCanWait = false

    /// A plan of these relays (`make` chooses them from relay lists).
    package init(relays: [Entry], uncovered: [PublicKey], unlisted: [PublicKey]) {
        self.relays = relays
        self.uncovered = uncovered
        self.unlisted = unlisted
    }

    /// The plan for `node` (its scope from `scope`): relays covering every
    /// user in scope whose list names a reachable `home` relay, none of those
    /// `avoiding` (relays that failed earlier in the same sync: their users
    /// are covered by their other home relays). What can wait a sync (users
    /// in scope only as followers, inboxes where only follows wait to be
    /// left) goes through the relays chosen for the rest and, with
    /// `extra` (until a plan of the sync has used it) and on this node's
    /// turn, one relay more; followers left are `deferred`. The turn comes
    /// every `Self.waitingTurn`-th sync, at a phase set by the user key, so
    /// what waits keeps moving while a sync meets fewer relays, and the
    /// nodes of a network take their turns at different syncs.
    package static func make(
        for node: Node, scope: ReplicationScope, avoiding: Set<PublicKey> = [], extra: Bool = true,
        askedOwn: Set<PublicKey> = []
    ) throws -> RelayPlan {
        let p = node.projections
        let me = node.identity.user
        var entries: [Entry] = []
        func canAdd(_ key: PublicKey) -> Bool { !avoiding.contains(key) }
        func add(_ address: String, _ key: PublicKey, _ reason: String, covering users: [PublicKey] = []) {
            guard canAdd(key) else { return }
            if let i = entries.firstIndex(where: { $0.key == key }) {
                if !entries[i].reasons.contains(reason) { entries[i].reasons.append(reason) }
                entries[i].covers += users.filter { !entries[i].covers.contains($0) }
            } else {
                entries.append(Entry(address: address, key: key, covers: users, reasons: [reason]))
            }
        }
        // The users in scope, by whether their lists name reachable home relays.
        let users = try Self.users(of: node, scope: scope).subtracting([me.raw])
        var homes: [PublicKey: [Relay]] = [:]
        var unlisted: [PublicKey] = []
        var unreachable: [PublicKey] = []  // every home relay avoided
        for user in users.sorted() {
            let listed = try p.relays(of: UserID(user))?.relays.filter { $0.roles.contains(.home) } ?? []
            let list = listed.filter { !avoiding.contains($0.key) }
            if listed.isEmpty { unlisted.append(user) } else if list.isEmpty { unreachable.append(user) } else { homes[user] = list }
        }
        let ownList = try p.relays(of: me)
        let memory = try RoutingMemory(node: node)
        let held = try memory.published()
        let own = OwnHeights(device: try node.head(of: node.identity.device.raw)?.seq ?? 0, user: try node.head(of: me.raw)?.seq ?? 0)
        // Own relays first: the own inbox every time (notices wait there),
        // an own home relay while it lacks this device's or the user key's
        // latest events, or while other devices of the user write there.
        let siblings = try p.devices(of: me.raw).contains { $0.device.raw != node.identity.device.raw }
        for relay in ownList?.relays ?? [] {
            let home = relay.roles.contains(.home)
            var stale = true
            if let last = held[relay.key] { stale = last.device < own.device || last.user < own.user }
            let needed: Bool = relay.roles.contains(.inbox) || (home && (stale || siblings))
            if needed {
                add(relay.address, relay.key, "own", covering: home ? [me.raw] : [])
            }
        }
        // Relays of this user's earlier lists, until they take the current
        // one: followers who know only the earlier list find the move there.
        for (key, address) in try memory.formerOwn().sorted(by: { $0.key.bytes.lexicographicallyPrecedes($1.key.bytes) })
        where !(ownList?.relays.contains { $0.key == key } ?? false) && (held[key]?.user ?? 0) < own.user {
            add(address, key, "former")
        }
        // The network's bootstrap relays, where relay lists are found: each
        // until it holds this user's list as it is now (so any one of them
        // answers for every user), every one while every home relay of a
        // user in scope failed, and one, chosen by this user's key so that
        // lookups spread over them, while this node lacks the list of its
        // own user or of a user in scope.
        let bootstrap = node.network.bootstrapRelays.filter { canAdd($0.key) }
        for relay in bootstrap where !unreachable.isEmpty || (held[relay.key]?.user ?? 0) < own.user {
            add(relay.address, relay.key, "bootstrap")
        }
        // A relay of this user's own list holds every user's list too (it
        // exchanges the directory with the bootstrap relays, §4.12), so a
        // plan that meets one asks it; the bootstrap relay is added for the
        // users an own relay was asked about (`askedOwn`) and did not know.
        let meetsOwn = entries.contains { e in ownList?.relays.contains { $0.key == e.key } ?? false }
        let lookUp = ownList == nil || (!unlisted.isEmpty && (!meetsOwn || unlisted.contains { askedOwn.contains($0) }))
        if lookUp, !bootstrap.isEmpty,
            !entries.contains(where: { e in bootstrap.contains { $0.key == e.key } })
        {
            let relay = bootstrap[Int(me.raw.bytes[0]) % bootstrap.count]
            add(relay.address, relay.key, "bootstrap")
        }
        // Inboxes where this node's own addressed events (invitations, key
        // wraps, gifts) wait to be left, most waiting first; those where
        // only follows wait are what can wait (below).
        let waitingInboxes = try InboxStore.pending(at: node)
        for waiting in waitingInboxes where !waiting.followsOnly {
            add(waiting.relay.address, waiting.relay.key, "inbox")
        }
        var members: Set<PublicKey> = []
        for chat in try p.chats(of: me.raw) { for m in chat.members where m.user.raw != me.raw { members.insert(m.user.raw) } }
        // Followers who are in scope for nothing else: their follow is the
        // only thing this node needs of them, and it can wait a sync.
        let correspondents = try InboxStore.correspondents(of: me.raw, at: node)
        let due = try scope.users(of: node, notices: false) ?? []
        let followers = correspondents.followersOnly.subtracting(due).subtracting(members).intersection(homes.keys)
        // Users a relay chosen above is home to are covered already.
        var pending = Set(homes.keys).subtracting(followers)
        var later = followers
        func coverByChosen(_ users: inout Set<PublicKey>) {
            for i in entries.indices {
                let served = users.filter { homes[$0]?.contains { $0.key == entries[i].key } ?? false }.sorted()
                entries[i].covers += served.filter { !entries[i].covers.contains($0) }
                users.subtract(served)
            }
        }
        coverByChosen(&pending)
        // A user left uncovered by earlier syncs (every home relay failed)
        // weighs more, one more per sync it waited.
        let waited = try memory.syncsWaited(pending.union(later))
        // The members of this user's chats and whoever invited it or wrapped
        // it a key come before followed users and followers: an invitation
        // or a key wrap waits on them.
        let urgent = members.union(correspondents.chats)
        func cover(_ pending: inout Set<PublicKey>, while more: () -> Bool) {
            while !pending.isEmpty && more() {
                // The relay that serves the most pending users, by weight; ties
                // go to the relay users list earlier, then the smaller key, so
                // every node with the same lists and history picks alike.
                var tally: [PublicKey: (relay: Relay, users: [PublicKey], rank: Int, weight: UInt64)] = [:]
                for user in pending.sorted() {
                    for (rank, relay) in (homes[user] ?? []).enumerated() where canAdd(relay.key) {
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
        }
        cover(&pending) { true }
        // What can wait a sync: inboxes where only follows wait to be left
        // (most waiting first), then followers (the longest waiting first),
        // through the relays chosen and, on this node's turn, one relay more.
        let chosen = entries.count
        let turn = Self.isWaitingTurn(of: me, at: try memory.syncs())
        let limit = chosen + (extra && turn ? 1 : 0)
        for waiting in waitingInboxes where waiting.followsOnly {
            if entries.contains(where: { $0.key == waiting.relay.key }) || entries.count < limit {
                add(waiting.relay.address, waiting.relay.key, "inbox")
            }
        }
        coverByChosen(&later)
        cover(&later) { entries.count < limit }
        var plan = RelayPlan(relays: entries, uncovered: pending.union(unreachable).sorted(), unlisted: unlisted)
        plan.deferred = later.sorted()
        plan.addedForWhatCanWait = entries.count > chosen
        return plan
    }

    /// Per relay, the users of the scope that other relays of the plan
    /// cover and that its session therefore leaves to them (§9 "Shares").
    /// `me`, this node's user, is never left out: its user key's feed is
    /// the directory entry every listed relay keeps (§8.1).
    func shares(without me: PublicKey) -> [PublicKey: Set<PublicKey>] {
        let coverers = Set(relays.flatMap(\.covers)).subtracting([me])
        var out: [PublicKey: Set<PublicKey>] = [:]
        for entry in relays { out[entry.key, default: coverers.union(deferred)].subtract(entry.covers) }
        return out
    }

    /// Every this many syncs by relay lists, what can wait adds its relay
    /// (§9 step 5): a relay more costs a connection, and what waits there
    /// (a follow to leave, a follower to fetch) can wait a sync.
    package static let waitingTurn: UInt64 = 2

    /// Whether the sync that follows `syncs` ended syncs by relay lists is
    /// `user`'s turn to add a relay for what can wait: the user key's first
    /// byte sets the phase, so a network's nodes do not all take it at once.
    package static func isWaitingTurn(of user: UserID, at syncs: UInt64) -> Bool {
        (syncs + UInt64(user.raw.bytes[0])) % waitingTurn == 0
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

extension SyncNetwork {
    /// Connects to `host:port`, checks that the peer proves `key` (the pinned
    /// key of a relay list), and runs one sync as `sync` does.
    package static func sync(
        _ node: Node, relay address: String, key: PublicKey, options: SyncOptions = SyncOptions()
    ) async throws -> SyncReport {
        guard let (host, port) = parseAddress(address) else { throw SyncError.local("\"\(address)\" is not HOST:PORT") }
        return try await sync(node, host: host, port: port, options: options, expecting: key)
    }

    /// Syncs by relay lists (Specs/sync.md §9) in rounds: with the relays
    /// of the plan, then, since those syncs may have brought relay lists and
    /// notices this node did not hold, with the relays a new plan adds or
    /// changes, at most `maxRounds` rounds, with at most `maxConnections`
    /// sessions at once. Returns the final plan and every session's result.
    public static func syncByRelayLists(
        _ node: Node, scope: ReplicationScope, maxConnections: Int = 8, options: SyncOptions = SyncOptions()
    ) async throws -> (plan: RelayPlan, results: [RelaySyncResult]) {
        // Each session replicates the scope the plan is made for.
        var options = options
        options.scope = scope
        options.inbox = true
        func ownHeights() throws -> OwnHeights {
            OwnHeights(device: try node.head(of: node.identity.device.raw)?.seq ?? 0, user: try node.head(of: node.identity.user.raw)?.seq ?? 0)
        }
        var offered: [PublicKey: OwnHeights] = [:]  // per relay, the own feeds' heights when its last complete session began
        var plan = try RelayPlan.make(for: node, scope: scope)
        var extraUsed = plan.addedForWhatCanWait
        var round = plan
        var results: [RelaySyncResult] = []
        var covered: [PublicKey: Set<PublicKey>] = [:]
        var leftOut: [PublicKey: Set<PublicKey>] = [:]  // per relay, the users its last session left to others
        var failed: Set<PublicKey> = []
        let ownRelays = Set(try node.projections.relays(of: node.identity.user)?.relays.map(\.key) ?? [])
        var askedOwn: Set<PublicKey> = []  // users without a list a completed session with an own relay was asked about (§9 step 2)
        for _ in 0..<maxRounds {
            let shares = plan.shares(without: node.identity.user.raw)
            let heights = try ownHeights()
            let synced = await syncRouted(node, plan: round, shares: plan, maxConnections: maxConnections, options: options)
            results += synced
            for r in synced {
                if case .failure = r.outcome {
                    failed.insert(r.relay.key)
                } else if case .success(let report) = r.outcome {
                    if ownRelays.contains(r.relay.key), report.complete { askedOwn.formUnion(round.unlisted) }
                    covered[r.relay.key, default: []].formUnion(r.relay.covers)
                    leftOut[r.relay.key] = shares[r.relay.key] ?? []
                    if report.complete { offered[r.relay.key] = heights }
                }
            }
            // A session that ran while a parallel one took notices missed
            // their senders: every relay is met again (a full session, the
            // scope having changed). Otherwise the relays the new plan adds,
            // those that now cover users they did not (their lists arrived),
            // those whose share now takes users an earlier session left to
            // another relay (that relay failed and is avoided now), and those
            // where own addressed events wait to be left (their addressees'
            // lists arrived in this round), and own home relays when this
            // node wrote events during the sync (chat keys it wrapped).
            let noticed = synced.contains { if case .success(let r) = $0.outcome { r.noticesReceived > 0 } else { false } }
            plan = try RelayPlan.make(
                for: node, scope: scope, avoiding: failed, extra: !extraUsed, askedOwn: askedOwn)
            extraUsed = extraUsed || plan.addedForWhatCanWait
            let next = plan.shares(without: node.identity.user.raw)
            let waiting = Set(try InboxStore.pending(at: node).map(\.relay.key))
            let now = try ownHeights()
            // Users without a list that no own relay was asked about yet
            // (they came into scope during the round): the own relays are
            // asked again, before the bootstrap relays are (§9 step 2).
            let unasked = !Set(plan.unlisted).subtracting(askedOwn).isEmpty
            round = plan
            round.relays = plan.relays.filter { entry in
                if unasked, ownRelays.contains(entry.key) { return true }
                guard let before = covered[entry.key] else { return true }
                let regained = !(leftOut[entry.key] ?? []).subtracting(next[entry.key] ?? []).isEmpty
                let behind = entry.covers.contains(node.identity.user.raw) && offered[entry.key].map { $0.device < now.device || $0.user < now.user } ?? true
                return noticed || regained || behind || !Set(entry.covers).isSubset(of: before) || waiting.contains(entry.key)
            }
            if round.relays.isEmpty { break }
        }
        // Events this node wrote during the last round (chat keys it wrapped
        // for devices that round made known) go to its home relays now, not
        // at the next sync: a session offers only what was written before it.
        let me = node.identity.user.raw
        let now = try ownHeights()
        let held = try RoutingMemory(node: node).published()
        let behind = (try node.projections.relays(of: UserID(me))?.relays ?? []).filter { relay in
            guard relay.roles.contains(.home), !failed.contains(relay.key) else { return false }
            if let last = offered[relay.key] ?? held[relay.key], last.device >= now.device, last.user >= now.user { return false }
            return true
        }
        if !behind.isEmpty {
            let publish = RelayPlan(
                relays: behind.map { RelayPlan.Entry(address: $0.address, key: $0.key, covers: [me], reasons: ["own"]) }, uncovered: [], unlisted: [])
            var shares = plan  // what the plan's relays bring stays theirs
            shares.relays += publish.relays
            let synced = await syncRouted(node, plan: publish, shares: shares, maxConnections: maxConnections, options: options)
            results += synced
            for r in synced { if case .success(let report) = r.outcome, report.complete { offered[r.relay.key] = now } }
        }
        // Users whose home relay was synced wait no more; the others one sync
        // more. Each relay synced completely was offered the own feeds as they were.
        let succeeded = results.filter { if case .success = $0.outcome { true } else { false } }
        // A former own relay is done once it took the current list, or failed (it may be gone for good).
        let done = Set(results.filter { r in
            guard r.relay.reasons.contains("former") else { return false }
            if case .success(let report) = r.outcome { return report.complete }
            return true
        }.map(\.relay.key))
        try await RoutingMemory(node: node).endSync(
            covered: Set(succeeded.flatMap(\.relay.covers)), offered: offered, own: try node.projections.relays(of: node.identity.user)?.relays ?? [],
            done: done)
        // Every relay synced, each once.
        var seen: Set<PublicKey> = []
        plan.relays = results.map(\.relay).filter { seen.insert($0.key).inserted }
        return (plan, results)
    }

    /// Rounds of `syncByRelayLists`, at most: a notice's sender is found in
    /// the second (its relay list) and fetched in the third (its home relays).
    package static let maxRounds = 3

    /// Syncs with the relays of `plan` in parallel, at most `maxConnections`
    /// at once (Specs/sync.md §9), each pinned to its listed key; one failing
    /// relay does not stop the others. With a limited scope each session
    /// replicates its relay's share: the users another relay of `shares`
    /// (the whole plan of which `plan` may be a part; `plan` itself by
    /// default) covers are left to that relay. Results in the plan's order.
    package static func syncRouted(
        _ node: Node, plan: RelayPlan, shares: RelayPlan? = nil, maxConnections: Int = 8, options: SyncOptions = SyncOptions()
    ) async -> [RelaySyncResult] {
        let left = (shares ?? plan).shares(without: node.identity.user.raw)
        return await concurrentMap(plan.relays, limit: maxConnections) { relay in
            var options = options
            options.scope = options.scope.leaving(left[relay.key] ?? [])
            do {
                return RelaySyncResult(relay: relay, outcome: .success(try await sync(node, relay: relay.address, key: relay.key, options: options)))
            } catch {
                return RelaySyncResult(relay: relay, outcome: .failure(error))
            }
        }
    }
}

/// The heights of a node's own device feed and its user key feed.
package struct OwnHeights: Sendable, Hashable {
    /// This device's feed.
    package var device: UInt64
    /// The user key's feed (bindings and the relay list).
    package var user: UInt64

    /// Heights `device` and `user`.
    package init(device: UInt64, user: UInt64) {
        self.device = device
        self.user = user
    }
}

/// What syncing by relay lists remembers between syncs (the `routing`
/// database, Specs/storage.md): a counter of syncs, and per user the sync at
/// which one of its home relays was last synced, so that users a plan could
/// not cover weigh more in the next plan (Specs/sync.md §9).
package final class RoutingMemory: Sendable {
    let env: Environment
    let db: Database
    /// Writes go through this node's writer (Specs/storage.md §5); nil for a
    /// store opened to read.
    private let node: Node?
    static let counterKey: [UInt8] = [0]
    static let userPrefix: UInt8 = 1
    static let publishedPrefix: UInt8 = 3
    static let ownPrefix: UInt8 = 4

    /// The `routing` database of `store`, to read; its writes throw.
    package init(readingFrom store: Store) throws {
        (env, node, db) = (store.env, nil, try store.bookkeepingDatabase(\.routing, named: "routing"))
    }

    /// The `routing` database of `node`'s store; writes go through the node's writer.
    package init(node: Node) throws {
        (env, self.node, db) = (node.store.env, node, try node.store.bookkeepingDatabase(\.routing, named: "routing"))
    }

    /// Syncs each of `users` has waited since one of its home relays was
    /// last synced (since the first sync, for a user never covered).
    package func syncsWaited(_ users: Set<PublicKey>) throws -> [PublicKey: UInt64] {
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

    /// The syncs by relay lists this node has ended.
    package func syncs() throws -> UInt64 {
        try env.read { txn in try txn.get(db, Self.counterKey).map { InboxStore.readBE($0) } ?? 0 }
    }

    /// Per relay, the heights of this node's device feed and user key feed
    /// when a sync by relay lists last synced with it successfully (what it
    /// was offered, so an own home relay that holds them need not be met).
    package func published() throws -> [PublicKey: OwnHeights] {
        try env.read { txn in
            var out: [PublicKey: OwnHeights] = [:]
            try txn.scan(db, from: [Self.publishedPrefix]) { key, value in
                guard key.first == Self.publishedPrefix, key.count == 33, value.count == 16, let relay = Bytes32(Array(key.dropFirst())) else {
                    return key.first == Self.publishedPrefix
                }
                let device: UInt64 = InboxStore.readBE(value.prefix(8))
                let user: UInt64 = InboxStore.readBE(value.suffix(8))
                out[relay] = OwnHeights(device: device, user: user)
                return true
            }
            return out
        }
    }

    /// The relays this user's lists named when syncs by relay lists ran,
    /// with their addresses, until they took a later list or failed.
    package func formerOwn() throws -> [PublicKey: String] {
        try env.read { txn in
            var out: [PublicKey: String] = [:]
            try txn.scan(db, from: [Self.ownPrefix]) { key, value in
                guard key.first == Self.ownPrefix else { return false }
                if key.count == 33, let relay = Bytes32(Array(key.dropFirst())) { out[relay] = String(decoding: value, as: UTF8.self) }
                return true
            }
            return out
        }
    }

    /// Ends a sync: `covered` were synced now; the counter moves on; each
    /// relay of `offered` was offered the own feeds up to its heights;
    /// `own` are the relays the user's list names now, `done` the former
    /// ones that took the current list or failed.
    package func endSync(covered: Set<PublicKey>, offered: [PublicKey: OwnHeights] = [:], own: [Relay] = [], done: Set<PublicKey> = []) async throws {
        let db = self.db
        let work: @Sendable (Transaction) throws -> Void = { txn in
            let now = (try txn.get(db, Self.counterKey).map { InboxStore.readBE($0) } ?? 0) + 1
            for user in covered { try txn.put(db, [Self.userPrefix] + user.bytes, InboxStore.be(now)) }
            try txn.put(db, Self.counterKey, InboxStore.be(now))
            for (relay, heights) in offered {
                let value: [UInt8] = InboxStore.be(heights.device) + InboxStore.be(heights.user)
                try txn.put(db, [Self.publishedPrefix] + relay.bytes, value)
            }
            for relay in done { _ = try txn.delete(db, [Self.ownPrefix] + relay.bytes) }
            for relay in own { try txn.put(db, [Self.ownPrefix] + relay.key.bytes, Array(relay.address.utf8)) }
        }
        try await bookkeepingWrite(node: node, database: "routing", work)
    }
}
