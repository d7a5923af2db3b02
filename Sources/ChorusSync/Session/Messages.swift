import ChorusCBOR
import ChorusCrypto

/// The protocol version this build speaks (Specs/sync.md §2).
package enum SyncProtocol {
    /// The only version this build speaks: a hello with another ends the
    /// session with `unsupported_version` (Specs/sync.md §4.1).
    package static let version: UInt64 = 1
}

/// Capability bits of a hello (Specs/sync.md §3.1).
package struct SyncCapabilities: OptionSet, Hashable, Sendable {
    /// The capability bits as they travel in the hello (Specs/sync.md §3).
    package let rawValue: UInt64
    /// Capabilities from a bit set; bits this build does not know are kept but
    /// ignored, never refused.
    package init(rawValue: UInt64) { self.rawValue = rawValue }

    /// Stays connected after "done" and announces new heads as they arrive.
    package static let live = SyncCapabilities(rawValue: 1)
    /// Serves and fetches picture blobs.
    package static let blobs = SyncCapabilities(rawValue: 2)
    /// Serves and fetches purged payloads (refill).
    package static let refill = SyncCapabilities(rawValue: 4)
    /// Tells a scoped peer which feeds concern it (its chats' members) with
    /// an `invite` message (Specs/sync.md §4.8).
    package static let invitations = SyncCapabilities(rawValue: 8)
    /// Tells the peer this node's blob serial (`blobSerial`), so a peer that
    /// remembers which blobs this node lacked asks for them again only after
    /// this node stored a new blob (Specs/sync.md §4.4).
    package static let blobSerial = SyncCapabilities(rawValue: 16)
    /// Finds the feeds two nodes hold differently with range-based set
    /// reconciliation (`reconcile` rounds) instead of announcing every feed,
    /// when either side has no remembered position (Specs/sync.md §4.2.1).
    package static let reconcile = SyncCapabilities(rawValue: 32)
    /// Finds them with sketches of power sums instead (`sketchInfo`,
    /// `sketch`, `sketchResult`), at about 16 bytes per differing feed
    /// (Specs/sync.md §4.2.2).
    package static let sketch = SyncCapabilities(rawValue: 64)
    /// A side that replicates a limited scope says which feeds it wants
    /// (`scope`, `scopeEnd`), and the other announces and reconciles only
    /// those: first contact then costs what the scope holds, not what the
    /// peer holds (Specs/sync.md §4.10).
    package static let scoped = SyncCapabilities(rawValue: 128)
    /// Exchanges inbox deliveries and notices right after the hellos
    /// (`inbox`, `deliver`, `notices`, `inboxEnd`): a sender leaves the
    /// events it addresses to a user at that user's inbox relay, which hands
    /// them to the user's devices (Specs/sync.md §4.11).
    package static let inbox = SyncCapabilities(rawValue: 256)
    /// Asks for a directory session: both sides announce and reconcile only
    /// user keys' own feeds (bindings and relay lists), so relays keep every
    /// user's relay list without holding the users' feeds (Specs/sync.md §4.12).
    package static let directory = SyncCapabilities(rawValue: 512)
}

/// An event left at an inbox for one of its addressees (Specs/sync.md
/// §4.11): the envelope as stored, and the user its author's device is bound
/// to as the sender folds it (nil when it does not know), so the recipient
/// can find the author's relay list.
package struct Notice: Hashable, Sendable {
    /// The user the author's device is bound to, as the sender of the notice folds it.
    package var user: PublicKey?
    /// The event's envelope, byte for byte as stored (Specs/events.md §3).
    package var envelope: [UInt8]
    /// A notice of `envelope`, whose author acts for `user`.
    package init(user: PublicKey?, envelope: [UInt8]) {
        self.user = user
        self.envelope = envelope
    }
}

/// The first message of each side (`hello`, Specs/sync.md §4.1): protocol
/// version, user key, capabilities, replication scope, and the position from
/// which the receiver should announce.
package struct SyncHello: Hashable, Sendable {
    /// The sync protocol version the sender speaks; a receiver checks it before
    /// the other items.
    package var version: UInt64
    /// The sender node's user key (its device key is the transport's peer key).
    package var user: PublicKey
    /// The optional features the sender offers; each runs as Specs/sync.md §4
    /// describes, most only when both hellos carry it.
    package var capabilities: SyncCapabilities
    /// The sender's replication scope: nil for every feed, else hops.
    package var hops: UInt64?
    /// The position in the RECEIVER's arrival log from which the sender wants
    /// the receiver to announce changed feeds (0: announce every feed).
    package var since: UInt64

    /// Builds a hello; `version` defaults to this build's
    /// `SyncProtocol.version`.
    package init(version: UInt64 = SyncProtocol.version, user: PublicKey, capabilities: SyncCapabilities, hops: UInt64?, since: UInt64) {
        self.version = version
        self.user = user
        self.capabilities = capabilities
        self.hops = hops
        self.since = since
    }
}

/// One feed's height and head id.
package struct FeedAnnouncement: Hashable, Sendable {
    /// The feed, named by its author's key.
    package var author: PublicKey
    /// The feed's height: the sequence number of its head event (at least 1 on
    /// the wire).
    package var seq: UInt64
    /// The id of the head event; zero when unknown (a height learned from a
    /// sketch, Specs/sync.md §4.2.2).
    package var head: EventID
    /// Builds the announcement of one feed's head.
    package init(author: PublicKey, seq: UInt64, head: EventID) {
        self.author = author
        self.seq = seq
        self.head = head
    }
}

/// A request for events `from...to` of one feed. `prev` is the requester's
/// id of event `from - 1` (nil when `from == 1`); a server whose event at
/// `from - 1` differs answers with that event only (fork evidence).
package struct FeedRange: Hashable, Sendable {
    /// The feed requested, named by its author's key.
    package var author: PublicKey
    /// The first sequence number requested (at least 1).
    package var from: UInt64
    /// The requester's id of event `from - 1`, nil exactly when `from` is 1.
    package var prev: EventID?
    /// The last sequence number requested (at least `from`); the server sends
    /// as many as it holds.
    package var to: UInt64
    /// Builds a request without checking its bounds; `SyncMessage.decode`
    /// enforces them on received ranges.
    package init(author: PublicKey, from: UInt64, prev: EventID?, to: UInt64) {
        self.author = author
        self.from = from
        self.prev = prev
        self.to = to
    }
}

/// Every message of the sync protocol (Specs/sync.md §3). Each travels as
/// one frame holding one deterministic CBOR array whose first item is the
/// message type.
package enum SyncMessage: Hashable, Sendable {
    /// The first message each side sends, and only once (Specs/sync.md §4.1).
    case hello(SyncHello)
    /// Announces feed heads, at most 1024 per message (Specs/sync.md §4.2).
    case have([FeedAnnouncement])
    /// Ends an announcement; `position` is the sender's arrival position taken
    /// before it read the heads (Specs/sync.md §4.2).
    case haveEnd(position: UInt64)
    /// Requests ranges of announced feeds, at most 1024 per message
    /// (Specs/sync.md §4.3).
    case want([FeedRange])
    /// Ends a batch of `want`s: the server answers them in order, then sends
    /// `eventsEnd`.
    case wantEnd
    /// Event envelopes, each exactly as stored (Specs/events.md §3).
    case events([[UInt8]])
    /// The receiver processed (and made durable) this many data frames.
    case ack(UInt64)
    /// Follows the last `events` answering a `wantEnd` or a `payloadWantEnd`,
    /// or ends a sketch push.
    case eventsEnd
    /// Requests blobs by hash (Specs/sync.md §4.4).
    case blobWant([Hash32])
    /// Ends a blob request: the server answers each hash, then sends `blobEnd`.
    case blobWantEnd
    /// One chunk of a requested blob starting at `offset`, at most 64 KiB, with
    /// the blob's `total` size (Specs/sync.md §4.4).
    case blobData(hash: Hash32, offset: UInt64, total: UInt64, bytes: [UInt8])
    /// The server does not hold this requested blob, or no live picture
    /// references it.
    case blobMissing(Hash32)
    /// Ends the server's answer to a blob request.
    case blobEnd
    /// The sender fetched everything it asked for. `position`: every event
    /// at or below it in the sender's arrival log was announced in this
    /// session or received from the receiver, so the next sync may ask the
    /// sender to announce only feeds changed after it.
    case done(position: UInt64)
    /// Sent, best effort, before closing because of an error: a stable code
    /// (`SyncError.code`) and a message (Specs/sync.md §7).
    case error(code: String, message: String)
    /// Requests the payloads of these events (held here without one).
    case payloadWant([EventID])
    /// Ends a refill request: the server answers with `events`, then
    /// `eventsEnd` (Specs/sync.md §4.7).
    case payloadWantEnd
    /// Feeds the receiver's scope should include because they concern its
    /// user: the feeds of the members of every chat it is in, as the sender
    /// folds them (Specs/sync.md §4.8).
    case invite([PublicKey])
    /// The sender's blob serial: how many blobs it has ever stored
    /// (Specs/sync.md §4.4); sent once, after the hellos.
    case blobSerial(UInt64)
    /// One round of reconciliation over feed heads (Specs/sync.md §4.2.1).
    case reconcile(ReconcileRound)
    /// Opens sketch reconciliation (Specs/sync.md §4.2.2).
    case sketchInfo(SketchInfo)
    /// The sketcher's power sums for one round.
    case sketch(SketchSums)
    /// The answer to a round of sums.
    case sketchResult(SketchResult)

    /// Part of the feeds the sender's scope holds (Specs/sync.md §4.10).
    case scope([PublicKey])
    /// Ends a scope list: the whole scope the first time, an addition later.
    case scopeEnd
    /// Ends the announcements that answer an added scope (Specs/sync.md §4.10).
    case scopeAnswered
    /// Opens the inbox exchange: send the notices for my user after this
    /// serial of yours (Specs/sync.md §4.11).
    case inbox(since: UInt64)
    /// Events the sender addresses to users whose inbox the receiver is.
    case deliver([[UInt8]])
    /// Ends the sender's deliveries.
    case deliverEnd
    /// Events left at the sender for the receiver's user.
    case notices([Notice])
    /// Ends the inbox exchange: the sender's last notice serial for the
    /// receiver's user, and how many of the receiver's deliveries it kept
    /// (durably) as an inbox.
    case inboxEnd(serial: UInt64, kept: UInt64)

    /// The message type: the first item of every message's CBOR array
    /// (Specs/sync.md §3).
    package enum Code: UInt64, CaseIterable, Sendable {
        case hello = 0, have, haveEnd, want, wantEnd, events, ack, eventsEnd, blobWant, blobWantEnd, blobData,
            blobMissing, blobEnd, done, error, payloadWant, payloadWantEnd, invite, blobSerial, reconcile, sketchInfo, sketch,
            sketchResult, scope, scopeEnd, scopeAnswered, inbox, deliver, deliverEnd, notices, inboxEnd
    }

    /// This message's type, as encoded.
    package var code: Code {
        switch self {
        case .hello: .hello
        case .have: .have
        case .haveEnd: .haveEnd
        case .want: .want
        case .wantEnd: .wantEnd
        case .events: .events
        case .ack: .ack
        case .eventsEnd: .eventsEnd
        case .blobWant: .blobWant
        case .blobWantEnd: .blobWantEnd
        case .blobData: .blobData
        case .blobMissing: .blobMissing
        case .blobEnd: .blobEnd
        case .done: .done
        case .error: .error
        case .payloadWant: .payloadWant
        case .payloadWantEnd: .payloadWantEnd
        case .invite: .invite
        case .blobSerial: .blobSerial
        case .reconcile: .reconcile
        case .sketchInfo: .sketchInfo
        case .sketch: .sketch
        case .sketchResult: .sketchResult
        case .scope: .scope
        case .scopeEnd: .scopeEnd
        case .scopeAnswered: .scopeAnswered
        case .inbox: .inbox
        case .deliver: .deliver
        case .deliverEnd: .deliverEnd
        case .notices: .notices
        case .inboxEnd: .inboxEnd
        }
    }

    /// Whether this message consumes one unit of the receiver's window
    /// (Specs/sync.md §5).
    package var isData: Bool {
        switch self {
        case .events, .blobData, .blobMissing: true
        default: false
        }
    }

    /// The message as one frame: its deterministic CBOR encoding (Specs/sync.md
    /// §2), which `decode(_:)` reads back.
    package func encoded() -> [UInt8] {
        let t = CBORValue.unsigned(code.rawValue)
        let items: [CBORValue]
        switch self {
        case .hello(let h):
            items = [
                t, .unsigned(h.version), .bytes(h.user.bytes), .unsigned(h.capabilities.rawValue),
                h.hops.map { .unsigned($0) } ?? .null, .unsigned(h.since),
            ]
        case .have(let list):
            items = [t, .array(list.map { .array([.bytes($0.author.bytes), .unsigned($0.seq), .bytes($0.head.bytes)]) })]
        case .haveEnd(let position): items = [t, .unsigned(position)]
        case .want(let list):
            items = [
                t,
                .array(list.map {
                    .array([.bytes($0.author.bytes), .unsigned($0.from), $0.prev.map { .bytes($0.bytes) } ?? .null, .unsigned($0.to)])
                }),
            ]
        case .events(let envelopes), .deliver(let envelopes): items = [t, .array(envelopes.map { .bytes($0) })]
        case .inbox(let since): items = [t, .unsigned(since)]
        case .notices(let list): items = [t, .array(list.map { .array([$0.user.map { .bytes($0.bytes) } ?? .null, .bytes($0.envelope)]) })]
        case .inboxEnd(let serial, let kept): items = [t, .unsigned(serial), .unsigned(kept)]
        case .ack(let n): items = [t, .unsigned(n)]
        case .blobWant(let hashes): items = [t, .array(hashes.map { .bytes($0.bytes) })]
        case .blobData(let hash, let offset, let total, let bytes):
            items = [t, .bytes(hash.bytes), .unsigned(offset), .unsigned(total), .bytes(bytes)]
        case .blobMissing(let hash): items = [t, .bytes(hash.bytes)]
        case .error(let code, let message): items = [t, .text(code), .text(message)]
        case .payloadWant(let ids): items = [t, .array(ids.map { .bytes($0.bytes) })]
        case .invite(let feeds), .scope(let feeds): items = [t, .array(feeds.map { .bytes($0.bytes) })]
        case .blobSerial(let serial): items = [t, .unsigned(serial)]
        case .reconcile(let r):
            items = [
                t, .unsigned(r.count), .array(r.splits.map { .array([.bytes($0.prefix), .bytes($0.fingerprints)]) }),
                .array(r.leaves.map { .array([.bytes($0.prefix), $0.digests.map { .bytes($0) } ?? .null]) }),
            ]
        case .sketchInfo(let i): items = [t, .unsigned(i.count), .unsigned(i.total), .bytes(i.setHash), .bytes(i.nonce)]
        case .sketch(let s): items = [t, .unsigned(s.checksum), .bytes(Reconciler.bytes(s.sums))]
        case .sketchResult(let r): items = [t, .unsigned(r.outcome.rawValue), .array(r.asks.map { .unsigned($0) }), .unsigned(r.push)]
        case .done(let position): items = [t, .unsigned(position)]
        case .wantEnd, .eventsEnd, .blobWantEnd, .blobEnd, .payloadWantEnd, .scopeEnd, .scopeAnswered, .deliverEnd: items = [t]
        }
        return CBOREncoder.encode(.array(items))
    }

    /// Decodes one frame. Anything but the exact canonical encoding of a
    /// known message is refused (Specs/sync.md §3).
    package static func decode(_ frame: [UInt8]) throws(SyncError) -> SyncMessage {
        if frame.count > SyncLimits.maxFrameBytes { throw .frameTooLarge(size: frame.count, limit: SyncLimits.maxFrameBytes) }
        let value: CBORValue
        do { value = try CBORDecoder.decode(frame) } catch { throw .malformed("frame is not canonical CBOR: \(error)") }
        guard let items = value.arrayValue, let first = items.first, let raw = first.unsignedValue else {
            throw .malformed("a message is an array starting with its type")
        }
        guard let code = Code(rawValue: raw) else { throw .malformed("unknown message type \(raw)") }
        func count(_ n: Int) throws(SyncError) {
            guard items.count == n else { throw .malformed("message \(code) must have \(n) items, has \(items.count)") }
        }
        func u64(_ v: CBORValue, _ what: String) throws(SyncError) -> UInt64 {
            guard let n = v.unsignedValue else { throw .malformed("\(what) must be an unsigned integer") }
            return n
        }
        func b32(_ v: CBORValue, _ what: String) throws(SyncError) -> Bytes32 {
            guard let b = v.bytesValue, let k = Bytes32(b) else { throw .malformed("\(what) must be 32 bytes") }
            return k
        }
        func list(_ v: CBORValue, _ what: String) throws(SyncError) -> [CBORValue] {
            guard let a = v.arrayValue else { throw .malformed("\(what) must be an array") }
            if a.count > SyncLimits.maxListItems { throw .malformed("\(what) has \(a.count) items, over \(SyncLimits.maxListItems)") }
            return a
        }
        switch code {
        case .hello:
            guard items.count >= 2 else { throw .malformed("hello without a version") }
            let version = try u64(items[1], "version")
            // The version is checked before the rest, so a newer peer gets a clear answer.
            guard version == SyncProtocol.version else { throw .unsupportedVersion(version) }
            try count(6)
            let hops: UInt64? = items[4].isNull ? nil : try u64(items[4], "hops")
            return .hello(
                SyncHello(
                    version: version, user: try b32(items[2], "user"),
                    capabilities: SyncCapabilities(rawValue: try u64(items[3], "capabilities")), hops: hops,
                    since: try u64(items[5], "since")))
        case .have:
            try count(2)
            var out: [FeedAnnouncement] = []
            for entry in try list(items[1], "have") {
                guard let e = entry.arrayValue, e.count == 3 else { throw .malformed("a have entry is [author, seq, head]") }
                let seq = try u64(e[1], "seq")
                guard seq >= 1 else { throw .malformed("a have entry's seq must be at least 1") }
                out.append(FeedAnnouncement(author: try b32(e[0], "author"), seq: seq, head: try b32(e[2], "head")))
            }
            return .have(out)
        case .haveEnd:
            try count(2)
            return .haveEnd(position: try u64(items[1], "position"))
        case .want:
            try count(2)
            var out: [FeedRange] = []
            for entry in try list(items[1], "want") {
                guard let e = entry.arrayValue, e.count == 4 else { throw .malformed("a want entry is [author, from, prev, to]") }
                let from = try u64(e[1], "from")
                let to = try u64(e[3], "to")
                let prev: EventID? = e[2].isNull ? nil : try b32(e[2], "prev")
                guard from >= 1, to >= from, (from == 1) == (prev == nil) else {
                    throw .malformed("a want range needs 1 <= from <= to and prev exactly when from > 1")
                }
                out.append(FeedRange(author: try b32(e[0], "author"), from: from, prev: prev, to: to))
            }
            return .want(out)
        case .events:
            try count(2)
            var out: [[UInt8]] = []
            for entry in try list(items[1], "events") {
                guard let b = entry.bytesValue else { throw .malformed("an event must travel as a byte string") }
                out.append(b)
            }
            return .events(out)
        case .ack:
            try count(2)
            return .ack(try u64(items[1], "ack count"))
        case .blobWant:
            try count(2)
            var out: [Hash32] = []
            for entry in try list(items[1], "blob want") { out.append(try b32(entry, "blob hash")) }
            return .blobWant(out)
        case .blobData:
            try count(5)
            guard let bytes = items[4].bytesValue, !bytes.isEmpty else { throw .malformed("blob chunk must be non-empty bytes") }
            return .blobData(
                hash: try b32(items[1], "blob hash"), offset: try u64(items[2], "offset"), total: try u64(items[3], "total"),
                bytes: bytes)
        case .blobMissing:
            try count(2)
            return .blobMissing(try b32(items[1], "blob hash"))
        case .error:
            try count(3)
            guard let c = items[1].textValue, let m = items[2].textValue else { throw .malformed("error is [code, message]") }
            return .error(code: c, message: m)
        case .payloadWant:
            try count(2)
            var out: [EventID] = []
            for entry in try list(items[1], "payload want") { out.append(try b32(entry, "event id")) }
            return .payloadWant(out)
        case .invite:
            try count(2)
            var out: [PublicKey] = []
            for entry in try list(items[1], "invite") { out.append(try b32(entry, "feed key")) }
            return .invite(out)
        case .blobSerial:
            try count(2)
            return .blobSerial(try u64(items[1], "blob serial"))
        case .reconcile:
            try count(4)
            func prefix(_ v: CBORValue, depths: ClosedRange<Int>) throws(SyncError) -> [UInt8] {
                guard let p = v.bytesValue, depths.contains(p.count), p.allSatisfy({ $0 < 16 }) else {
                    throw .malformed("a reconcile bucket prefix is \(depths) nibbles, one per byte, each below 16")
                }
                return p
            }
            var splits: [ReconcileSplit] = []
            for entry in try list(items[2], "reconcile splits") {
                guard let e = entry.arrayValue, e.count == 2, let f = e[1].bytesValue, f.count == 16 * Reconciler.digestBytes else {
                    throw .malformed("a reconcile split is [prefix, 16 fingerprints of 8 bytes]")
                }
                splits.append(ReconcileSplit(prefix: try prefix(e[0], depths: 0...63), fingerprints: f))
            }
            var leaves: [ReconcileLeaf] = []
            for entry in try list(items[3], "reconcile leaves") {
                guard let e = entry.arrayValue, e.count == 2 else { throw .malformed("a reconcile leaf is [prefix, digests or null]") }
                var digests: [UInt8]? = nil
                if !e[1].isNull {
                    guard let d = e[1].bytesValue, d.count % Reconciler.digestBytes == 0,
                        d.count <= Reconciler.maxLeafItems * Reconciler.digestBytes
                    else { throw .malformed("reconcile leaf digests are at most \(Reconciler.maxLeafItems) values of 8 bytes") }
                    digests = d
                }
                leaves.append(ReconcileLeaf(prefix: try prefix(e[0], depths: 1...64), digests: digests))
            }
            return .reconcile(ReconcileRound(count: try u64(items[1], "feed count"), splits: splits, leaves: leaves))
        case .sketchInfo:
            try count(5)
            guard let hash = items[3].bytesValue, hash.count == 16, let nonce = items[4].bytesValue, nonce.count == SketchReconciler.nonceBytes else {
                throw .malformed("sketchInfo is [count, total, 16-byte set hash, 16-byte nonce]")
            }
            return .sketchInfo(SketchInfo(count: try u64(items[1], "feed count"), total: try u64(items[2], "height total"), setHash: hash, nonce: nonce))
        case .sketch:
            try count(3)
            guard let raw = items[2].bytesValue, !raw.isEmpty, raw.count % 8 == 0, raw.count <= 16 * SketchReconciler.maxCapacity else {
                throw .malformed("sketch sums are 1 to \(2 * SketchReconciler.maxCapacity) values of 8 bytes")
            }
            return .sketch(SketchSums(checksum: try u64(items[1], "sketch checksum"), sums: Reconciler.words(raw)))
        case .sketchResult:
            try count(4)
            guard let outcome = SketchResult.Outcome(rawValue: try u64(items[1], "sketch outcome")) else {
                throw .malformed("a sketch outcome is 0 (more), 1 (found) or 2 (give up)")
            }
            var asks: [UInt64] = []
            for entry in try list(items[2], "sketch asks") { asks.append(try u64(entry, "a sketch tag")) }
            let push = try u64(items[3], "a sketch result's push count")
            guard outcome == .found || (asks.isEmpty && push == 0) else { throw .malformed("only a found sketch result asks or pushes") }
            return .sketchResult(SketchResult(outcome: outcome, asks: asks, push: push))
        case .wantEnd: try count(1); return .wantEnd
        case .eventsEnd: try count(1); return .eventsEnd
        case .blobWantEnd: try count(1); return .blobWantEnd
        case .blobEnd: try count(1); return .blobEnd
        case .done:
            try count(2)
            return .done(position: try u64(items[1], "position"))
        case .payloadWantEnd: try count(1); return .payloadWantEnd
        case .scope:
            try count(2)
            var out: [PublicKey] = []
            for entry in try list(items[1], "scope") { out.append(try b32(entry, "feed key")) }
            return .scope(out)
        case .scopeEnd: try count(1); return .scopeEnd
        case .scopeAnswered: try count(1); return .scopeAnswered
        case .inbox:
            try count(2)
            return .inbox(since: try u64(items[1], "inbox serial"))
        case .deliver:
            try count(2)
            var out: [[UInt8]] = []
            for entry in try list(items[1], "deliver") {
                guard let b = entry.bytesValue else { throw .malformed("a delivered event must travel as a byte string") }
                out.append(b)
            }
            return .deliver(out)
        case .deliverEnd: try count(1); return .deliverEnd
        case .notices:
            try count(2)
            var out: [Notice] = []
            for entry in try list(items[1], "notices") {
                guard let e = entry.arrayValue, e.count == 2, let envelope = e[1].bytesValue else {
                    throw .malformed("a notice is [user key or null, envelope]")
                }
                out.append(Notice(user: e[0].isNull ? nil : try b32(e[0], "notice user"), envelope: envelope))
            }
            return .notices(out)
        case .inboxEnd:
            try count(3)
            return .inboxEnd(serial: try u64(items[1], "inbox serial"), kept: try u64(items[2], "kept count"))
        }
    }
}

/// Sizes the protocol bounds (Specs/sync.md §5).
package enum SyncLimits {
    /// The largest frame a node accepts.
    package static let maxFrameBytes = 1 << 20
    /// The most entries in one have, want, blob want or payload want list.
    package static let maxListItems = 4096
    /// A sender puts at most this many event bytes in one events frame
    /// (one event larger than this travels alone).
    package static let eventBatchBytes = 256 << 10
    /// A sender puts at most this many events in one events frame
    /// (Specs/sync.md §4.3).
    package static let eventBatchCount = 1024
    /// Announcements and requests per frame.
    package static let listBatch = 1024
    /// Blob bytes per blobData frame.
    package static let blobChunkBytes = 64 << 10
    /// Unacknowledged `events` frames a sender may have in flight, or four
    /// times as many blob frames (`ServeState.DataFrame`). Wide enough
    /// that a receiver's group commit takes tens of thousands of events
    /// (Specs/sync.md §5): a commit's cost in a large store is mostly the
    /// pages it rewrites, so fewer, larger commits ingest faster; and wider
    /// than one commit, so that the receiver verifies the next frames while
    /// a commit is written.
    package static let window = 128
    /// The most bytes of frames a sender queues for the network before
    /// it waits for the peer to read (Specs/sync.md §5).
    package static let outboxBytes = 2 << 20
    /// Event ids asked for in one payload refill round.
    package static let maxRefill = 10_000
    /// The most feeds one session's invitations may add to a scope.
    package static let maxInvitedFeeds = 100_000
    /// The most feeds a peer's scope may name in one session (Specs/sync.md §4.10).
    package static let maxScopeFeeds = 1_000_000
    /// The most events one side delivers, and the most notices it sends, in
    /// one session's inbox exchange (Specs/sync.md §4.11); the rest wait
    /// for the next session.
    package static let maxInboxEvents = 4096
}
