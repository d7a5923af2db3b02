import ChorusBlobs
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
@testable import ChorusProjections
import ChorusStorage
import ChorusStore
import ChorusTestSupport
import Foundation
import Testing

/// Specs/vectors/projections.json: event sets in, the exact projected state
/// out (Specs/projections.md §5 entries and §8 digest). The suite folds every
/// vector's events in the given order and reversed (per feed, the log needs
/// sequence order) and checks the state byte for byte. Regenerate with
/// CHORUS_WRITE_VECTORS=1 after a deliberate rule change.
@Suite("Projection vectors")
struct VectorTests {
    static let path = specVector("projections.json").path

    @Test func vectorsFoldToTheirExpectedState() throws {
        let scenarios = VectorScenarios.all()
        if ProcessInfo.processInfo.environment["CHORUS_WRITE_VECTORS"] == "1" {
            var out: [[String: Any]] = []
            for s in scenarios {
                let state = try VectorReplica.fold(s.events, config: s.config)
                out.append([
                    "name": s.name, "description": s.description,
                    "network": ["issuers": s.config.issuers.map(\.hex), "slot_prices": s.config.slotPrices],
                    "events": s.events.map { Hex.encode($0.encoded()) },
                    "expected": [
                        "digest": state.digest.hex,
                        "state": state.entries.map { ["key": Hex.encode($0.key), "value": Hex.encode($0.value)] },
                        "no_effect": state.noEffects.map { ["event": $0.event.hex, "code": $0.reason.code] },
                    ] as [String: Any],
                ])
            }
            let data = try JSONSerialization.data(
                withJSONObject: ["format": 1, "description": "Chorus projection vectors: see Specs/projections.md", "vectors": out],
                options: [.prettyPrinted, .sortedKeys])
            try data.write(to: URL(fileURLWithPath: Self.path))
        }
        let data = try #require(FileManager.default.contents(atPath: Self.path), "missing \(Self.path)")
        let root = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let vectors = try #require(root["vectors"] as? [[String: Any]])
        #expect(vectors.count == scenarios.count)
        for v in vectors {
            let name = v["name"] as? String ?? "?"
            let net = try #require(v["network"] as? [String: Any])
            let config = NetworkConfig(
                issuers: (net["issuers"] as? [String] ?? []).compactMap { Bytes32(hex: $0) },
                slotPrices: (net["slot_prices"] as? [Int] ?? []).map(UInt64.init))
            let events = try (v["events"] as? [String] ?? []).map { try Event.decode(try #require(Hex.decode($0))) }
            let expected = try #require(v["expected"] as? [String: Any])
            let expectedState = (expected["state"] as? [[String: String]] ?? []).map { ($0["key"] ?? "", $0["value"] ?? "") }
            for order in [events, VectorReplica.reversedKeepingFeeds(events)] {
                let state = try VectorReplica.fold(order, config: config)
                #expect(state.digest.hex == expected["digest"] as? String, "vector \(name): digest")
                #expect(state.digestInOneRead == state.digest, "vector \(name): digest in one read")
                #expect(state.digestInParts == state.digest, "vector \(name): digest in key ranges")
                let got = state.entries.map { (Hex.encode($0.key), Hex.encode($0.value)) }
                #expect(got.map(\.0) == expectedState.map(\.0), "vector \(name): state keys")
                #expect(got.map(\.1) == expectedState.map(\.1), "vector \(name): state values")
            }
        }
    }
}

/// Folds events into a fresh store without a node (no keys, no own events).
enum VectorReplica {
    struct Result {
        let digest: Hash32
        /// The digest read in one transaction on one thread
        /// (`digest(in:)`), which `digest()` takes of so small a state.
        let digestInOneRead: Hash32
        /// The digest taken in batches on two threads, as `digest()` takes
        /// it of a large state: batches of two entries, so every vector's
        /// state is several.
        let digestInParts: Hash32
        let entries: [(key: [UInt8], value: [UInt8])]
        let noEffects: [NoEffectRecord]
    }

    static func fold(_ events: [Event], config: NetworkConfig) throws -> Result {
        let dir = NSTemporaryDirectory() + "chorus-vector-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let env = try Environment(path: dir, initialMapSize: 16 << 20)
        let store = try Store(env: env, config: config)
        let projections = store.projections
        for e in events {
            try store.commit(nowMillis: .max / 2, driftMillis: 0) { commit in
                if case .refused(let why) = try commit.append(e) { throw why }
            }
        }
        let entries = try env.read { try projections.stateEntries(in: $0) }
        return Result(
            digest: try projections.digest(), digestInOneRead: try env.read { try projections.digest(in: $0) },
            digestInParts: try env.readSnapshot(count: 3) { try projections.digestInParts($0, batch: 2) }, entries: entries,
            noEffects: try projections.noEffects())
    }

    /// The reverse delivery order that the log accepts: feeds in reverse
    /// order of first appearance, each feed in sequence order.
    static func reversedKeepingFeeds(_ events: [Event]) -> [Event] {
        var feeds: [PublicKey] = []
        var byFeed: [PublicKey: [Event]] = [:]
        for e in events {
            if byFeed[e.author] == nil { feeds.append(e.author) }
            byFeed[e.author, default: []].append(e)
        }
        return feeds.reversed().flatMap { byFeed[$0] ?? [] }
    }
}

/// A deterministic signer: fixed seed, explicit HLCs.
struct VectorFeed {
    let key: SigningKey
    var head: (seq: UInt64, id: EventID)? = nil

    init(_ seedByte: UInt8) {
        // A fixed 32-byte seed is always a valid Ed25519 seed.
        key = SigningKey(seed: [UInt8](repeating: seedByte, count: 32)) ?? SigningKey.generate()
    }

    var pk: PublicKey { key.publicKey }

    mutating func sign(_ kind: EventKind, _ object: Bytes32, at millis: UInt64, _ payload: [(String, CBORValue)] = [])
        throws -> Event
    {
        let e = try Event.sign(
            with: key, seq: (head?.seq ?? 0) + 1, prev: head?.id, hlc: HLC(physicalMillis: millis, logical: 0), kind: kind,
            object: object, payload: .textMap(payload))
        head = (e.seq, e.id)
        return e
    }
}

struct VectorScenario {
    let name: String
    let description: String
    let config: NetworkConfig
    let events: [Event]
}

enum VectorScenarios {
    static let t0: UInt64 = 1_800_000_000_000

    static func id(_ n: UInt8) -> Bytes32 { Bytes32([UInt8](repeating: n, count: 32)) ?? .zero }

    /// The id `feed` creates with the nonce of 16 bytes `n`.
    static func created(by feed: VectorFeed, _ n: UInt8) -> ObjectID {
        CreatedID.make(author: feed.pk, nonce: [UInt8](repeating: n, count: 16))
    }
    static func bytes(_ k: Bytes32) -> CBORValue { .bytes(k.bytes) }

    static func all() -> [VectorScenario] {
        // Events are built from fixed seeds and timestamps, so signing cannot fail.
        do {
            return [try identityAndProfiles(), try pictures(), try relationships(), try chats(), try coins(), try relayLists()]
        } catch {
            preconditionFailure("vector scenario failed to build: \(error)")
        }
    }

    /// A user binds a device (with consent), a second binding without
    /// consent, profile LWW, a non-owner edit, a removed device's late edit.
    static func identityAndProfiles() throws -> VectorScenario {
        var user = VectorFeed(1), phone = VectorFeed(2), laptop = VectorFeed(3), mallory = VectorFeed(4)
        var ev: [Event] = []
        ev.append(try user.sign(.deviceAdded, phone.pk, at: t0, [("name", .text("phone")), ("proof", .bytes(DeviceBinding.proof(device: phone.key, user: user.pk)))]))
        ev.append(try user.sign(.deviceAdded, laptop.pk, at: t0 + 1, [("name", .text("laptop"))]))
        ev.append(try phone.sign(.profileSet, user.pk, at: t0 + 10, [("field", .text("name")), ("value", .text("Ana"))]))
        ev.append(try phone.sign(.profileSet, user.pk, at: t0 + 20, [("field", .text("city")), ("value", .text("Porto"))]))
        ev.append(try laptop.sign(.profileSet, user.pk, at: t0 + 15, [("field", .text("name")), ("value", .text("not bound"))]))
        ev.append(try mallory.sign(.profileSet, user.pk, at: t0 + 30, [("field", .text("name")), ("value", .text("Mallory"))]))
        ev.append(try user.sign(.deviceRemoved, phone.pk, at: t0 + 40, [("reason", .text("lost"))]))
        ev.append(try phone.sign(.profileSet, user.pk, at: t0 + 50, [("field", .text("bio")), ("value", .text("after removal"))]))
        return VectorScenario(
            name: "identity-and-profiles",
            description: "device bound with consent; a binding without proof does not bind; LWW profile fields; non-owner edit and an edit after device removal take no effect",
            config: NetworkConfig(), events: ev)
    }

    /// Relay lists (Specs/projections.md §6.12): a device's list, a later
    /// one signed by the user key, a stranger's, a removed device's.
    static func relayLists() throws -> VectorScenario {
        var user = VectorFeed(51), phone = VectorFeed(52), mallory = VectorFeed(53)
        func list(_ relays: [(Bytes32, String, UInt8)]) -> [(String, CBORValue)] {
            [
                ("keys", .array(relays.map { bytes($0.0) })), ("addresses", .array(relays.map { .text($0.1) })),
                ("roles", .bytes(relays.map(\.2))),
            ]
        }
        var ev: [Event] = []
        ev.append(try user.sign(.deviceAdded, phone.pk, at: t0, [("proof", .bytes(DeviceBinding.proof(device: phone.key, user: user.pk)))]))
        ev.append(try phone.sign(.relaysSet, user.pk, at: t0 + 10, list([(id(0xC1), "relay1.example.org:7800", 3)])))
        ev.append(try user.sign(.relaysSet, user.pk, at: t0 + 20, list([(id(0xC2), "[2001:db8::7]:7801", 1), (id(0xC1), "relay1.example.org:7800", 2)])))
        ev.append(try mallory.sign(.relaysSet, user.pk, at: t0 + 30, list([(id(0xC3), "evil.example:7800", 3)])))
        ev.append(try user.sign(.deviceRemoved, phone.pk, at: t0 + 40))
        ev.append(try phone.sign(.relaysSet, user.pk, at: t0 + 50, list([])))
        return VectorScenario(
            name: "relay-lists",
            description: "a user's relay list: the latest effective relays.set by the user key or a bound device wins; a stranger's list and a removed device's take no effect",
            config: NetworkConfig(), events: ev)
    }

    /// Pictures: gallery move, a caption concurrent with deletion, avatar
    /// and chat reference to the deleted picture, purge.
    static func pictures() throws -> VectorScenario {
        var user = VectorFeed(11), a = VectorFeed(12), b = VectorFeed(13)
        var ev: [Event] = []
        ev.append(try user.sign(.deviceAdded, a.pk, at: t0, [("proof", .bytes(DeviceBinding.proof(device: a.key, user: user.pk)))]))
        ev.append(try user.sign(.deviceAdded, b.pk, at: t0 + 1, [("proof", .bytes(DeviceBinding.proof(device: b.key, user: user.pk)))]))
        // Ids bound to the creating device (Specs/events.md §6.4).
        let p1 = created(by: a, 0xA1), p2 = created(by: a, 0xA2), p3 = created(by: a, 0xA3)
        for (i, p) in [p1, p2, p3].enumerated() {
            ev.append(try a.sign(.pictureCreated, p, at: t0 + 10 + UInt64(i), [
                ("blob", bytes(id(0xB0 + UInt8(i)))), ("size", .unsigned(1000)), ("mime", .text("image/jpeg")), ("caption", .text("picture \(i + 1)")),
            ]))
        }
        ev.append(try a.sign(.pictureMoved, p3, at: t0 + 20, [("position", .bytes([0]))]))
        ev.append(try a.sign(.profileSet, user.pk, at: t0 + 21, [("field", .text("avatar")), ("value", bytes(p2))]))
        ev.append(try b.sign(.pictureCaptioned, p2, at: t0 + 31, [("caption", .text("concurrent caption"))]))
        ev.append(try a.sign(.pictureDeleted, p2, at: t0 + 30))
        // A stranger's creation of p1 stamped before a's: `foreign_id`, a's stays.
        var stranger = VectorFeed(14)
        ev.append(try stranger.sign(.pictureCreated, p1, at: t0 + 5, [
            ("blob", bytes(id(0xBF))), ("size", .unsigned(1)), ("mime", .text("image/jpeg")),
        ]))
        return VectorScenario(
            name: "pictures",
            description: "gallery order with a move to the front; a caption merged after a concurrent deletion takes no effect; the deleted picture leaves the gallery and is purged; a stranger's earlier creation of a picture's id takes no effect",
            config: NetworkConfig(), events: ev)
    }

    /// Follow concurrent with an unfollow that did not see it; likes; a block.
    static func relationships() throws -> VectorScenario {
        var u1 = VectorFeed(21), u2 = VectorFeed(22), u3 = VectorFeed(23)
        var ev: [Event] = []
        let f1 = try u1.sign(.followAdded, u2.pk, at: t0)
        ev.append(f1)
        ev.append(try u1.sign(.followAdded, u2.pk, at: t0 + 10))  // concurrent re-follow (not seen by the removal)
        ev.append(try u1.sign(.followRemoved, u2.pk, at: t0 + 20, [("seen", .array([bytes(f1.id)]))]))
        ev.append(try u3.sign(.followAdded, u2.pk, at: t0 + 5))
        let like = try u3.sign(.likeAdded, id(0xC1), at: t0 + 6)
        ev.append(like)
        ev.append(try u3.sign(.likeRemoved, id(0xC1), at: t0 + 7, [("seen", .array([bytes(like.id)]))]))
        ev.append(try u2.sign(.blockAdded, u3.pk, at: t0 + 8))
        ev.append(try u2.sign(.followAdded, u2.pk, at: t0 + 9))
        let block = try u1.sign(.blockAdded, u3.pk, at: t0 + 24)
        ev.append(block)
        ev.append(try u1.sign(.blockRemoved, u3.pk, at: t0 + 25, [("seen", .array([bytes(block.id)]))]))
        return VectorScenario(
            name: "relationships",
            description: "add-wins: an add the removal did not name survives; a like removed; a block, and a block removed; following oneself takes no effect",
            config: NetworkConfig(), events: ev)
    }

    /// Membership over time decides which messages count.
    static func chats() throws -> VectorScenario {
        var admin = VectorFeed(31), member = VectorFeed(32), outsider = VectorFeed(33)
        let chat = created(by: admin, 0xD1)
        var ev: [Event] = []
        ev.append(try admin.sign(.chatCreated, chat, at: t0, [("title", .bytes(fakeSealed("trip")))]))
        // The outsider's creation of the same id, stamped earlier: `foreign_id`.
        ev.append(try outsider.sign(.chatCreated, chat, at: t0 - 10))
        ev.append(try member.sign(.messageSent, chat, at: t0 + 5, [("body", .bytes(fakeSealed("before joining")))]))
        ev.append(try admin.sign(.chatMemberAdded, chat, at: t0 + 10, [("user", bytes(member.pk))]))
        let hi = try member.sign(.messageSent, chat, at: t0 + 20, [("body", .bytes(fakeSealed("hello")))])
        ev.append(hi)
        ev.append(try member.sign(.messageEdited, hi.id, at: t0 + 21, [("chat", bytes(chat)), ("body", .bytes(fakeSealed("hello!")))]))
        ev.append(try outsider.sign(.messageSent, chat, at: t0 + 22, [("body", .bytes(fakeSealed("spam")))]))
        ev.append(try admin.sign(.chatRead, chat, at: t0 + 23, [("message", bytes(hi.id)), ("hlc", .unsigned(hi.hlc.rawValue))]))
        ev.append(try admin.sign(.chatMemberRemoved, chat, at: t0 + 30, [("user", bytes(member.pk))]))
        ev.append(try member.sign(.messageSent, chat, at: t0 + 40, [("body", .bytes(fakeSealed("after removal")))]))
        let bye = try admin.sign(.messageSent, chat, at: t0 + 50, [("body", .bytes(fakeSealed("deleted soon")))])
        ev.append(bye)
        ev.append(try admin.sign(.messageDeleted, bye.id, at: t0 + 51, [("chat", bytes(chat))]))
        return VectorScenario(
            name: "chats",
            description: "a message counts only if its sender was a member at its HLC; an edit; a read marker; a deleted message is purged",
            config: NetworkConfig(), events: ev)
    }

    /// The escrow counter: duplicate and re-signed receipts, a non-issuer,
    /// two devices spending while partitioned, a gift, a slot unlock.
    static func coins() throws -> VectorScenario {
        var issuer = VectorFeed(41), fake = VectorFeed(42), user = VectorFeed(43), d1 = VectorFeed(44), d2 = VectorFeed(45)
        var friend = VectorFeed(46), fd = VectorFeed(47)
        var ev: [Event] = []
        ev.append(try user.sign(.deviceAdded, d1.pk, at: t0, [("proof", .bytes(DeviceBinding.proof(device: d1.key, user: user.pk)))]))
        ev.append(try user.sign(.deviceAdded, d2.pk, at: t0 + 1, [("proof", .bytes(DeviceBinding.proof(device: d2.key, user: user.pk)))]))
        ev.append(try friend.sign(.deviceAdded, fd.pk, at: t0 + 2, [("proof", .bytes(DeviceBinding.proof(device: fd.key, user: friend.pk)))]))
        let credit: [(String, CBORValue)] = [("user", bytes(user.pk)), ("amount", .unsigned(100)), ("receipt", .text("store-tx-1"))]
        ev.append(try issuer.sign(.coinCredited, d1.pk, at: t0 + 10, credit))
        ev.append(try issuer.sign(.coinCredited, d1.pk, at: t0 + 11, credit))  // re-signed redelivery
        ev.append(try fake.sign(.coinCredited, d1.pk, at: t0 + 12, [("user", bytes(user.pk)), ("amount", .unsigned(1000)), ("receipt", .text("forged"))]))
        ev.append(try d1.sign(.coinRightsMoved, d2.pk, at: t0 + 20, [("amount", .unsigned(30))]))
        // Partitioned: both devices spend what they hold, and d2 tries more.
        ev.append(try d1.sign(.coinSpent, user.pk, at: t0 + 30, [("amount", .unsigned(70)), ("for", .text("sticker pack"))]))
        ev.append(try d2.sign(.coinSpent, user.pk, at: t0 + 30, [("amount", .unsigned(50)), ("for", .text("too much"))]))
        ev.append(try d2.sign(.coinGiven, friend.pk, at: t0 + 31, [("amount", .unsigned(20))]))
        ev.append(try issuer.sign(.coinCredited, fd.pk, at: t0 + 32, [("user", bytes(friend.pk)), ("amount", .unsigned(100)), ("receipt", .text("store-tx-2"))]))
        ev.append(try fd.sign(.slotUnlocked, friend.pk, at: t0 + 40, [("slot", .unsigned(1)), ("price", .unsigned(50))]))
        ev.append(try fd.sign(.slotUnlocked, friend.pk, at: t0 + 41, [("slot", .unsigned(1)), ("price", .unsigned(50))]))
        ev.append(try fd.sign(.slotSet, friend.pk, at: t0 + 42, [("slot", .unsigned(1)), ("picture", bytes(id(0xF1)))]))
        return VectorScenario(
            name: "coins",
            description: "a receipt delivered twice counts once; a non-issuer credit, a spend beyond rights and a second unlock take no effect; rights moved between sibling devices; a gift; a slot unlock",
            config: NetworkConfig(issuers: [issuer.pk], slotPrices: [0, 50, 100]), events: ev)
    }
}
