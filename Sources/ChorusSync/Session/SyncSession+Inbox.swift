import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusParallel
import Foundation

/// The inbox exchange (Specs/sync.md §4.11): right after the hellos, each
/// side leaves the events it addresses to users whose inbox the peer is,
/// and hands over the notices it holds for the peer's user.
extension SyncSession {
    func exchangeInbox(with hello: SyncHello) async throws {
        let node = self.node
        let peer = transport.peer.key
        let store = try InboxStore(node: node)
        send(.inbox(since: try store.noticeSerial(from: peer)))
        let offered = try await offThePool { try Self.deliveries(of: node, to: peer, store: store) }
        var batch: [[UInt8]] = []
        var bytes = 0
        for envelope in offered.map(\.envelope) {
            if !batch.isEmpty, batch.count == SyncLimits.eventBatchCount || bytes + envelope.count > SyncLimits.eventBatchBytes {
                send(.deliver(batch))
                batch = []
                bytes = 0
            }
            batch.append(envelope)
            bytes += envelope.count
        }
        if !batch.isEmpty { send(.deliver(batch)) }
        send(.deliverEnd)

        var delivered: [[UInt8]] = []
        var notices: [Notice] = []
        var lastSerial: UInt64? = nil  // set once the peer's `inbox` is answered
        var sentEnd = false
        var peerEnded = false
        while !(sentEnd && peerEnded) {
            let message = try await receiveBeforeSession("the inbox exchange")
            switch message {
            case .blobSerial:
                try await handle(message)
            case .inbox(let since):
                guard lastSerial == nil else { throw SyncError.unexpected("a second inbox") }
                let held = try await offThePool { try Self.notices(at: node, for: hello.user, device: peer, after: since, store: store) }
                for chunk in held.notices.chunked(64) { send(.notices(chunk)) }
                lastSerial = held.last
            case .deliver(let list):
                delivered += list
                if delivered.count > SyncLimits.maxInboxEvents {
                    throw SyncError.unexpected("over \(SyncLimits.maxInboxEvents) deliveries in one session")
                }
            case .deliverEnd:
                guard let serial = lastSerial, !sentEnd else { throw SyncError.unexpected("deliverEnd before inbox, or twice") }
                let received = delivered
                let (items, kept) = try await offThePool { try Self.deliveryItems(received, at: node, from: (peer, hello.user)) }
                try await store.keep(items)
                report.deliveriesKept += kept
                send(.inboxEnd(serial: serial, kept: UInt64(kept)))
                sentEnd = true
            case .notices(let list):
                notices += list
                if notices.count > SyncLimits.maxInboxEvents {
                    throw SyncError.unexpected("over \(SyncLimits.maxInboxEvents) notices in one session")
                }
            case .inboxEnd(let serial, let kept):
                guard !peerEnded else { throw SyncError.unexpected("a second inboxEnd") }
                peerEnded = true
                let received = notices
                let items = try await offThePool { try Self.noticeItems(received, at: node) }
                let count = try await store.keep(items)
                try await store.setNoticeSerial(serial, from: peer)
                report.noticesReceived += count
                // Marked left, per (event, addressee), only when the peer kept
                // every pair offered: a relay that did not yet hold an
                // addressee's list is offered them again next time, and an
                // addressee whose list this node learns later is a new pair.
                let pairs = offered.flatMap { o in o.recipients.map { InboxStore.Pair(o.id, $0) } }
                if kept >= UInt64(pairs.count), !pairs.isEmpty {
                    try await store.markLeft(pairs, at: peer)
                }
                report.deliveriesLeft += Int(clamping: kept)
            case .error(let code, let text):
                throw SyncError.peerError(code: code, message: text)
            default:
                throw SyncError.unexpected("\(message.code) during the inbox exchange")
            }
        }
    }

    /// The next message before the session's loops run (the hellos and
    /// the inbox exchange), waiting at most `within` (the idle timeout by default).
    func receiveBeforeSession(_ what: String, within limit: Duration? = nil) async throws -> SyncMessage {
        let transport = self.transport
        let frame: [UInt8]?
        do {
            frame = try await withTimeout(limit ?? options.idleTimeout, "waiting for \(what)", onTimeout: { await transport.close() }) {
                try await transport.receive()
            }
        } catch let error as SyncError { throw error } catch { throw SyncError.fromTransport(error) }
        guard let frame else { throw SyncError.connectionClosed }
        countReceived(frame)
        return try SyncMessage.decode(frame)
    }

    /// This node's own events addressed to users whose list names `relay`
    /// `inbox` and not yet left there for each of them, oldest first, at
    /// most `SyncLimits.maxInboxEvents`; each with every addressee it has
    /// there (the relay counts every pair it keeps, new or held before).
    static func deliveries(of node: Node, to relay: PublicKey, store: InboxStore) throws -> [(id: EventID, envelope: [UInt8], recipients: [PublicKey])] {
        let p = node.projections
        var out: [(id: EventID, envelope: [UInt8], recipients: [PublicKey])] = []
        for event in try InboxStore.addressedOwnEvents(at: node, store: store) {
            let recipients = try Addressing.addressees(of: event, userOf: { try p.user(of: $0) }).filter {
                try Addressing.isInbox(relay, of: $0, at: node)
            }
            if !recipients.isEmpty { out.append((event.id, event.encoded(), recipients)) }
        }
        let left = try store.left(out.flatMap { o in o.recipients.map { InboxStore.Pair(o.id, $0) } }, at: relay)
        let waiting = out.filter { o in o.recipients.contains { !left.contains(InboxStore.Pair(o.id, $0)) } }
        return Array(waiting.prefix(SyncLimits.maxInboxEvents))
    }

    /// What to keep, as an inbox, of delivered events: each for each of its
    /// addressees whose list names this node `inbox`, with the number of
    /// (event, addressee) pairs. Events that do not decode or verify, and addressees this
    /// node is not the inbox of, are left out without fault (the sender may
    /// hold a newer list).
    /// `deliverer` is the peer's proved device key and the user its hello
    /// names: the user of its own events when this node does not hold the
    /// binding yet (it usually arrives later in the same session).
    static func deliveryItems(
        _ envelopes: [[UInt8]], at node: Node, from deliverer: (device: PublicKey, user: PublicKey)
    ) throws -> (items: [InboxStore.Item], pairs: Int) {
        let p = node.projections
        let me = node.identity.device.raw
        var items: [InboxStore.Item] = []
        var pairs = 0
        for envelope in envelopes {
            guard let event = try? Event.decode(envelope), event.payloadBytes != nil, event.verifySignature() else { continue }
            let recipients = try Addressing.addressees(of: event, userOf: { try p.user(of: $0) }).filter {
                try Addressing.isInbox(me, of: $0, at: node)
            }
            guard !recipients.isEmpty else { continue }
            let bound = try p.user(of: event.author)
            let user = bound != event.author ? bound : event.author == deliverer.device ? deliverer.user : nil
            items.append((event, envelope, user, recipients))
            pairs += recipients.count
        }
        return (items, pairs)
    }

    /// The notices held for `user` after `serial`, when `device` is a
    /// current device of `user` as this node folds it (else none: notices
    /// go to the addressee's devices only).
    static func notices(at node: Node, for user: PublicKey, device: PublicKey, after serial: UInt64, store: InboxStore) throws
        -> (notices: [Notice], last: UInt64)
    {
        guard let binding = try node.projections.binding(of: device), binding.user == user, binding.removedHLC == nil else {
            return ([], serial)
        }
        // The binding this node holds now names the author's user, over the
        // hint kept with the notice.
        let p = node.projections
        var held = try store.notices(for: user, after: serial, limit: SyncLimits.maxInboxEvents)
        for i in held.notices.indices {
            guard let author = try? Event.decode(held.notices[i].envelope).author else { continue }
            let bound = try p.user(of: author)
            if bound != author { held.notices[i].user = bound }
        }
        return held
    }

    /// The notices addressed to this node's user that decode and verify,
    /// to keep.
    static func noticeItems(_ notices: [Notice], at node: Node) throws -> [InboxStore.Item] {
        let p = node.projections
        let me = node.identity.user.raw
        var items: [InboxStore.Item] = []
        for notice in notices {
            guard let event = try? Event.decode(notice.envelope), event.payloadBytes != nil, event.verifySignature() else { continue }
            guard try Addressing.addressees(of: event, userOf: { try p.user(of: $0) }).contains(me) else { continue }
            items.append((event, notice.envelope, notice.user, [me]))
        }
        return items
    }
}
