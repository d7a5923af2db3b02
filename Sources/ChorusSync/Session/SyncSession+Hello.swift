import ChorusCrypto
import ChorusNode
import Foundation

/// The hellos (Specs/sync.md §4.1): what this side offers and remembers of
/// the peer, and what the two hellos decide (live mode, reconciliation).
extension SyncSession {
    func handshake() async throws {
        let peerKey = transport.peer.key
        var scopeFeeds = try options.scope.feeds(of: node)
        let record = try peers?.record(peerKey)
        let tag = try sessionTag(scopeFeeds, peerUser: record?.user)
        var since: UInt64 = 0
        // A directory session reconciles whatever is remembered (§4.12).
        if let record, record.scopeTag == tag, !options.directory { since = record.position }
        blobFetch = BlobFetchState(remembered: record.flatMap { r in r.blobSerial.map { (serial: $0, lacked: r.lackedBlobs) } })
        positions.startTag = tag
        positions.startSince = since
        var caps: SyncCapabilities = [.refill]
        if options.invitations { caps.insert(.invitations) }
        if options.live { caps.insert(.live) }
        if options.blobs { caps.formUnion([.blobs, .blobSerial]) }
        if options.reconcile { caps.insert(.reconcile) }
        if options.sketch { caps.insert(.sketch) }
        if options.scoped { caps.insert(.scoped) }
        if (options.inbox || options.hostsListed) && !options.directory { caps.insert(.inbox) }
        if options.directory { caps.insert(.directory) }
        send(.hello(SyncHello(user: node.identity.user.raw, capabilities: caps, hops: options.scope.hops.map { UInt64(max(0, $0)) }, since: since)))
        guard case .hello(let hello) = try await receiveBeforeSession("the peer's hello", within: options.helloTimeout) else {
            throw SyncError.unexpected("the first message must be a hello")
        }
        peerHello = hello
        report.peerUser = hello.user
        directorySession = caps.contains(.directory) || hello.capabilities.contains(.directory)
        report.directory = directorySession
        if options.blobs, hello.capabilities.contains(.blobSerial) { send(.blobSerial(try blobs.serial())) }
        isLive = options.live && hello.capabilities.contains(.live) && !directorySession
        report.live = isLive
        // Inbox deliveries and notices (§4.11) come before the scope: the
        // notices can add the feeds of their senders to it.
        if caps.contains(.inbox), hello.capabilities.contains(.inbox), !directorySession {
            try await exchangeInbox(with: hello)
            if report.noticesReceived > 0 { scopeFeeds = try options.scope.feeds(of: node) }
        }
        // Scoped announcements (§4.10): at a first contact a scoped side names
        // its feeds when both offer them. Later syncs announce only what
        // changed since the remembered position, scope or not.
        let firstContactBySince = since == 0 || hello.since == 0 || directorySession
        let scoped = caps.contains(.scoped) && hello.capabilities.contains(.scoped) && firstContactBySince && !directorySession
        scopes.expectsPeer = scoped && hello.hops != nil
        if scoped, let feeds = scopeFeeds {
            scopes.sent = feeds
            for chunk in feeds.sorted().chunked(SyncLimits.listBatch) { send(.scope(chunk)) }
            send(.scopeEnd)
        }
        // Both sides decide alike from the two hellos (Specs/sync.md §4.2.1):
        // reconciliation runs over every feed when neither is scoped, and over
        // the scoped side's feeds when exactly one is and both offer `scoped`.
        let oneScoped = scoped && (options.scope.hops == nil) != (hello.hops == nil)
        let firstContact = (options.scope.hops == nil && hello.hops == nil || oneScoped || directorySession) && firstContactBySince
        if firstContact, caps.contains(.sketch), hello.capabilities.contains(.sketch), !directorySession {
            reconcile.mode = .sketch
        } else if firstContact, caps.contains(.reconcile), hello.capabilities.contains(.reconcile) {
            reconcile.mode = .tree
        }
        report.reconciled = reconcile.mode != .none
    }

    /// Names what this side fetches from the peer, so a remembered
    /// position is reused only while it is unchanged: the scope's feeds, or,
    /// for a listed relay, whether it hosts the peer's user (Specs/sync.md
    /// §4.2, §8.1).
    func sessionTag(_ feeds: Set<PublicKey>?, peerUser: PublicKey?) throws -> Hash32 {
        options.hostsListed ? try FeedHosting.tag(peerUser: peerUser, at: node) : ReplicationScope.tag(feeds)
    }

    func countReceived(_ frame: [UInt8]) {
        report.framesReceived += 1
        report.bytesReceived += frame.count
        idleWatch.progressed()
    }
}
