import ChorusCBOR
import ChorusCrypto
import ChorusEvents

/// A device's published X25519 encryption key (Specs/encryption.md §3).
package struct EncryptionKeyRecord: Hashable, Sendable {
    /// The device's X25519 public key, from the effective `device.key`.
    package let key: Bytes32
    /// HLC of the effective `device.key` (the first in merge order signed by
    /// the device itself, Specs/projections.md §6.10).
    package let hlc: HLC
    /// Id of that `device.key` event.
    package let event: EventID

    func encoded() -> [UInt8] { Codec.cbor(.array([.bytes(key.bytes), .unsigned(hlc.rawValue), .bytes(event.bytes)])) }

    static func decode(_ raw: [UInt8]) throws -> EncryptionKeyRecord {
        let v = try Codec.decode(raw, "encryption key")
        guard let a = v.arrayValue, a.count == 3, let key = a[0].id32, let hlc = a[1].unsignedValue, let event = a[2].id32 else {
            throw ProjectionError.corrupt("encryption key record")
        }
        return EncryptionKeyRecord(key: key, hlc: HLC(rawValue: hlc), event: event)
    }
}

/// An epoch of a chat as every replica records it: when it started and the
/// key event that introduced it (Specs/encryption.md §4).
package struct EpochRecord: Hashable, Sendable {
    /// The epoch id (Specs/encryption.md §4) named by the key events.
    package let epoch: Hash32
    /// HLC of the first effective `chat.key` naming the epoch: the epoch's
    /// start (Specs/projections.md §6.11).
    package let start: HLC
    /// Id of that first effective `chat.key`.
    package let introducedBy: EventID
}

/// The reasons a `device.key` takes no effect (Specs/projections.md §6.10),
/// one wording for the whole and the one-at-a-time fold.
enum DeviceKeyRule {
    static func notOwner(_ device: Bytes32) -> NoEffect {
        NoEffect("not_owner", "only device \(device.short) may publish its encryption key")
    }
    static func alreadyPublished(_ device: Bytes32) -> NoEffect {
        NoEffect("already_published", "device \(device.short) published its encryption key earlier")
    }
}

extension FoldRun {
    /// Folds one new `device.key` of `device` into its stored state: the same
    /// state and decisions as `foldDeviceKey` from all facts (Specs/
    /// projections.md §9.1), because whether it can take effect depends on its
    /// own author only and the state holds the first effective one. Without
    /// this, every `device.key` naming a device, whoever signed it, would
    /// re-read all the earlier ones: a peer could make each of its events
    /// cost every node more than the last.
    mutating func foldDeviceKeyFact(_ device: Bytes32, _ f: Fact) throws {
        guard f.author == device else {
            return try decide(f, DeviceKeyRule.notOwner(device))
        }
        let stateKey = Table.encryptionKey.key(device)
        if let stored = try txn.get(p.state, stateKey) {
            let record = try EncryptionKeyRecord.decode(stored)
            guard f.order < MergeOrder(hlc: record.hlc, author: device, id: record.event) else {
                return try decide(f, DeviceKeyRule.alreadyPublished(device))
            }
            // Earlier in merge order than the key in effect: it takes its place.
            guard let arrival = try p.log.readArrival(of: record.event, in: txn) else {
                throw ProjectionError.corrupt("the device key event \(record.event.short) in effect is not in the log")
            }
            try decide(record.event, at: arrival, DeviceKeyRule.alreadyPublished(device))
        }
        try txn.put(p.state, stateKey, EncryptionKeyRecord(key: try f.read(DeviceKeyPayload.self).key, hlc: f.hlc, event: f.id).encoded())
        try decide(f, nil)
    }

    /// The first `device.key` in merge order signed by the device itself
    /// takes effect; the key never changes (Specs/projections.md §6.10).
    mutating func foldDeviceKey(_ device: Bytes32) throws {
        var winner: (fact: Fact, key: Bytes32)? = nil
        for f in try facts(.deviceKey, device) {
            guard f.author == device else {
                try decide(f, DeviceKeyRule.notOwner(device))
                continue
            }
            guard winner == nil else {
                try decide(f, DeviceKeyRule.alreadyPublished(device))
                continue
            }
            winner = (f, try f.read(DeviceKeyPayload.self).key)
            try decide(f, nil)
        }
        let stateKey = Table.encryptionKey.key(device)
        if let winner {
            try txn.put(p.state, stateKey, EncryptionKeyRecord(key: winner.key, hlc: winner.fact.hlc, event: winner.fact.id).encoded())
        } else {
            try txn.delete(p.state, stateKey)
        }
    }

    /// A chat's key events: each takes effect when the chat exists and its
    /// acting user is a member at its HLC; the first effective event naming
    /// an epoch introduces it, and the first effective wrap for a device is
    /// the one recorded (Specs/projections.md §6.11). Re-folded whole when
    /// the chat's membership changes.
    /// Folds one new `chat.key` of `chat` into the chat's epoch and wrap
    /// entries when that gives the state and decisions `foldChatKeys` gives
    /// from all the chat's key facts (Specs/projections.md §9.1); returns
    /// false when the chat's keys must be folded whole (the new one's HLC
    /// equals the entry's it would have to be ordered against). Whether one
    /// takes effect depends on its actor's membership at its HLC alone, and
    /// each entry holds the first effective one in merge order; a membership
    /// or binding change in the same run folds the chat's keys whole.
    mutating func foldChatKeyFact(_ chat: ObjectID, _ f: Fact) throws -> Bool {
        guard let key = try effectiveChatKey(chat, f, chatExists: try txn.get(p.state, Table.chat.key(chat)) != nil) else { return true }
        /// Whether `f` comes before the effective event an entry names
        /// (nil: their HLCs are equal, and the entry names no author).
        func earlier(thanEventAt hlc: HLC) -> Bool? { hlc == f.hlc ? nil : f.hlc < hlc }
        var writes: [([UInt8], [UInt8])] = []
        let epochKey = Table.epoch.key(chat, key.epoch)
        if let stored = try txn.get(p.state, epochKey) {
            guard let entry = try Codec.decode(stored, "epoch").arrayValue, entry.count == 2, let hlc = entry[0].unsignedValue else {
                throw ProjectionError.corrupt("epoch entry of \(stored.count) bytes")
            }
            guard let first = earlier(thanEventAt: HLC(rawValue: hlc)) else { return false }
            if first { writes.append((epochKey, Codec.cbor(.array([.unsigned(f.hlc.rawValue), .bytes(f.id.bytes)])))) }
        } else {
            writes.append((epochKey, Codec.cbor(.array([.unsigned(f.hlc.rawValue), .bytes(f.id.bytes)]))))
        }
        for device in try wrapRecipients(chat, key, at: f.hlc) {
            let wrapKey = Table.wrap.key(chat, key.epoch, device)
            if let stored = try txn.get(p.state, wrapKey) {
                // The entry names the event; its HLC is in the log.
                guard let id = Bytes32(stored), let arrival = try p.log.readArrival(of: id, in: txn) else {
                    throw ProjectionError.corrupt("wrap entry naming no event in the log")
                }
                guard let first = earlier(thanEventAt: try p.log.readTrusted(at: arrival, in: txn).hlc) else { return false }
                if first { writes.append((wrapKey, f.id.bytes)) }
            } else {
                writes.append((wrapKey, f.id.bytes))
            }
        }
        for (k, v) in writes { try putState(k, v) }
        try decide(f, nil)
        return true
    }

    /// Decides one `chat.key` of `chat`: its payload when it can take
    /// effect (its actor a member at its HLC of a chat this node holds), nil
    /// with the reason recorded when not (the caller records it as taking
    /// effect).
    private mutating func effectiveChatKey(_ chat: ObjectID, _ f: Fact, chatExists: Bool) throws -> ChatKeyPayload? {
        guard let user = try actingUserOrRecord(f) else { return nil }
        guard chatExists else {
            try decide(f, NoEffect("chat_unknown", "this node holds no creation of chat \(chat.short) before this event"))
            return nil
        }
        guard try membership(chat, user)?.isMember(at: f.hlc) == true else {
            try decide(f, NoEffect("not_member", "\(user.short) was not a member of chat \(chat.short) then"))
            return nil
        }
        return try f.read(ChatKeyPayload.self)
    }

    /// The devices `key` wraps for that receive a wrap: only a current
    /// device of a member at the event's HLC (one sent to a removed device
    /// or member by a device that had not seen the removal takes no effect).
    private mutating func wrapRecipients(_ chat: ObjectID, _ key: ChatKeyPayload, at hlc: HLC) throws -> [PublicKey] {
        try key.devices.filter { device in
            guard let recipient = try actingUser(device, at: hlc) else { return false }
            return try membership(chat, recipient)?.isMember(at: hlc) == true
        }
    }

    mutating func foldChatKeys(_ chat: ObjectID) throws {
        // Membership intervals start at the creation at the earliest, so a
        // member at the event's HLC implies the chat existed before it.
        let chatExists = try txn.get(p.state, Table.chat.key(chat)) != nil
        var epochs: [StateKey: [UInt8]] = [:]
        var wrapEntries: [StateKey: [UInt8]] = [:]
        for f in try facts(.chatKeys, chat) {
            guard let key = try effectiveChatKey(chat, f, chatExists: chatExists) else { continue }
            let epochKey = StateKey(Table.epoch.key(chat, key.epoch))
            if epochs[epochKey] == nil {
                epochs[epochKey] = Codec.cbor(.array([.unsigned(f.hlc.rawValue), .bytes(f.id.bytes)]))
            }
            for device in try wrapRecipients(chat, key, at: f.hlc) {
                let wrapKey = StateKey(Table.wrap.key(chat, key.epoch, device))
                if wrapEntries[wrapKey] == nil { wrapEntries[wrapKey] = f.id.bytes }
            }
            try decide(f, nil)
        }
        try replace(prefix: Table.epoch.key(chat), with: epochs)
        try replace(prefix: Table.wrap.key(chat), with: wrapEntries)
    }
}

extension Projections {
    /// The published encryption key of a device, if this node holds it.
    package func encryptionKey(of device: PublicKey) throws -> EncryptionKeyRecord? {
        try log.env.read { txn in try txn.get(state, Table.encryptionKey.key(device)).map(EncryptionKeyRecord.decode) }
    }

    /// Every epoch of a chat, in order of introduction (merge order of the
    /// introducing event).
    package func epochs(of chat: ObjectID) throws -> [EpochRecord] {
        try log.env.read { txn in
            var out: [EpochRecord] = []
            try txn.scan(state, prefix: Table.epoch.key(chat)) { key, value in
                let v = try Codec.decode(value, "epoch record")
                guard let a = v.arrayValue, a.count == 2, let start = a[0].unsignedValue, let by = a[1].id32 else {
                    throw ProjectionError.corrupt("epoch record")
                }
                out.append(EpochRecord(epoch: try Codec.b32(key[33...], "epoch id"), start: HLC(rawValue: start), introducedBy: by))
                return true
            }
            return out.sorted { ($0.start, $0.introducedBy) < ($1.start, $1.introducedBy) }
        }
    }

    /// The devices holding a wrap of an epoch, each with the key event that
    /// carries it.
    package func wraps(of chat: ObjectID, epoch: Hash32) throws -> [(device: PublicKey, event: EventID)] {
        try log.env.read { txn in
            var out: [(PublicKey, EventID)] = []
            try txn.scan(state, prefix: Table.wrap.key(chat, epoch)) { key, value in
                out.append((try Codec.b32(key[65...], "device"), try Codec.b32(value[...], "key event id")))
                return true
            }
            return out
        }
    }

    /// The key event carrying `device`'s wrap of an epoch, if any.
    package func wrap(of chat: ObjectID, epoch: Hash32, for device: PublicKey) throws -> EventID? {
        try log.env.read { txn in
            try txn.get(state, Table.wrap.key(chat, epoch, device)).map { try Codec.b32($0[...], "key event id") }
        }
    }

    /// Membership of a user in a chat over time, if it ever was a member.
    package func membership(of user: PublicKey, in chat: ObjectID) throws -> Membership? {
        try log.env.read { txn in try txn.get(state, Table.member.key(chat, user)).map(Membership.decode) }
    }

    /// Every device that may hold an epoch's key: the authors of every
    /// `chat.key` naming it and every device those events wrap it to,
    /// whether or not the events took effect (a removed member's device
    /// that rotated before learning of its removal knows the key it made).
    package func possibleHolders(of chat: ObjectID, epoch: Hash32) throws -> Set<PublicKey> {
        var out: Set<PublicKey> = []
        for (author, key) in try keyEventsWithAuthors(of: chat, epoch: epoch) {
            out.insert(author)
            out.formUnion(key.devices)
        }
        return out
    }

    /// Every `chat.key` naming the epoch that this node holds, effective or not.
    package func keyEvents(of chat: ObjectID, epoch: Hash32) throws -> [ChatKeyPayload] {
        try keyEventsWithAuthors(of: chat, epoch: epoch).map(\.key)
    }

    func keyEventsWithAuthors(of chat: ObjectID, epoch: Hash32) throws -> [(author: PublicKey, key: ChatKeyPayload)] {
        try log.env.read { txn in
            var out: [(PublicKey, ChatKeyPayload)] = []
            try scanFacts(prefix: [ObjectClass.chatKeys.rawValue] + chat.bytes, in: txn) { key, value in
                let fact = try Fact.load(key: key, value: value, log: log, in: txn)
                guard let payload = fact.payload, let k = try? ChatKeyPayload(reading: payload), k.epoch == epoch else { return true }
                out.append((fact.author, k))
                return true
            }
            return out
        }
    }

    /// Every user who ever was a member of the chat, with their intervals.
    package func memberships(in chat: ObjectID) throws -> [(user: PublicKey, membership: Membership)] {
        try log.env.read { txn in
            var out: [(PublicKey, Membership)] = []
            try txn.scan(state, prefix: Table.member.key(chat)) { key, value in
                out.append((try Codec.b32(key.suffix(32), "member"), try Membership.decode(value)))
                return true
            }
            return out
        }
    }
}
