import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusStorage

/// One event as filed under one projected object, for audit tools.
package struct FiledEvent: Hashable, Sendable {
    /// The object class: device, profile, picture, follow, like, block,
    /// chat, reads, message, slots, coins, device-key or chat-keys.
    package let objectClass: String
    /// The object the event is filed under; all zero for coin events, which
    /// share one ledger.
    package let object: Bytes32
    /// The event's merge order (Specs/projections.md §2).
    package let order: MergeOrder
    /// The event's kind, from its header (key 5, Specs/events.md §6).
    package let kind: EventKind
    /// The event's header object (differs from `object` for messages).
    package let headerObject: Bytes32
    /// nil when the payload is purged.
    package let payload: CBORValue?

    /// The event's id (the last part of `order`).
    package var id: EventID { order.id }
}

/// Read access to the folding inputs and raw state, for the replay tool.
extension Projections {
    static func className(_ cls: ObjectClass) -> String {
        switch cls {
        case .device: "device"
        case .profile: "profile"
        case .picture: "picture"
        case .follow: "follow"
        case .like: "like"
        case .block: "block"
        case .chat: "chat"
        case .reads: "reads"
        case .message: "message"
        case .slots: "slots"
        case .coins: "coins"
        case .deviceKey: "device-key"
        case .chatKeys: "chat-keys"
        }
    }

    /// Every event filed under `object` in any class, plus every coin event
    /// naming it, in merge order within each class.
    package func filedEvents(about object: Bytes32) throws -> [FiledEvent] {
        try log.env.read { txn in
            var out: [FiledEvent] = []
            for cls in ObjectClass.allCases where cls != .coins {
                var filed: [Fact] = []
                try scanFacts(prefix: [cls.rawValue] + object.bytes, in: txn) { key, value in
                    filed.append(try Fact.load(key: key, value: value, log: log, in: txn))
                    return true
                }
                // A message's send is named by its chat's message index, not filed as a fact (§9.1).
                if cls == .message, let sent = try sentEvent(object, in: txn) {
                    filed = (filed + [Fact(sent)]).sorted { $0.order < $1.order }
                }
                for f in filed {
                    out.append(
                        FiledEvent(
                            objectClass: Self.className(cls), object: object, order: f.order, kind: f.kind, headerObject: f.object,
                            payload: f.payload))
                }
            }
            var coinOrders: [MergeOrder] = []
            try txn.scan(index, prefix: IndexTable.coinParty.key(object)) { key, _ in
                coinOrders.append(try MergeOrder(bytes: key[33...]))
                return true
            }
            for order in coinOrders {
                let key = Self.factKey(.coins, .zero, order)
                guard let raw = try fact(key, in: txn) else { continue }
                let f = try Fact.load(order: order, value: raw, filedUnder: .zero, log: log, in: txn)
                out.append(
                    FiledEvent(objectClass: "coins", object: .zero, order: order, kind: f.kind, headerObject: f.object, payload: f.payload))
            }
            return out
        }
    }

    /// The messages filed under a chat (whatever their effect), by sending
    /// time (HLC), then id.
    package func messageIDs(inChat chat: ObjectID) throws -> [EventID] {
        try log.env.read { txn in
            var out: [EventID] = []
            try txn.scan(state, prefix: Table.message.key(chat)) { key, _ in
                out.append(try Codec.b32(key.suffix(32), "message id"))
                return true
            }
            return out
        }
    }

    /// The ledger entry of one coin event.
    package func ledgerEntry(_ order: MergeOrder) throws -> LedgerEntry? {
        try log.env.read { txn in try txn.get(state, Table.ledger.key(order)).map(LedgerEntry.decode) }
    }

    /// A readable name for a state key, as §5 of Specs/projections.md
    /// gives it or as stored (§9.1): the table and its key parts.
    package static func describe(key: [UInt8]) -> String {
        guard let first = key.first else { return "(empty key)" }
        let rest = Array(key.dropFirst())
        func hex(_ r: Range<Int>) -> String { r.upperBound <= rest.count ? Hex.encode(rest[r]) : Hex.encode(rest) }
        func tail(_ from: Int) -> String { from < rest.count ? Hex.encode(rest[from...]) : "" }
        switch Table(keyByte: first) {
        case .device: return "device \(hex(0..<32))"
        case .userDevice: return "user \(hex(0..<32)) device \(hex(32..<64))"
        case .profile: return "profile \(hex(0..<32)) field \(String(decoding: rest.dropFirst(32), as: UTF8.self))"
        case .relays: return "relay list of \(hex(0..<32))"
        case .picture: return "picture \(hex(0..<32))"
        case .gallery: return "gallery of \(hex(0..<32)) picture \(Hex.encode(rest.suffix(32)))"
        case .picturesByTime: return "pictures-by-time of \(hex(0..<32)) picture \(Hex.encode(rest.suffix(32)))"
        case .blobRef: return "blob \(hex(0..<32)) used by picture or message \(hex(32..<64))"
        case .encryptionKey: return "encryption key of device \(hex(0..<32))"
        case .epoch: return "chat \(hex(0..<32)) epoch \(hex(32..<64))"
        case .wrap: return "chat \(hex(0..<32)) epoch \(hex(32..<64)) key for device \(hex(64..<96))"
        case .edge: return "\(edgeName(rest.first)) of \(hex(1..<33)) by \(hex(33..<65))"
        case .edgeOut: return "\(edgeName(rest.first)) by \(hex(1..<33)) of \(hex(33..<65))"
        case .chat: return "chat \(hex(0..<32))"
        case .member: return "chat \(hex(0..<32)) member \(hex(32..<64))"
        case .userChat: return "user \(hex(0..<32)) in chat \(hex(32..<64))"
        case .message: return "chat \(hex(0..<32)) message \(Hex.encode(rest.suffix(32)))"
        case .read: return "chat \(hex(0..<32)) read marker of \(hex(32..<64))"
        case .messageCount: return "chat \(hex(0..<32)) message count"
        case .rights: return "coin rights of \(hex(0..<32))"
        case .receipt: return "receipt \(String(decoding: rest, as: UTF8.self))"
        case .slotUnlock: return "slot \(rest.count > 32 ? String(rest[32]) : "?") of \(hex(0..<32)) unlocked"
        case .ledger: return "ledger entry for event \(Hex.encode(rest.suffix(32)))"
        case .slot: return "slot \(rest.count > 32 ? String(rest[32]) : "?") of \(hex(0..<32))"
        case .noEffect: return "no-effect record of event \(tail(0))"
        case nil: return "unknown table 0x\(String(first, radix: 16)) key \(Hex.encode(rest))"
        }
    }

    static func edgeName(_ byte: UInt8?) -> String {
        switch byte.flatMap(ObjectClass.init(rawValue:)) {
        case .follow: "follow"
        case .like: "like"
        case .block: "block"
        default: "edge"
        }
    }

    /// Database sizes in bytes (pages in use) of the projection databases.
    package func databaseSizes() throws -> [(name: String, bytes: Int)] {
        [("facts", facts), ("facts_recent", recentFacts), ("index", index), ("state", state)].map { ($0.0, (try? log.env.pageCount(of: $0.1)) ?? 0) }
    }

    /// Writes one raw state entry (tests use it to damage a store behind
    /// the log's back; nothing else should).
    package func unsafePutStateEntry(key: [UInt8], value: [UInt8]?) throws {
        try log.env.write { txn in
            if let value { try txn.put(state, key, value) } else { try txn.delete(state, key) }
        }
    }
}

extension Projections {
    /// Events this node holds without their payload although no deletion
    /// covers them (a purge whose deletion later lost its effect, or a copy
    /// stripped by a relay): sync asks peers for the full events, and the
    /// log refills them (Specs/projections.md §9). Read from the
    /// `payloadGap` entries (§9.1), so its cost follows the objects held
    /// that way, not the size of the store: sync asks at every round that
    /// received events.
    package func eventsMissingPayload(limit: Int = 10_000) throws -> [EventID] {
        try log.env.read { txn in
            var objects: [(ObjectClass, Bytes32)] = []
            try txn.scan(index, prefix: [IndexTable.payloadGap.rawValue]) { key, _ in
                guard key.count == 34, let cls = ObjectClass(rawValue: key[1]), cls == .picture || cls == .message else {
                    throw ProjectionError.corrupt("payload gap entry \(Hex.encode(key))")
                }
                objects.append((cls, try Codec.b32(key[2...], "object id")))
                return true
            }
            var out: [EventID] = []
            for (cls, object) in objects {
                var filed: [Fact] = []
                if cls == .message, let sent = try sentEvent(object, in: txn) { filed.append(Fact(sent)) }
                try scanFacts(prefix: [cls.rawValue] + object.bytes, in: txn) { key, value in
                    filed.append(try Fact.load(key: key, value: value, log: log, in: txn))
                    return true
                }
                for fact in filed where fact.payload == nil && fact.kind.payloadIsPurgeable && out.count < limit { out.append(fact.id) }
                if out.count >= limit { break }
            }
            return out
        }
    }

    /// Blobs that live pictures and messages reference and this node lacks,
    /// each with one object that references it: what sync fetches. Read
    /// from the `blobWanted` entries (Specs/projections.md §9.1), so its
    /// cost follows the blobs lacked, not the pictures held; each entry is
    /// checked against the `blobRef` table and the blob store as it is read.
    package func wantedBlobs() throws -> [(blob: Hash32, object: ObjectID)] {
        try log.env.read { txn in
            var hashes: [Hash32] = []
            try txn.scan(index, prefix: [IndexTable.blobWanted.rawValue]) { key, _ in
                hashes.append(try Codec.b32(key[1...], "wanted blob"))
                return true
            }
            var out: [(Hash32, ObjectID)] = []
            for hash in hashes where try !blobs.contains(hash, in: txn) {
                var object: ObjectID? = nil
                try txn.scan(state, prefix: Table.blobRef.key(hash)) { key, _ in
                    guard key.count == 65 else { throw ProjectionError.corrupt("blob reference key of \(key.count) bytes") }
                    object = try Codec.b32(key[33...], "object id")
                    return false
                }
                if let object { out.append((hash, object)) }
            }
            return out
        }
    }

    /// Records, in the transaction that stores `blob`, that it is no longer
    /// wanted (its `blobWanted` entry, §9.1).
    package func blobStored(_ blob: Hash32, in txn: Transaction) throws {
        try txn.delete(index, IndexTable.blobWanted.key(blob))
    }

    /// Whether a live picture still references `blob`.
    package func isBlobReferenced(_ blob: Hash32, in txn: Transaction) throws -> Bool {
        var found = false
        try txn.scan(state, prefix: Table.blobRef.key(blob)) { _, _ in
            found = true
            return false
        }
        return found
    }
}
