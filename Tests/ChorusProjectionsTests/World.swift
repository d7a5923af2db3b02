import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusProjections
import ChorusTestSupport
import Foundation

/// A simulated network for property tests: users with one to three devices
/// (bound by user-signed device.added with the device's proof, sometimes
/// removed later), an issuer and a stranger, each writing its own feed with
/// its own hybrid clock. A device sees a prefix of everything written so far
/// (it syncs now and then), so its events are causally plausible from its
/// own view and concurrent with what it has not seen.
final class World {
    struct User {
        let key: FeedWriter
        var devices: [Device]
        var name: PublicKey { key.publicKey }
    }
    final class Device {
        let writer: FeedWriter
        let user: Int
        /// How many of the world's events this device has seen.
        var seen = 0
        /// A small per-device offset of its wall clock.
        let skewMillis: Int
        init(_ writer: FeedWriter, user: Int, skewMillis: Int) {
            self.writer = writer
            self.user = user
            self.skewMillis = skewMillis
        }
    }
    struct Known<T> {
        let value: T
        /// Index in `events` of the event that made it known.
        let index: Int
        let author: PublicKey
    }

    var rng: SplitMix64
    let config: NetworkConfig
    /// The coins its credits may add up to (Specs/projections.md §6.9): in
    /// half the worlds low enough that credits reach it, so replicas decide
    /// `supply_exhausted` in every order.
    let supplyLimit: Int64
    let issuer: FeedWriter
    let stranger: FeedWriter
    var users: [User] = []
    var events: [Event] = []
    var maxHLCPrefix: [HLC] = [.zero]
    var blobs: [Hash32: [UInt8]] = [:]
    var now: UInt64 = 1_700_000_000_000

    var pictures: [Known<(id: ObjectID, owner: Int)>] = []
    var chats: [Known<ObjectID>] = []
    var messages: [Known<(id: EventID, chat: ObjectID, sender: Int, hlc: HLC)>] = []
    var adds: [Known<(kind: EventKind, id: EventID, user: Int, target: Bytes32)>] = []
    var receiptCount = 0
    /// The epochs each chat's `chat.key` events named.
    var epochs: [ObjectID: [Hash32]] = [:]

    var userKeys: [PublicKey] { users.map(\.name) }
    var allDevices: [Device] { users.flatMap(\.devices) }

    init(seed: UInt64, users userCount: Int = 3, operations: ClosedRange<Int> = 30...60) throws {
        rng = SplitMix64(seed: seed)
        // From the seed apart from `rng`, so every other draw stays as it was.
        supplyLimit = seed % 2 == 0 ? Projections.defaultSupplyLimit : Int64(40 + (seed >> 1) % 160)
        issuer = FeedWriter(rng.key())
        stranger = FeedWriter(rng.key())
        config = NetworkConfig(issuers: [issuer.publicKey], slotPrices: [0, 20, 40, 80])
        for u in 0..<userCount {
            let user = FeedWriter(rng.key())
            let n = rng.int(1...3)
            var devices: [Device] = []
            for _ in 0..<n { devices.append(Device(FeedWriter(rng.key()), user: u, skewMillis: rng.int(-3...3))) }
            users.append(User(key: user, devices: devices))
        }
        // Bindings first (each user key binds its devices; sometimes a
        // binding without a valid proof, which must not bind).
        for u in users.indices {
            for d in users[u].devices {
                try emit(users[u].key, .deviceAdded, d.writer.publicKey, Payload.deviceAdded(device: d.writer.key, user: users[u].name, name: "phone"))
            }
            if rng.chance(0.3) {
                let ghost = rng.key()
                var bad = Payload.deviceAdded(device: ghost, user: users[(u + 1) % users.count].name)
                if rng.chance(0.5) { bad = [] }
                try emit(users[u].key, .deviceAdded, ghost.publicKey, bad)
            }
        }
        let count = rng.int(operations)
        var removals = rng.chance(0.5) ? 1 : 0
        while events.count < count {
            now += UInt64(rng.int(0...4))
            let roll = rng.int(0...99)
            if roll < 12 {
                try issuerStep()
            } else if roll < 14 {
                try strangerStep()
            } else if roll < 16, removals > 0 {
                removals -= 1
                try removeDevice()
            } else {
                guard let device = rng.pick(allDevices) else { continue }
                try deviceStep(device)
            }
        }
    }

    // MARK: Writing events

    @discardableResult
    func emit(_ writer: FeedWriter, _ kind: EventKind, _ object: Bytes32, _ payload: [(String, CBORValue)], skew: Int = 0)
        throws -> Event
    {
        let e = try writer.sign(kind, object, payload, nowMillis: UInt64(Int64(now) + Int64(skew)))
        events.append(e)
        maxHLCPrefix.append(max(maxHLCPrefix.last!, e.hlc))
        return e
    }

    /// The device catches up on a prefix of what has been written.
    func sync(_ d: Device) {
        let target = rng.int(d.seen...events.count)
        d.seen = target
        d.writer.clock.observe(maxHLCPrefix[target])
    }

    func visible<T>(_ items: [Known<T>], to d: Device) -> [T] {
        items.filter { $0.index < d.seen || $0.author == d.writer.publicKey }.map(\.value)
    }

    func text() -> String { ["hi", "hello", "yo", "ok", "nice", "what?", "lol", "see you"][rng.int(0...7)] + " \(rng.int(0...99))" }

    func newBlob() -> [UInt8] {
        let bytes = [0x89, 0x50, 0x4E, 0x47] + rng.bytes(rng.int(8...40))
        blobs[Blake2b.hash256(bytes)] = bytes
        return bytes
    }

    func issuerStep() throws {
        guard let u = rng.pick(Array(users.indices)), let d = rng.pick(users[u].devices) else { return }
        // A fresh receipt, or one already credited (a redelivery re-signed).
        let receipt: String
        if receiptCount > 0, rng.chance(0.3) {
            receipt = "tx-\(rng.int(0...receiptCount - 1))"
        } else {
            receipt = "tx-\(receiptCount)"
            receiptCount += 1
        }
        try emit(issuer, .coinCredited, d.writer.publicKey, Payload.credit(user: users[u].name, amount: UInt64(rng.int(10...60)), receipt: receipt))
    }

    func strangerStep() throws {
        guard let d = rng.pick(allDevices) else { return }
        if rng.chance(0.5) {
            try emit(stranger, .coinCredited, d.writer.publicKey, Payload.credit(user: users[d.user].name, amount: 100, receipt: "forged-\(rng.int(0...9))"))
        } else {
            // A stranger editing someone's profile.
            try emit(stranger, .profileSet, users[d.user].name, Payload.profile(.name, .text("hacked")))
        }
    }

    func removeDevice() throws {
        guard let u = rng.pick(users.indices.filter { users[$0].devices.count > 1 }) ?? rng.pick(Array(users.indices)),
            let d = rng.pick(users[u].devices)
        else { return }
        // Usually by the owner; sometimes by another user's key (not_owner).
        let by = rng.chance(0.85) ? users[u].key : users[(u + 1) % users.count].key
        try emit(by, .deviceRemoved, d.writer.publicKey, [])
        // Sometimes removed twice, or bound again, with the device's consent, by another user.
        if rng.chance(0.2) { try emit(by, .deviceRemoved, d.writer.publicKey, []) }
        if rng.chance(0.2) {
            let other = (u + 1) % users.count
            try emit(users[other].key, .deviceAdded, d.writer.publicKey, Payload.deviceAdded(device: d.writer.key, user: users[other].name))
        }
    }

    func deviceStep(_ d: Device) throws {
        if rng.chance(0.35) { sync(d) }
        let me = d.user
        let myName = users[me].name
        let others = users.indices.filter { $0 != me }
        let w = d.writer
        let skew = d.skewMillis
        switch rng.int(0...27) {
        case 0...2:
            if rng.chance(0.1) {
                // A device's encryption key (§6.10): mostly its own, sometimes
                // another device's (not_owner), sometimes a second one
                // (already_published).
                let target = rng.chance(0.9) ? w.publicKey : (rng.pick(allDevices)?.writer.publicKey ?? w.publicKey)
                try emit(w, .deviceKey, target, [("key", .bytes(rng.bytes(32)))], skew: skew)
                return
            }
            if rng.chance(0.2) {
                // A relay list (Specs/projections.md §6.12): mostly one's own, sometimes another's (not_owner).
                let relays = (0..<rng.int(0...3)).map { i in
                    Relay(address: "relay\(i).example:\(7800 + i)", key: rng.bytes32(), roles: Relay.Roles(rawValue: UInt8(rng.int(1...3))))
                }
                guard case .map(let entries) = RelaysSetPayload(relays: relays).cbor else { return }
                let target = rng.chance(0.9) ? myName : users[rng.pick(others) ?? me].name
                try emit(w, .relaysSet, target, entries.compactMap { e in e.key.textValue.map { ($0, e.value) } }, skew: skew)
                return
            }
            let field = rng.pick([ProfileField.name, .bio, .city, .birthday, .visibility, .avatar])!
            var value: CBORValue
            switch field {
            case .name: value = .text(["Ann", "Bob", "Cy", "Di"][rng.int(0...3)])
            case .bio, .city: value = .text(text())
            case .birthday: value = .text("19\(rng.int(50...99))-0\(rng.int(1...9))-1\(rng.int(0...9))")
            case .visibility: value = .text(["public", "followers", "private"][rng.int(0...2)])
            default:
                value = rng.pick(visible(pictures, to: d)).map { .bytes($0.id.bytes) } ?? .bytes(rng.bytes(32))
            }
            if rng.chance(0.1) { value = .null }
            // Mostly one's own profile; sometimes someone else's (not_owner).
            let target = rng.chance(0.9) ? myName : users[rng.pick(others) ?? me].name
            try emit(w, .profileSet, target, Payload.profile(field, value), skew: skew)
        case 3...5:
            // Mostly a new id bound to this device; sometimes another's
            // picture (a takeover: `foreign_id`) or an unbound id.
            let fresh = rng.chance(0.9)
            let id = fresh ? w.createdID(rng.bytes(16)) : rng.pick(pictures)?.value.id ?? rng.bytes32()
            let e = try emit(w, .pictureCreated, id, Payload.pictureCreated(blob: newBlob(), caption: rng.chance(0.5) ? text() : nil), skew: skew)
            if fresh { pictures.append(Known(value: (id, me), index: events.count - 1, author: e.author)) }
        case 6:
            guard let p = pickPicture(d) else { return }
            try emit(w, .pictureCaptioned, p.id, Payload.caption(text()), skew: skew)
        case 7:
            guard let p = pickPicture(d) else { return }
            try emit(w, .pictureMoved, p.id, Payload.position(rng.bytes(rng.int(1...3)).map { max($0, 1) }), skew: skew)
        case 8:
            guard let p = pickPicture(d) else { return }
            try emit(w, .pictureDeleted, p.id, [], skew: skew)
        case 9, 10:
            let kind = rng.pick([EventKind.followAdded, .likeAdded, .blockAdded])!
            let target: Bytes32
            if kind == .likeAdded {
                target = rng.pick(visible(pictures, to: d))?.id ?? rng.pick(visible(messages, to: d))?.id ?? myName
            } else {
                // Occasionally oneself ("self").
                target = users[rng.chance(0.95) ? (rng.pick(others) ?? me) : me].name
            }
            let e = try emit(w, kind, target, [], skew: skew)
            adds.append(Known(value: (kind, e.id, me, target), index: events.count - 1, author: e.author))
        case 11, 12:
            // Observed remove: names the adds of this user this device has seen.
            guard let some = rng.pick(visible(adds, to: d).filter { $0.user == me }) else { return }
            let seen = visible(adds, to: d).filter { $0.user == me && $0.kind == some.kind && $0.target == some.target }.map(\.id)
            let kind: EventKind = some.kind == .followAdded ? .followRemoved : some.kind == .likeAdded ? .likeRemoved : .blockRemoved
            try emit(w, kind, some.target, Payload.seen(seen), skew: skew)
        case 13, 14:
            let fresh = rng.chance(0.9)
            let id = fresh ? w.createdID(rng.bytes(16)) : rng.pick(chats)?.value ?? rng.bytes32()
            let members = others.filter { _ in rng.chance(0.6) }.map { users[$0].name }
            let e = try emit(w, .chatCreated, id, Payload.chatCreated(title: rng.chance(0.5) ? "room" : nil, members: members), skew: skew)
            if fresh { chats.append(Known(value: id, index: events.count - 1, author: e.author)) }
        case 15:
            guard let chat = rng.pick(visible(chats, to: d)), let u = rng.pick(Array(users.indices)) else { return }
            try emit(w, .chatMemberAdded, chat, Payload.member(users[u].name, admin: rng.chance(0.3)), skew: skew)
        case 16:
            // Remove someone, or leave.
            guard let chat = rng.pick(visible(chats, to: d)), let u = rng.pick(Array(users.indices)) else { return }
            try emit(w, .chatMemberRemoved, chat, Payload.member(rng.chance(0.5) ? myName : users[u].name), skew: skew)
        case 17...19:
            guard let chat = rng.pick(visible(chats, to: d)) else { return }
            var picture: ObjectID? = nil
            if rng.chance(0.35) { picture = rng.pick(pictures.map(\.value.id)) }
            // Some carry a picture of their own, whose blob the chat's
            // state references while the message is live.
            let attachment = rng.chance(0.2) ? newBlob() : nil
            let e = try emit(
                w, .messageSent, chat,
                Payload.message(text: picture == nil || rng.chance(0.5) ? text() : nil, picture: picture, attachment: attachment), skew: skew)
            messages.append(Known(value: (e.id, chat, me, e.hlc), index: events.count - 1, author: e.author))
        case 20:
            guard let m = rng.pick(visible(messages, to: d).filter { $0.sender == me || rng.chance(0.2) }) else { return }
            if rng.chance(0.6) {
                try emit(w, .messageEdited, m.id, Payload.edit(chat: m.chat, text: text()), skew: skew)
            } else {
                try emit(w, .messageDeleted, m.id, Payload.delete(chat: m.chat), skew: skew)
            }
        case 21:
            if rng.chance(0.3) {
                // A chat key (Specs/projections.md §6.11): an epoch new or
                // already named, wrapped to a few devices in key order, some
                // of them not members'. The projections never open a wrap.
                guard let chat = rng.pick(visible(chats, to: d)) else { return }
                let epoch = rng.chance(0.5) ? (rng.pick(epochs[chat] ?? []) ?? rng.bytes32()) : rng.bytes32()
                epochs[chat, default: []].append(epoch)
                let devices = Set((0..<rng.int(1...3)).compactMap { _ in rng.pick(allDevices)?.writer.publicKey }).sorted()
                let wraps = devices.flatMap { $0.bytes + rng.bytes(PayloadLimits.wrapBytes - 32) }
                try emit(
                    w, .chatKey, chat, [("epoch", .bytes(epoch.bytes)), ("wraps", .bytes(wraps)), ("ephemeral", .bytes(rng.bytes(32)))],
                    skew: skew)
                return
            }
            guard let m = rng.pick(visible(messages, to: d)) else { return }
            try emit(w, .chatRead, m.chat, Payload.read(message: m.id, hlc: m.hlc), skew: skew)
        case 22, 23:
            // Spend; sometimes from another user's account (wrong_account).
            let account = rng.chance(0.95) ? myName : users[rng.pick(others) ?? me].name
            try emit(w, .coinSpent, account, Payload.spend(UInt64(rng.int(1...40))), skew: skew)
        case 24:
            guard let r = rng.pick(others.isEmpty ? [me] : others) else { return }
            let device = rng.chance(0.6) ? rng.pick(users[r].devices)?.writer.publicKey : nil
            try emit(w, .coinGiven, users[r].name, Payload.give(UInt64(rng.int(1...30)), device: device), skew: skew)
        case 25:
            // Move rights to a sibling (or, rarely, to a stranger's device: not_sibling).
            let siblings = users[me].devices.filter { $0 !== d }.map(\.writer.publicKey)
            let to = rng.chance(0.9) ? rng.pick(siblings) : rng.pick(allDevices)?.writer.publicKey
            guard let to else { return }
            try emit(w, .coinRightsMoved, to, Payload.move(UInt64(rng.int(1...30))), skew: skew)
        case 26:
            let slot = rng.int(0...config.slotCount)
            var price = slot < config.slotCount ? config.slotPrices[slot] : 5
            if rng.chance(0.1) { price += 1 }
            try emit(w, .slotUnlocked, myName, Payload.unlock(slot: slot, price: price), skew: skew)
        default:
            let slot = rng.int(0...config.slotCount - 1)
            let picture = rng.chance(0.8) ? rng.pick(visible(pictures, to: d).filter { $0.owner == me || rng.chance(0.2) })?.id : nil
            try emit(w, .slotSet, myName, Payload.slotSet(slot, picture: picture), skew: skew)
        }
    }

    /// A picture this device knows of: mostly its user's own.
    func pickPicture(_ d: Device) -> (id: ObjectID, owner: Int)? {
        let known = visible(pictures, to: d)
        return rng.pick(known.filter { $0.owner == d.user || rng.chance(0.15) })
    }
}

extension World {
    /// The blob a picture.created event names: from its payload, or (when
    /// this replica purged it) from the replica's blob source by the
    /// original event.
    static func blobHash(of e: Event, in r: Replica) -> Hash32? {
        if let hash = e.payload?[text: "blob"]?.bytesValue.flatMap({ Bytes32($0) }) { return hash }
        return r.originals[e.id]?.payload?[text: "blob"]?.bytesValue.flatMap { Bytes32($0) }
    }
}
