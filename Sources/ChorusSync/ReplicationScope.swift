import ChorusCrypto
import ChorusNode
import ChorusProjections

/// Which feeds a node replicates (Specs/sync.md §6). `hops == nil`: every
/// feed it hears of. Otherwise the users within `hops` follow steps of this
/// node's user (0: the user alone), plus the members of every chat the user
/// is in, plus the users who left notices for the user at its inbox relays
/// (Specs/sync.md §4.11), minus the users the user blocks; a user's feeds
/// are the user key's own feed and every device ever bound to it. Issuer
/// feeds, and the user key feeds of the users the user follows (where their
/// relay lists are), are always included.
public struct ReplicationScope: Hashable, Sendable {
    /// Follow steps from this node's user; nil replicates every feed. A
    /// negative value counts as 0.
    public var hops: Int?
    /// Users in scope whose feeds another relay of a routed sync brings
    /// (Specs/sync.md §9): a session with one relay names and fetches only
    /// its share, so each feed costs one session, not one per relay. Empty
    /// outside a routed sync.
    package var coveredElsewhere: Set<PublicKey> = []

    /// A scope of `hops` follow steps; nil (the default) is every feed.
    public init(hops: Int? = nil) { self.hops = hops }

    /// This scope with `users` left to other relays.
    package func leaving(_ users: Set<PublicKey>) -> ReplicationScope {
        var scope = self
        scope.coveredElsewhere = users
        return scope
    }

    /// Every feed this node hears of (`hops == nil`), the default scope.
    public static let all = ReplicationScope(hops: nil)

    /// The feeds in scope now, or nil for every feed. The set grows as the
    /// events that define it (follows, device bindings, chats) arrive, so a
    /// session recomputes it after each round. Users `coveredElsewhere`
    /// are left out, with their devices; the node's own device and the
    /// issuers never are.
    package func feeds(of node: Node) throws -> Set<PublicKey>? {
        guard let users = try users(of: node) else { return nil }
        let p = node.projections
        var feeds: Set<PublicKey> = Set(node.network.issuers)
        feeds.insert(node.identity.device.raw)
        let elsewhere = coveredElsewhere
        for u in users where !elsewhere.contains(u) {
            feeds.insert(u)
            for d in try p.devices(of: u) { feeds.insert(d.device.raw) }
        }
        let blocked = Set(try p.blocked(by: node.identity.user.raw))
        // The user keys of the users this user follows, whatever the hops:
        // their relay lists say where to leave the follow (§4.11).
        for u in try p.following(of: node.identity.user.raw) where !blocked.contains(u) && !elsewhere.contains(u) { feeds.insert(u) }
        // The devices that left notices for this user (§4.11), before their
        // binding is known here.
        for device in try InboxStore.correspondents(of: node.identity.user.raw, at: node).devices {
            let user = try p.user(of: device)
            guard !blocked.contains(user), !elsewhere.contains(user) else { continue }
            feeds.insert(device)
        }
        return feeds
    }

    /// The users in scope now (this node's user included), or nil for every user.
    package func users(of node: Node) throws -> Set<PublicKey>? { try users(of: node, notices: true) }

    /// `users(of:)`, with or without the users that notices alone put in scope.
    package func users(of node: Node, notices: Bool) throws -> Set<PublicKey>? {
        guard let hops else { return nil }
        let p = node.projections
        let me = node.identity.user.raw
        let blocked = Set(try p.blocked(by: me))
        var users: Set<PublicKey> = [me]
        var frontier: [PublicKey] = [me]
        for _ in 0..<max(0, hops) {
            var next: [PublicKey] = []
            for u in frontier {
                for f in try p.following(of: u) where !blocked.contains(f) && !users.contains(f) {
                    users.insert(f)
                    next.append(f)
                }
            }
            frontier = next
            if frontier.isEmpty { break }
        }
        for chat in try p.chats(of: me) {
            for m in chat.members where !blocked.contains(m.user.raw) { users.insert(m.user.raw) }
        }
        // Whoever addressed this user (a notice at its inbox, §4.11): their
        // feeds hold the invitation, the follow or the gift.
        if notices {
            for u in try InboxStore.correspondents(of: me, at: node).users where !blocked.contains(u) { users.insert(u) }
        }
        return users
    }

    /// The feeds that concern `user` as this node folds them: the user's
    /// own and those of every member of every chat the user is in (Specs/
    /// sync.md §4.8). Sent to a scoped peer, so that an invitation to a chat
    /// with someone the peer's user does not follow still reaches it.
    package static func invitation(for user: PublicKey, at node: Node) throws -> [PublicKey] {
        let p = node.projections
        var users: Set<PublicKey> = [user]
        for chat in try p.chats(of: user) { for m in chat.members { users.insert(m.user.raw) } }
        var feeds: Set<PublicKey> = []
        for u in users {
            feeds.insert(u)
            for d in try p.devices(of: u) { feeds.insert(d.device.raw) }
        }
        return feeds.sorted()
    }

    /// Names a scope's feed set, so a remembered arrival position is reused
    /// only with the same feeds (PeerRecord.scopeTag).
    package static func tag(_ feeds: Set<PublicKey>?) -> Hash32 {
        guard let feeds else { return .zero }
        return Blake2b.hash256(parts: [Array("chorus/sync/scope".utf8)] + feeds.sorted().map(\.bytes))
    }
}
