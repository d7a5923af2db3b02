import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections

/// What a relay serving `--host listed` keeps of each feed (Specs/sync.md
/// §8.1): the feeds of users whose relay list names it `home`, the
/// directory (every user key's own feed, which holds only bindings and relay
/// lists, so that it can answer where anyone lives), and nothing else.
package enum FeedHosting {
    /// How much of one feed a listed relay keeps.
    package enum Level: Sendable, Hashable {
        /// None of it: never requested; a refusal is never the peer's fault.
        case none
        /// A user key's own feed: its events of the directory kinds
        /// (`EventKind.isDirectoryKind`), and nothing after the first of another kind.
        case directory
        /// All of it: a user that names this relay `home`, an issuer, the relay itself.
        case all
    }

    /// The directory `node` holds (Specs/sync.md §4.12): every key that has
    /// bound a device (a user key), with this node's own user key.
    package static func directoryFeeds(at node: Node) throws -> Set<PublicKey> {
        try node.projections.bindingUsers().union([node.identity.user.raw])
    }

    /// Whether `user`'s relay list, as `node` folds it, names `node` (by its
    /// device key) with the role `home`.
    package static func homes(_ user: PublicKey, at node: Node) throws -> Bool {
        let me = node.identity.device.raw
        return try node.projections.relays(of: UserID(user))?.relays.contains { $0.key == me && $0.roles.contains(.home) } ?? false
    }

    /// How much of `feed` the listed relay `node` keeps now. `peerUser` is
    /// the user key of the peer offering it (its hello): that key's own feed
    /// is taken into the directory even before any of it is held.
    package static func level(of feed: PublicKey, at node: Node, peerUser: PublicKey?) throws -> Level {
        if feed == node.identity.device.raw || feed == node.identity.user.raw || node.network.issuers.contains(feed) { return .all }
        let p = node.projections
        let user = try p.user(of: feed)
        if try homes(user, at: node) { return .all }
        guard user == feed else { return .none }  // a bound device of a user hosted elsewhere
        if feed == peerUser { return .directory }
        if try !p.bindingDevices(among: [feed]).isEmpty { return .directory }
        return .none
    }

    /// Names what a listed relay keeps of `peerUser`'s feeds, so that a
    /// remembered announcement position is reused only while that is
    /// unchanged (`PeerRecord.scopeTag`): when a user starts naming the relay
    /// `home`, the next session asks its devices to announce every feed.
    package static func tag(peerUser: PublicKey?, at node: Node) throws -> Hash32 {
        let homed = try peerUser.map { try homes($0, at: node) } ?? false
        return Blake2b.hash256(parts: [Array("chorus/sync/hosting".utf8), [homed ? 1 : 0]])
    }
}

/// What a listed relay holds (Specs/sync.md §8.1), for its logs and metrics:
/// the users whose list names it `home`, and the users it holds feed events
/// of although their list no longer does (it keeps them, accepts no more).
package struct HostingCensus: Sendable, Hashable {
    /// Users whose relay list names this relay `home`.
    package var hostedUsers: Int
    /// Users with a relay list that does not name this relay `home`, of
    /// whose devices it still holds events, with how many.
    package var formerUsers: [PublicKey: UInt64]
    /// (Event, addressee) pairs held as an inbox.
    package var inboxNotices: Int

    /// Counts what `node` holds now (reads every relay list it holds).
    package static func take(at node: Node) throws -> HostingCensus {
        var hosted = 0
        var former: [PublicKey: UInt64] = [:]
        for list in try node.projections.relayLists() {
            let user = list.user.raw
            if list.relays.contains(where: { $0.key == node.identity.device.raw && $0.roles.contains(.home) }) {
                hosted += 1
                continue
            }
            var held: UInt64 = 0
            for device in try node.projections.devices(of: list.user) { held += try node.head(of: device.device.raw)?.seq ?? 0 }
            if held > 0 { former[user] = held }
        }
        let notices = (try? InboxStore(node: node).count()) ?? 0
        return HostingCensus(hostedUsers: hosted, formerUsers: former, inboxNotices: notices)
    }
}
