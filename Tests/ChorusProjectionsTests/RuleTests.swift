import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusProjections
import ChorusTestSupport
import Foundation
import Testing

/// A hand-built network for targeted rule tests: explicit HLCs make events
/// concurrent or ordered exactly as a test needs.
final class Scenario {
    var rng = SplitMix64(seed: 0x7E57)
    let issuer: FeedWriter
    let issuer2: FeedWriter
    /// A third issuer, whose feed starts wherever a test needs a credit stamped early.
    let issuer3: FeedWriter
    let stranger: FeedWriter
    let config: NetworkConfig
    var blobs: [Hash32: [UInt8]] = [:]

    init() {
        issuer = FeedWriter(rng.key())
        issuer2 = FeedWriter(rng.key())
        stranger = FeedWriter(rng.key())
        issuer3 = FeedWriter(rng.key())
        config = NetworkConfig(issuers: [issuer.publicKey, issuer2.publicKey, issuer3.publicKey], slotPrices: [0, 20, 40])
    }

    /// The HLC `t` milliseconds into the scenario.
    static func at(_ t: UInt64) -> HLC { HLC(physicalMillis: 1_700_000_000_000 + t, logical: 0) }

    struct Person {
        let user: FeedWriter
        let devices: [FeedWriter]
        let bindings: [Event]
        var key: PublicKey { user.publicKey }
        var d1: FeedWriter { devices[0] }
        var d2: FeedWriter { devices[1] }
    }

    /// A user with `devices` devices bound (at times 1, 2, ...).
    func person(devices: Int = 2) throws -> Person {
        let user = FeedWriter(rng.key())
        let ds = (0..<devices).map { _ in FeedWriter(rng.key()) }
        let bindings = try ds.enumerated().map { i, d in
            try user.sign(.deviceAdded, d.publicKey, Payload.deviceAdded(device: d.key, user: user.publicKey), hlc: Self.at(UInt64(i) + 1))
        }
        return Person(user: user, devices: ds, bindings: bindings)
    }

    func picture(_ by: FeedWriter, at t: UInt64, caption: String? = nil) throws -> (id: ObjectID, event: Event, blob: Hash32) {
        let id = by.createdID(rng.bytes(16))
        let bytes = [0x89, 0x50, 0x4E, 0x47] + rng.bytes(24)
        let hash = Blake2b.hash256(bytes)
        blobs[hash] = bytes
        let e = try by.sign(.pictureCreated, id, Payload.pictureCreated(blob: bytes, caption: caption), hlc: Self.at(t))
        return (id, e, hash)
    }

    /// The coins credits may add up to in this scenario's replicas (§6.9).
    var supplyLimit = Projections.defaultSupplyLimit

    func replica() throws -> Replica { try Replica(config: config, blobSource: blobs, label: "rule", supplyLimit: supplyLimit) }

    /// Alice creates a chat alone (at 10), adds Bob (at 20), and Bob sends a
    /// message (at 30), each with one device.
    func bobJoinsThenSends() throws -> (
        alice: Person, bob: Person, chat: ObjectID, create: Event, add: Event, message: Event
    ) {
        let alice = try person(devices: 1)
        let bob = try person(devices: 1)
        let chat = alice.d1.createdID(rng.bytes(16))
        let create = try alice.d1.sign(.chatCreated, chat, Payload.chatCreated(title: "t", members: []), hlc: Self.at(10))
        let add = try alice.d1.sign(.chatMemberAdded, chat, Payload.member(bob.key), hlc: Self.at(20))
        let message = try bob.d1.sign(.messageSent, chat, Payload.message(text: "hello"), hlc: Self.at(30))
        return (alice, bob, chat, create, add, message)
    }

    /// Alice (one device) posts a picture (at 10), captions it (at 11) and
    /// creates a chat of her own (at 12).
    func alicesCaptionedPictureAndChat() throws -> (
        alice: Person, pic: (id: ObjectID, event: Event, blob: Hash32), caption: Event, chat: ObjectID, create: Event
    ) {
        let alice = try person(devices: 1)
        let pic = try picture(alice.d1, at: 10, caption: "private")
        let caption = try alice.d1.sign(.pictureCaptioned, pic.id, Payload.caption("very private"), hlc: Self.at(11))
        let chat = alice.d1.createdID(rng.bytes(16))
        let create = try alice.d1.sign(.chatCreated, chat, Payload.chatCreated(members: []), hlc: Self.at(12))
        return (alice, pic, caption, chat, create)
    }

    /// Alice creates a chat (at 10) with Bob as a member, each with one device.
    func aliceCreatesAChatWithBob() throws -> (alice: Person, bob: Person, chat: ObjectID, create: Event) {
        let alice = try person(devices: 1)
        let bob = try person(devices: 1)
        let chat = alice.d1.createdID(rng.bytes(16))
        let create = try alice.d1.sign(.chatCreated, chat, Payload.chatCreated(members: [bob.key]), hlc: Self.at(10))
        return (alice, bob, chat, create)
    }

    /// Alice (two devices) follows Bob (one) from each device, at times 10 and 20.
    func aliceFollowsBobFromBothDevices() throws -> (alice: Person, bob: Person, follow1: Event, follow2: Event) {
        let alice = try person()
        let bob = try person(devices: 1)
        let follow1 = try alice.d1.sign(.followAdded, bob.key, hlc: Self.at(10))
        let follow2 = try alice.d2.sign(.followAdded, bob.key, hlc: Self.at(20))
        return (alice, bob, follow1, follow2)
    }

    /// Delivers `events` one by one to a fresh replica, checking the coin
    /// invariants after each delivery.
    func fold(_ events: [Event], users: [PublicKey] = []) throws -> Replica {
        let r = try replica()
        for e in events {
            try r.deliver([e])
            let problems = try coinInvariantViolations(r.projections, users: users)
            #expect(problems.isEmpty, "\(problems)")
        }
        return r
    }

    /// Folds `events` in every given order; all replicas must agree. Returns them.
    func foldInOrders(_ orders: [[Event]], users: [PublicKey] = []) throws -> [Replica] {
        let replicas = try orders.map { try fold($0, users: users) }
        let digests = try replicas.map { try $0.digest() }
        #expect(Set(digests).count == 1, "replicas disagree")
        return replicas
    }
}

@Suite("Projections: merge and authorization rules")
struct RuleTests {
    @Test("a stranger's creation of someone's picture or chat, stamped earlier, takes no effect (foreign_id): ids are bound to their creator")
    func anEarlierCreationByAStrangerDoesNotTakeAPictureOrChatOver() throws {
        let s = Scenario()
        let (alice, bob, chat, create, add, message) = try s.bobJoinsThenSends()
        let pic = try s.picture(alice.d1, at: 40, caption: "mine")
        let mallory = try s.person(devices: 1)
        // Stamped before Alice's creations, which the first-creation rule alone would let win.
        let takeChat = try mallory.d1.sign(.chatCreated, chat, Payload.chatCreated(members: []), hlc: Scenario.at(5))
        let takePicture = try mallory.d1.sign(
            .pictureCreated, pic.id, Payload.pictureCreated(blob: [0x89, 0x50, 0x4E, 0x47, 1], caption: "taken"), hlc: Scenario.at(6))
        let honest = alice.bindings + bob.bindings + [create, add, message, pic.event]
        let replicas = try s.foldInOrders([
            honest + mallory.bindings + [takeChat, takePicture],
            mallory.bindings + [takePicture, takeChat] + honest,
            [takeChat] + honest.reversed() + [takePicture] + mallory.bindings,
        ])
        for r in replicas {
            #expect(try r.projections.noEffect(takeChat.id)?.code == "foreign_id")
            #expect(try r.projections.noEffect(takePicture.id)?.code == "foreign_id")
            for honestEvent in [create, add, message, pic.event] { #expect(try r.projections.noEffect(honestEvent.id) == nil) }
            guard case .live(let live) = try r.projections.picture(PictureID(pic.id)) else {
                Issue.record("Alice's picture is gone")
                continue
            }
            #expect(live.owner.raw == alice.key && live.caption == "mine")
            #expect(try r.projections.membership(of: bob.key, in: chat)?.isCurrent == true)
            #expect(try r.projections.membership(of: mallory.key, in: chat) == nil)
        }
    }

    @Test("an id bound to no creation's key (made before ids were bound) keeps the first creation in merge order")
    func anUnboundIdKeepsTheFirstCreation() throws {
        let s = Scenario()
        let alice = try s.person(devices: 1)
        let bob = try s.person(devices: 1)
        let chat = s.rng.bytes32()
        let first = try bob.d1.sign(.chatCreated, chat, Payload.chatCreated(members: []), hlc: Scenario.at(5))
        let second = try alice.d1.sign(.chatCreated, chat, Payload.chatCreated(members: []), hlc: Scenario.at(10))
        let base = alice.bindings + bob.bindings
        for r in try s.foldInOrders([base + [first, second], base + [second, first], [second] + base + [first]]) {
            #expect(try r.projections.noEffect(first.id) == nil)
            #expect(try r.projections.noEffect(second.id)?.code == "chat_exists")
        }
    }

    @Test func captionConcurrentWithDeleteLosesInBothOrders() throws {
        let s = Scenario()
        let alice = try s.person()
        let pic = try s.picture(alice.d1, at: 10, caption: "first")
        // The deletion and the caption edit are concurrent: neither device saw
        // the other's event. One edit is stamped after the deletion, one before.
        let delete = try alice.d1.sign(.pictureDeleted, pic.id, [], hlc: Scenario.at(20))
        let lateCaption = try alice.d2.sign(.pictureCaptioned, pic.id, Payload.caption("late"), hlc: Scenario.at(21))
        let earlyCaption = try alice.d2.sign(.pictureCaptioned, pic.id, Payload.caption("early"), hlc: Scenario.at(22))
        _ = earlyCaption
        let base = alice.bindings + [pic.event]
        let replicas = try s.foldInOrders([
            base + [delete, lateCaption, earlyCaption],
            base + [lateCaption, earlyCaption, delete],
            [lateCaption, earlyCaption, delete] + base.reversed(),
        ])
        for r in replicas {
            guard case .deleted(_, let owner, _, let by) = try r.projections.picture(PictureID(pic.id)) else {
                Issue.record("the caption edit revived a deleted picture")
                continue
            }
            #expect(owner.raw == alice.key && by == delete.id)
            #expect(try r.projections.noEffect(lateCaption.id)?.code == "after_deletion")
            #expect(try r.projections.pictures(of: alice.key).isEmpty)
        }
    }

    @Test func followSurvivesConcurrentUnfollowThatDidNotSeeIt() throws {
        let s = Scenario()
        // d2 follows again, concurrently with d1's unfollow that saw only follow1.
        let (alice, bob, follow1, follow2) = try s.aliceFollowsBobFromBothDevices()
        let unfollow = try alice.d1.sign(.followRemoved, bob.key, Payload.seen([follow1.id]), hlc: Scenario.at(30))
        let base = alice.bindings + bob.bindings
        let replicas = try s.foldInOrders([
            base + [follow1, follow2, unfollow], base + [follow1, unfollow, follow2], [follow2, unfollow, follow1] + base,
        ])
        for r in replicas {
            #expect(try r.projections.followers(of: bob.key) == [alice.key])
            #expect(try r.projections.liveAdds(.followAdded, from: alice.key, to: bob.key) == [follow2.id])
        }
        // Without the concurrent follow, the unfollow removes the edge.
        let r = try s.fold(base + [follow1, unfollow])
        #expect(try r.projections.followers(of: bob.key).isEmpty)
    }

    /// An edge is stored as its live adds' arrival positions, 8 bytes each,
    /// and read (the query, the state of §5 and its digest) as their ids in
    /// id order (Specs/projections.md §9.1).
    @Test func anEdgeStoresItsAddsArrivalsAndReadsAsTheirIDs() throws {
        let s = Scenario()
        let (alice, bob, follow1, follow2) = try s.aliceFollowsBobFromBothDevices()
        let r = try s.fold(alice.bindings + bob.bindings + [follow2, follow1])
        let ids = [follow1.id, follow2.id].sorted()
        #expect(try r.projections.liveAdds(.followAdded, from: alice.key, to: bob.key) == ids)
        let env = r.projections.log.env
        let state = try env.openDatabase("state")
        // Stored under 0xFC, after every other table but `edgeOut` and
        // messages; 0x40 in the state of Specs/projections.md §5 (§9.1).
        let storedKey: [UInt8] = [0xFC, 4] + bob.key.bytes + alice.key.bytes  // class 4: follow
        let edgeKey: [UInt8] = [0x40, 4] + bob.key.bytes + alice.key.bytes
        // `edgeOut` under 0xFD; 0x41 in §5.
        let outKey: [UInt8] = [0x41, 4] + alice.key.bytes + bob.key.bytes
        try env.read { txn in
            let arrivals = try [follow1.id, follow2.id].compactMap { try r.projections.log.readArrival(of: $0, in: txn) }.sorted()
            #expect(try txn.get(state, storedKey) == arrivals.flatMap(bigEndian))
            #expect(try txn.get(state, edgeKey) == nil)
            let logical = try r.projections.stateEntries(in: txn).first { $0.key == edgeKey }
            #expect(logical?.value == ids.flatMap(\.bytes))
            #expect(try txn.get(state, [0xFD] + outKey.dropFirst()) == [])
            #expect(try txn.get(state, outKey) == nil)
            #expect(try r.projections.stateEntries(in: txn).contains { $0.key == outKey && $0.value.isEmpty })
            // Diffs name §5's keys, and listings may name stored ones.
            #expect(Projections.describe(key: edgeKey).hasPrefix("follow of "))
            #expect(Projections.describe(key: storedKey).hasPrefix("follow of "))
            #expect(Projections.describe(key: outKey).hasPrefix("follow by "))
        }
        let other = try s.fold([follow1, follow2] + bob.bindings + alice.bindings)
        #expect(try other.digest() == r.digest())
    }

    /// A removal cancels only adds of its own class on its own target: the
    /// ids it names are looked up in the log (Specs/projections.md §9.1),
    /// where an id may name any event.
    @Test func aRemovalMatchesOnlyAddsOfItsClassAndTarget() throws {
        let s = Scenario()
        let alice = try s.person(devices: 1)
        let bob = try s.person(devices: 1)
        let carol = try s.person(devices: 1)
        let picture = try s.picture(bob.d1, at: 5)
        let follow = try alice.d1.sign(.followAdded, bob.key, hlc: Scenario.at(10))
        let like = try alice.d1.sign(.likeAdded, picture.id, hlc: Scenario.at(11))
        // An unlike of the picture naming the follow, an unfollow of Carol
        // naming the follow, an unfollow of Bob naming the like.
        let unlikeNamingFollow = try alice.d1.sign(.likeRemoved, picture.id, Payload.seen([follow.id]), hlc: Scenario.at(20))
        let unfollowOther = try alice.d1.sign(.followRemoved, carol.key, Payload.seen([follow.id]), hlc: Scenario.at(21))
        let unfollowNamingLike = try alice.d1.sign(.followRemoved, bob.key, Payload.seen([like.id]), hlc: Scenario.at(22))
        let base = alice.bindings + bob.bindings + carol.bindings + [picture.event]
        let removals = [unlikeNamingFollow, unfollowOther, unfollowNamingLike]
        // The adds before the removals (each removal looks its names up) and after (each add finds the removals naming it).
        let replicas = try s.foldInOrders([base + [follow, like] + removals, base + removals + [follow, like]])
        for r in replicas {
            #expect(try r.projections.followers(of: bob.key) == [alice.key])
            #expect(try r.projections.liveAdds(.likeAdded, from: alice.key, to: picture.id) == [like.id])
            for removal in removals { #expect(try r.projections.noEffect(removal.id)?.code == "nothing_to_remove") }
        }
        let unfollow = try alice.d1.sign(.followRemoved, bob.key, Payload.seen([follow.id]), hlc: Scenario.at(30))
        let r = try s.fold(base + [follow, like] + removals + [unfollow])
        #expect(try r.projections.followers(of: bob.key).isEmpty)
        #expect(try r.projections.noEffect(unfollow.id) == nil)
    }

    @Test func messageFromMemberRemovedBeforeSendingTakesNoEffect() throws {
        let s = Scenario()
        let (alice, bob, chat, create) = try s.aliceCreatesAChatWithBob()
        let before = try bob.d1.sign(.messageSent, chat, Payload.message(text: "still here"), hlc: Scenario.at(15))
        let remove = try alice.d1.sign(.chatMemberRemoved, chat, Payload.member(bob.key), hlc: Scenario.at(20))
        let after = try bob.d1.sign(.messageSent, chat, Payload.message(text: "am I?"), hlc: Scenario.at(25))
        let base = alice.bindings + bob.bindings
        let replicas = try s.foldInOrders([
            base + [create, before, remove, after], base + [before, after, create, remove], [before, after] + base + [remove, create],
        ])
        for r in replicas {
            #expect(try r.projections.chat(chat).messages.map(\.id.raw) == [before.id])
            #expect(try r.projections.noEffect(after.id)?.code == "not_member")
            #expect(try r.projections.chat(chat).chat.members.map(\.user.raw) == [alice.key])
        }
    }

    @Test func messageArrivingBeforeItsMembershipTakesEffectWhenItArrives() throws {
        let s = Scenario()
        let (alice, bob, chat, create, add, message) = try s.bobJoinsThenSends()
        let r = try s.replica()
        try r.deliver(bob.bindings + [message])
        #expect(try r.projections.noEffect(message.id)?.code == "not_member")
        try r.deliver(alice.bindings + [create])
        #expect(try r.projections.chat(chat).messages.isEmpty)
        #expect(try r.projections.noEffect(message.id)?.code == "not_member")
        try r.deliver([add])
        #expect(try r.projections.chat(chat).messages.map(\.id.raw) == [message.id])
        #expect(try r.projections.noEffect(message.id) == nil)
        #expect(try r.projections.chats(of: bob.key).map(\.id.raw) == [chat])
        let inOrder = try s.fold(alice.bindings + bob.bindings + [create, add, message])
        #expect(try inOrder.digest() == r.digest())
    }

    /// A message's sender is its device's user, read from the binding: the
    /// stored entry holds the device only (Specs/projections.md §9.1). The
    /// chat page, the message query and the digest agree whether the
    /// binding arrived before the message or after it.
    @Test func aMessagesSenderIsTheUserItsDeviceIsBoundTo() throws {
        let s = Scenario()
        let (alice, bob, chat, create, add, message) = try s.bobJoinsThenSends()
        let bindingsFirst = try s.fold(alice.bindings + bob.bindings + [create, add, message])
        let bindingLast = try s.fold(alice.bindings + [create, add, message] + bob.bindings)
        for r in [bindingsFirst, bindingLast] {
            let page = try r.projections.chat(chat).messages
            #expect(page.map(\.id.raw) == [message.id])
            #expect(page.first?.sender.raw == bob.key)
            #expect(page.first?.device.raw == bob.d1.publicKey)
            let single = try r.projections.message(message.id)
            #expect(single?.sender.raw == bob.key && single?.device.raw == bob.d1.publicKey)
            let env = r.projections.log.env
            let state = try env.openDatabase("state")
            // Stored under 0xFE, after every other table (Specs/projections.md §9.1).
            let stored = try env.read { txn in try txn.get(state, [0xFE] + chat.bytes + bigEndian(message.hlc.rawValue) + message.id.bytes) }
            #expect(stored?.count == 41)
            #expect(stored.map { !$0.contains(bob.key.bytes) } == true)
        }
        #expect(try bindingsFirst.digest() == bindingLast.digest())
    }

    /// A withdrawn send's no-effect record lives in its message entry, not
    /// under its own key, and other records under the event's arrival
    /// position (Specs/projections.md §9.1); both are read, listed and
    /// digested as the records of §5, keyed by event id; the send's goes
    /// with its entry.
    @Test func aWithdrawnSendsReasonIsKeptInItsEntry() throws {
        let s = Scenario()
        let (alice, bob, _, create, add, message) = try s.bobJoinsThenSends()
        let edit = try bob.d1.sign(.profileSet, alice.key, Payload.profile(.name, .text("Mallory")), hlc: Scenario.at(31))
        let r = try s.replica()
        try r.deliver(alice.bindings + bob.bindings + [create, message, edit])
        let env = r.projections.log.env
        let state = try env.openDatabase("state")
        // Stored records are keyed by the event's arrival position (§9.1), never by its id.
        func stored(_ id: EventID) throws -> [UInt8]? {
            try env.read { txn in
                guard let arrival = try r.projections.log.readArrival(of: id, in: txn) else { return nil }
                #expect(try txn.get(state, [0x7F] + id.bytes) == nil)
                return try txn.get(state, [0x7F] + bigEndian(arrival))
            }
        }
        #expect(try stored(message.id) == nil)
        #expect(try stored(edit.id) != nil)
        #expect(try r.projections.noEffect(message.id)?.code == "not_member")
        #expect(try r.projections.noEffect(of: message)?.code == "not_member")
        #expect(try r.projections.noEffect(of: edit)?.code == "not_owner")
        let listed = try r.projections.noEffects()
        #expect(listed.map(\.event) == [message.id, edit.id].sorted())
        #expect(Set(listed.map(\.reason.code)) == ["not_member", "not_owner"])
        #expect(try r.projections.noEffects(limit: 1).map(\.event) == [min(message.id, edit.id)])
        // The logical state holds the send's record under its own key, in key order.
        let logical = try env.read { txn in try r.projections.stateEntries(in: txn) }
        let records = logical.filter { $0.key.first == 0x7F }.map(\.key)
        #expect(records == [[0x7F] + min(message.id, edit.id).bytes, [0x7F] + max(message.id, edit.id).bytes])
        try r.deliver([add])
        #expect(try r.projections.noEffect(message.id) == nil)
        #expect(try r.projections.noEffect(of: message) == nil)
        #expect(try r.projections.noEffects().map(\.event) == [edit.id])
        // Folded in another order, the same digest.
        let other = try s.fold([message, edit] + bob.bindings + [add, create] + alice.bindings)
        #expect(try other.digest() == r.digest())
    }

    @Test("a send that takes no effect keeps a withdrawn entry: listed among the chat's sends, never in its pages, count or digest")
    func withdrawnSendsStayOutOfPagesAndCounts() throws {
        let s = Scenario()
        let alice = try s.person(devices: 1)
        let bob = try s.person(devices: 1)
        let chat = alice.d1.createdID(s.rng.bytes(16))
        let create = try alice.d1.sign(.chatCreated, chat, Payload.chatCreated(title: "t", members: []), hlc: Scenario.at(10))
        let first = try alice.d1.sign(.messageSent, chat, Payload.message(text: "one"), hlc: Scenario.at(20))
        // Bob is never a member: his sends take no effect. Two come before
        // Alice's first message, one between her two.
        let outsider = try [12, 14, 30].map { at in
            try bob.d1.sign(.messageSent, chat, Payload.message(text: "x\(at)"), hlc: Scenario.at(UInt64(at)))
        }
        let second = try alice.d1.sign(.messageSent, chat, Payload.message(text: "two"), hlc: Scenario.at(40))
        let all = alice.bindings + bob.bindings + [create, first] + outsider + [second]
        for r in try s.foldInOrders([all, all.reversed()], users: [alice.key, bob.key]) {
            #expect(try r.projections.chat(chat).messages.map(\.id.raw) == [first.id, second.id])
            #expect(try r.projections.chats(of: alice.key).first?.messageCount == 2)
            for m in outsider {
                #expect(try r.projections.noEffect(m.id)?.code == "not_member")
                #expect(try r.projections.message(m.id) == nil)
            }
            #expect(try r.projections.messageIDs(inChat: chat).count == 5)
            // A page of one: withdrawn sends neither fill it nor leave a
            // cursor to an empty page.
            let newest = try r.projections.chat(chat, limit: 1)
            #expect(newest.messages.map(\.id.raw) == [second.id])
            let cursor: MessageCursor = try #require(newest.older)
            // The text form round-trips, as the API and the CLI carry it.
            #expect(MessageCursor(cursor.description) == cursor && cursor.description.count == 80)
            #expect(MessageCursor("zz") == nil)
            let older = try r.projections.chat(chat, limit: 1, before: cursor)
            #expect(older.messages.map(\.id.raw) == [first.id])
            #expect(older.older == nil)
        }
    }

    @Test func twoDevicesSpendingTheSameCoinsWhilePartitioned() throws {
        let s = Scenario()
        let alice = try s.person()
        let credit = try s.issuer.sign(.coinCredited, alice.d1.publicKey, Payload.credit(user: alice.key, amount: 100, receipt: "tx-1"), hlc: Scenario.at(10))
        let move = try alice.d1.sign(.coinRightsMoved, alice.d2.publicKey, Payload.move(50), hlc: Scenario.at(20))
        // Partitioned: each device spends 70 of the user's 100 coins, then 30.
        let a1 = try alice.d1.sign(.coinSpent, alice.key, Payload.spend(70), hlc: Scenario.at(30))
        let b1 = try alice.d2.sign(.coinSpent, alice.key, Payload.spend(70), hlc: Scenario.at(31))
        let a2 = try alice.d1.sign(.coinSpent, alice.key, Payload.spend(30), hlc: Scenario.at(40))
        let b2 = try alice.d2.sign(.coinSpent, alice.key, Payload.spend(30), hlc: Scenario.at(41))
        let base = alice.bindings + [credit, move]
        let replicas = try s.foldInOrders(
            [base + [a1, a2, b1, b2], base + [b1, b2, a1, a2], [b1, b2, a1, a2, move, credit] + alice.bindings.reversed()],
            users: [alice.key])
        for r in replicas {
            #expect(try r.projections.noEffect(a1.id)?.code == "beyond_rights")
            #expect(try r.projections.noEffect(b1.id)?.code == "beyond_rights")
            #expect(try r.projections.noEffect(a2.id) == nil)
            #expect(try r.projections.noEffect(b2.id) == nil)
            let balance = try r.projections.balance(of: alice.key)
            #expect(balance.total == 40)
            #expect(balance.devices.map(\.rights) == [20, 20])
        }
    }

    /// Coin facts are filed under the zero object, and a fact naming the object
    /// it is filed under keeps the short form: a coin event whose header
    /// names the zero id must fold like any other, however its ledger entry
    /// is read back (fuzzing found such an event refused as damaged state,
    /// failing the whole commit it was in).
    @Test func coinEventsNamingTheZeroObjectFold() throws {
        let s = Scenario()
        let alice = try s.person(devices: 1)
        let credit = try s.issuer.sign(.coinCredited, alice.d1.publicKey, Payload.credit(user: alice.key, amount: 100, receipt: "tx-0"), hlc: Scenario.at(10))
        let zeroCredit = try s.issuer.sign(.coinCredited, .zero, Payload.credit(user: alice.key, amount: 5, receipt: "tx-z"), hlc: Scenario.at(15))
        let zeroSpend = try alice.d1.sign(.coinSpent, .zero, Payload.spend(30), hlc: Scenario.at(20))
        let later = try alice.d1.sign(.coinSpent, alice.key, Payload.spend(30), hlc: Scenario.at(30))
        let base = alice.bindings
        let replicas = try s.foldInOrders(
            [base + [credit, zeroCredit, zeroSpend, later], base + [later, zeroSpend, zeroCredit, credit], [zeroSpend, later] + base + [zeroCredit, credit]],
            users: [alice.key])
        for r in replicas {
            // §6.9: a spend names the spender's user; a credit lands on the key it names.
            #expect(try r.projections.noEffect(zeroSpend.id)?.code == "wrong_account")
            #expect(try r.projections.noEffect(zeroCredit.id) == nil)
            #expect(try r.projections.balance(of: alice.key).total == 70)
            let incremental = try r.digest()
            try r.store.rebuild()
            #expect(try r.digest() == incremental)
        }
        // All in one commit, as a sync batch.
        let batch = try s.replica()
        try batch.deliver(base + [credit, zeroCredit, zeroSpend, later])
        #expect(try batch.digest() == replicas[0].digest())
    }

    @Test func receiptDeliveredTwiceAndResignedCountsOnce() throws {
        let s = Scenario()
        let alice = try s.person(devices: 1)
        let first = try s.issuer.sign(.coinCredited, alice.d1.publicKey, Payload.credit(user: alice.key, amount: 100, receipt: "store-42"), hlc: Scenario.at(10))
        // The store redelivers the purchase: signed again, by the same and by another issuer.
        let again = try s.issuer.sign(.coinCredited, alice.d1.publicKey, Payload.credit(user: alice.key, amount: 100, receipt: "store-42"), hlc: Scenario.at(20))
        let other = try s.issuer2.sign(.coinCredited, alice.d1.publicKey, Payload.credit(user: alice.key, amount: 100, receipt: "store-42"), hlc: Scenario.at(15))
        let replicas = try s.foldInOrders(
            [alice.bindings + [first, first, again, other, first], [other, first, again, again] + alice.bindings],
            users: [alice.key])
        for r in replicas {
            #expect(try r.projections.balance(of: alice.key).total == 100)
            #expect(try r.projections.noEffect(first.id) == nil)
            #expect(try r.projections.noEffect(again.id)?.code == "duplicate_receipt")
            #expect(try r.projections.noEffect(other.id)?.code == "duplicate_receipt")
            #expect(try r.projections.receipts().map(\.receipt) == ["store-42"])
        }
    }

    @Test("credits add up to at most the supply's limit, whatever order they arrive in (supply_exhausted)")
    func creditsStopAtTheSupplysLimit() throws {
        let s = Scenario()
        // Credits of the largest amount, so that the limit is more than one
        // credit away at first: a fold follows the supply loosely there and
        // must switch to following it exactly as credits near the limit.
        let unit = PayloadLimits.maxCoinAmount
        s.supplyLimit = Int64(unit * 5 / 2)
        let alice = try s.person(devices: 1)
        func credit(_ by: FeedWriter, _ receipt: String, _ amount: UInt64, at t: UInt64) throws -> Event {
            try by.sign(.coinCredited, alice.d1.publicKey, Payload.credit(user: alice.key, amount: amount, receipt: receipt), hlc: Scenario.at(t))
        }
        let c1 = try credit(s.issuer, "A", unit, at: 10)
        let c2 = try credit(s.issuer, "B", unit, at: 20)
        let c3 = try credit(s.issuer2, "C", unit, at: 30)
        // Spending does not give the supply back: the limit bounds every coin ever issued.
        let spend = try alice.d1.sign(.coinSpent, alice.key, Payload.spend(unit, for: "a sticker"), hlc: Scenario.at(25))
        let orders = [
            alice.bindings + [c1, c2, c3, spend],
            [spend, c3, c2, c1] + alice.bindings,
            [c3, spend] + alice.bindings + [c1, c2],
        ]
        let replicas = try s.foldInOrders(orders, users: [alice.key])
        for r in replicas {
            #expect(try r.projections.noEffect(c1.id) == nil && r.projections.noEffect(c2.id) == nil)
            #expect(try r.projections.noEffect(c3.id)?.code == "supply_exhausted")
            #expect(try r.projections.coinsCredited() == 2 * unit)
            #expect(try r.projections.balance(of: alice.key).total == unit)
        }
        // All in one commit (the limit passed within one fold), after the
        // last credit alone (its later credit found through the index), and rebuilt.
        let batch = try s.replica()
        try batch.deliver(alice.bindings + [c1, c2, c3, spend])
        let lastFirst = try s.replica()
        try lastFirst.deliver(alice.bindings + [c3])
        try lastFirst.deliver([c1, c2, spend])
        for r in [batch, lastFirst] {
            #expect(try r.digest() == replicas[0].digest())
            try r.store.rebuild()
            #expect(try r.digest() == replicas[0].digest())
        }

        // A credit that stops counting (its receipt was credited earlier, for
        // less) leaves room: the refused one takes effect.
        let earlierA = try credit(s.issuer3, "A", 1, at: 5)
        for r in replicas + [batch, lastFirst] {
            try r.deliver([earlierA])
            #expect(try r.projections.noEffect(c1.id)?.code == "duplicate_receipt")
            #expect(try r.projections.noEffect(c3.id) == nil)
            #expect(try r.projections.coinsCredited() == 2 * unit + 1)
            #expect(try coinInvariantViolations(r.projections, users: [alice.key]).isEmpty)
        }
        let all = try s.replica()
        try all.deliver(alice.bindings + [c1, c2, c3, spend, earlierA])
        #expect(try all.digest() == replicas[0].digest())
    }

    @Test func avatarSlotAndLikesOfADeletedPictureDisappear() throws {
        let s = Scenario()
        let alice = try s.person(devices: 1)
        let bob = try s.person(devices: 1)
        let pic = try s.picture(alice.d1, at: 10)
        let avatar = try alice.d1.sign(.profileSet, alice.key, Payload.profile(.avatar, .bytes(pic.id.bytes)), hlc: Scenario.at(11))
        let slot = try alice.d1.sign(.slotSet, alice.key, Payload.slotSet(0, picture: pic.id), hlc: Scenario.at(12))
        let like = try bob.d1.sign(.likeAdded, pic.id, hlc: Scenario.at(13))
        let delete = try alice.d1.sign(.pictureDeleted, pic.id, [], hlc: Scenario.at(14))
        let r = try s.fold(alice.bindings + bob.bindings + [pic.event, avatar, slot, like])
        guard case .picture(let view)? = try r.projections.profile(alice.key).avatar else {
            Issue.record("avatar not resolved")
            return
        }
        #expect(view.id.raw == pic.id)
        #expect(try r.projections.likes(of: pic.id) == [bob.key])
        try r.deliver([delete])
        #expect(try r.projections.profile(alice.key).avatar == .removed(PictureID(pic.id)))
        #expect(try r.projections.slots(of: alice.key).first?.picture == .removed(PictureID(pic.id)))
        #expect(try r.projections.likes(of: pic.id).isEmpty)
        #expect(try r.projections.pictures(of: alice.key).isEmpty)
    }

    @Test func pictureReferenceArrivingBeforeThePictureResolvesLater() throws {
        let s = Scenario()
        let alice = try s.person(devices: 1)
        let bob = try s.person(devices: 1)
        let pic = try s.picture(alice.d1, at: 10, caption: "sunset")
        let chat = bob.d1.createdID(s.rng.bytes(16))
        let create = try bob.d1.sign(.chatCreated, chat, Payload.chatCreated(members: [alice.key]), hlc: Scenario.at(20))
        let message = try bob.d1.sign(.messageSent, chat, Payload.message(text: "look", picture: pic.id), hlc: Scenario.at(30))
        let r = try s.fold(bob.bindings + [create, message])
        // The message refers to the picture inside its sealed body; a member's
        // device resolves the reference through the projections when it reads.
        #expect(try r.projections.chat(chat).messages.count == 1)
        #expect(try r.projections.reference(to: PictureID(pic.id)) == .unresolved(PictureID(pic.id)))
        try r.deliver(alice.bindings + [pic.event])
        guard case .picture(let view) = try r.projections.reference(to: PictureID(pic.id)) else {
            Issue.record("the reference did not resolve once the picture arrived")
            return
        }
        #expect(view.caption == "sunset" && view.owner.raw == alice.key)
    }

    @Test func theRetiredVisibilityFieldTakesNoEffect() throws {
        let s = Scenario()
        let alice = try s.person(devices: 1)
        let visibility = try alice.d1.sign(.profileSet, alice.key, Payload.profile(.visibility, .text("private")), hlc: Scenario.at(10))
        let name = try alice.d1.sign(.profileSet, alice.key, Payload.profile(.name, .text("Alice")), hlc: Scenario.at(11))
        let r = try s.fold(alice.bindings + [visibility, name])
        #expect(try r.projections.noEffect(visibility.id)?.code == "retired_field")
        #expect(try r.projections.noEffect(name.id) == nil)
        #expect(try r.projections.profile(alice.key).field("visibility") == nil)
    }

    @Test func unauthorizedEventsTakeNoEffectAndListTheirReasons() throws {
        let s = Scenario()
        let alice = try s.person(devices: 1)
        let bob = try s.person(devices: 1)
        let chat = alice.d1.createdID(s.rng.bytes(16))
        let create = try alice.d1.sign(.chatCreated, chat, Payload.chatCreated(members: []), hlc: Scenario.at(10))
        let name = try alice.d1.sign(.profileSet, alice.key, Payload.profile(.name, .text("Alice")), hlc: Scenario.at(11))
        let credit = try s.issuer.sign(.coinCredited, bob.d1.publicKey, Payload.credit(user: bob.key, amount: 10, receipt: "r1"), hlc: Scenario.at(12))
        // Bob edits Alice's profile, posts in a chat he is not in, adds himself;
        // a stranger mints coins; Bob spends more than his rights.
        let edit = try bob.d1.sign(.profileSet, alice.key, Payload.profile(.name, .text("Mallory")), hlc: Scenario.at(20))
        let post = try bob.d1.sign(.messageSent, chat, Payload.message(text: "let me in"), hlc: Scenario.at(21))
        let addSelf = try bob.d1.sign(.chatMemberAdded, chat, Payload.member(bob.key), hlc: Scenario.at(22))
        let mint = try s.stranger.sign(.coinCredited, bob.d1.publicKey, Payload.credit(user: bob.key, amount: 1000, receipt: "free"), hlc: Scenario.at(23))
        let overspend = try bob.d1.sign(.coinSpent, bob.key, Payload.spend(11), hlc: Scenario.at(24))
        let all = alice.bindings + bob.bindings + [create, name, credit, edit, post, addSelf, mint, overspend]
        let replicas = try s.foldInOrders([all, all.reversed()], users: [alice.key, bob.key])
        for r in replicas {
            let reasons = Dictionary(try r.projections.noEffects().map { ($0.event, $0.reason.code) }, uniquingKeysWith: { a, _ in a })
            #expect(reasons[edit.id] == "not_owner")
            #expect(reasons[post.id] == "not_member")
            #expect(reasons[addSelf.id] == "not_admin")
            #expect(reasons[mint.id] == "not_issuer")
            #expect(reasons[overspend.id] == "beyond_rights")
            #expect(Set(reasons.keys) == [edit.id, post.id, addSelf.id, mint.id, overspend.id])
            #expect(try r.projections.profile(alice.key).field("name") == .text("Alice"))
            #expect(try r.projections.chat(chat).messages.isEmpty)
            #expect(try r.projections.balance(of: bob.key).total == 10)
        }
    }

    @Test func deletionPurgesPayloadsAndBlob() throws {
        let s = Scenario()
        let (alice, pic, caption, chat, create) = try s.alicesCaptionedPictureAndChat()
        let message = try alice.d1.sign(.messageSent, chat, Payload.message(text: "secret"), hlc: Scenario.at(13))
        let edit = try alice.d1.sign(.messageEdited, message.id, Payload.edit(chat: chat, text: "secret 2"), hlc: Scenario.at(14))
        let deletePic = try alice.d1.sign(.pictureDeleted, pic.id, [], hlc: Scenario.at(15))
        let deleteMessage = try alice.d1.sign(.messageDeleted, message.id, Payload.delete(chat: chat), hlc: Scenario.at(16))
        let r = try s.fold(alice.bindings + [pic.event, caption, create, message, edit])
        #expect(try r.blobs.read(pic.blob) != nil)
        try r.deliver([deletePic, deleteMessage])
        for id in [pic.event.id, caption.id, message.id, edit.id] {
            #expect(try r.log.event(id)?.event.payloadBytes == nil, "payload of \(id.short) survived its deletion")
        }
        #expect(try r.blobs.read(pic.blob) == nil)
        let shown = try r.projections.chat(chat).messages.first
        #expect(shown?.deleted != nil && shown?.body == nil)
        // A redelivered payload is purged again in the same transaction.
        try r.deliver([pic.event, message])
        #expect(try r.log.event(pic.event.id)?.event.payloadBytes == nil)
        #expect(try r.log.event(message.id)?.event.payloadBytes == nil)
        #expect(try r.blobs.read(pic.blob) == nil)
        let fresh = try s.fold(alice.bindings + [pic.event, caption, create, message, edit, deletePic, deleteMessage])
        #expect(try fresh.digest() == r.digest())
    }

    /// An edit and a deletion of a message whose send this node does not
    /// hold take no effect (`message_unknown`), by the incremental fold and
    /// by a rebuild, which folds them after every held message; once the
    /// send arrives they are decided by the message's rules (here: only
    /// its sender edits or deletes it).
    @Test func editsOfAMessageNotHeldTakeNoEffectUntilItsSendArrives() throws {
        let s = Scenario()
        let (alice, bob, chat, create) = try s.aliceCreatesAChatWithBob()
        let held = try alice.d1.sign(.messageSent, chat, Payload.message(text: "held"), hlc: Scenario.at(11))
        let bobs = try bob.d1.sign(.messageSent, chat, Payload.message(text: "bob's"), hlc: Scenario.at(12))
        let editHeld = try alice.d1.sign(.messageEdited, held.id, Payload.edit(chat: chat, text: "held 2"), hlc: Scenario.at(13))
        let editBobs = try alice.d1.sign(.messageEdited, bobs.id, Payload.edit(chat: chat, text: "alice's words"), hlc: Scenario.at(14))
        let deleteBobs = try alice.d1.sign(.messageDeleted, bobs.id, Payload.delete(chat: chat), hlc: Scenario.at(15))
        let r = try s.replica()
        try r.deliver(alice.bindings + bob.bindings + [create, held, editHeld, editBobs, deleteBobs])
        func expectUnknown() throws {
            for id in [editBobs.id, deleteBobs.id] { #expect(try r.projections.noEffect(id)?.code == "message_unknown") }
            #expect(try r.projections.chat(chat).messages.map(\.body) == [fakeSealed("held 2")])
        }
        try expectUnknown()
        let incremental = try r.digest()
        // One object per slice and per part: the held message and the
        // unknown one are folded in different slices.
        try r.store.rebuild(sliceSize: 1, part: 1)
        #expect(try r.digest() == incremental)
        try expectUnknown()
        try r.deliver([bobs])
        for id in [editBobs.id, deleteBobs.id] { #expect(try r.projections.noEffect(id)?.code == "not_author") }
        #expect(try r.projections.chat(chat).messages.map(\.body) == [fakeSealed("held 2"), fakeSealed("bob's")])
        let decided = try r.digest()
        try r.store.rebuild()
        #expect(try r.digest() == decided)
    }

    /// A rebuild purges what the state it folds holds deleted, where the
    /// log still holds it: here a log written without its fold keeps the
    /// payloads of a deleted message (its send, with an encrypted picture,
    /// and its edit), of a deleted picture and their blobs. The live message
    /// and the blob it shares with the deleted one stay.
    @Test func aRebuildPurgesWhatTheLogStillHoldsOfDeletedContent() throws {
        let s = Scenario()
        let (alice, pic, caption, chat, create) = try s.alicesCaptionedPictureAndChat()
        let gone = [UInt8](repeating: 7, count: 40), shared = [UInt8](repeating: 9, count: 40)
        let message = try alice.d1.sign(.messageSent, chat, Payload.message(text: "secret", attachment: gone), hlc: Scenario.at(13))
        let edit = try alice.d1.sign(.messageEdited, message.id, Payload.edit(chat: chat, text: "secret 2"), hlc: Scenario.at(14))
        let sharing = try alice.d1.sign(.messageSent, chat, Payload.message(text: "shares", attachment: shared), hlc: Scenario.at(15))
        let live = try alice.d1.sign(.messageSent, chat, Payload.message(text: "kept", attachment: shared), hlc: Scenario.at(16))
        let deletePic = try alice.d1.sign(.pictureDeleted, pic.id, [], hlc: Scenario.at(17))
        let deleteMessage = try alice.d1.sign(.messageDeleted, message.id, Payload.delete(chat: chat), hlc: Scenario.at(18))
        let deleteSharing = try alice.d1.sign(.messageDeleted, sharing.id, Payload.delete(chat: chat), hlc: Scenario.at(19))
        let events = alice.bindings + [pic.event, caption, create, message, edit, sharing, live, deletePic, deleteMessage, deleteSharing]
        let r = try s.replica()
        // The log and blobs only: nothing folded, nothing purged.
        try r.env.write { txn in
            var context = try r.log.appendContext(in: txn, nowMillis: Replica.nowMillis, driftMillis: Replica.driftMillis)
            for e in events { #expect(try r.log.append(e, in: txn, context: &context) != .duplicate) }
            try r.log.finish(&context, in: txn)
            for bytes in [s.blobs[pic.blob] ?? [], gone, shared] { try r.blobs.put(bytes, in: txn) }
        }
        let purged = [pic.event.id, caption.id, message.id, edit.id, sharing.id]
        for id in purged { #expect(try r.log.event(id)?.event.payloadBytes != nil) }
        // One object per slice and per part.
        try r.store.rebuild(sliceSize: 1, part: 1)
        for id in purged { #expect(try r.log.event(id)?.event.payloadBytes == nil, "payload of \(id.short) survived the rebuild") }
        #expect(try r.log.event(live.id)?.event.payloadBytes != nil)
        #expect(try r.blobs.read(pic.blob) == nil)
        #expect(try r.blobs.read(Blake2b.hash256(gone)) == nil)
        #expect(try r.blobs.read(Blake2b.hash256(shared)) == shared)
        #expect(try r.digest() == s.fold(events).digest())
    }

    @Test func deviceBindingWithoutValidProofDoesNotBind() throws {
        let s = Scenario()
        let alice = try s.person(devices: 1)
        let bob = try s.person(devices: 1)
        let stolen = FeedWriter(s.rng.key())
        // No proof, and a proof the device gave another user.
        let noProof = try alice.user.sign(.deviceAdded, stolen.publicKey, [], hlc: Scenario.at(10))
        let other = FeedWriter(s.rng.key())
        let wrongProof = try alice.user.sign(.deviceAdded, other.publicKey, Payload.deviceAdded(device: other.key, user: bob.key), hlc: Scenario.at(11))
        // A device already bound to Bob cannot be claimed by Alice.
        let claim = try alice.user.sign(.deviceAdded, bob.d1.publicKey, Payload.deviceAdded(device: bob.d1.key, user: alice.key), hlc: Scenario.at(12))
        let edit = try stolen.sign(.profileSet, alice.key, Payload.profile(.bio, .text("not me")), hlc: Scenario.at(20))
        let r = try s.fold(alice.bindings + bob.bindings + [noProof, wrongProof, claim, edit])
        #expect(try r.projections.noEffect(claim.id)?.code == "already_bound")
        #expect(try r.projections.binding(of: other.publicKey) == nil)
        #expect(try r.projections.noEffect(noProof.id)?.code == "no_device_consent")
        #expect(try r.projections.noEffect(wrongProof.id)?.code == "no_device_consent")
        #expect(try r.projections.binding(of: stolen.publicKey) == nil)
        #expect(try r.projections.binding(of: bob.d1.publicKey)?.user == bob.key)
        #expect(try r.projections.noEffect(edit.id)?.code == "not_owner")
        #expect(try r.projections.devices(of: alice.key).map(\.device.raw) == [alice.d1.publicKey])
        // A rebuild checks the consents ahead, on all cores: the same state.
        let folded = try r.digest()
        try r.store.rebuild()
        #expect(try r.digest() == folded)
        #expect(try r.projections.noEffect(noProof.id)?.code == "no_device_consent")
        #expect(try r.projections.noEffect(wrongProof.id)?.code == "no_device_consent")
        #expect(try r.projections.binding(of: bob.d1.publicKey)?.user == bob.key)
    }

    @Test func removedDeviceEventsAfterRemovalTakeNoEffect() throws {
        let s = Scenario()
        let alice = try s.person()
        let credit = try s.issuer.sign(.coinCredited, alice.d2.publicKey, Payload.credit(user: alice.key, amount: 50, receipt: "r"), hlc: Scenario.at(5))
        let beforeRemoval = try alice.d2.sign(.profileSet, alice.key, Payload.profile(.city, .text("Oslo")), hlc: Scenario.at(10))
        let remove = try alice.user.sign(.deviceRemoved, alice.d2.publicKey, [], hlc: Scenario.at(20))
        let afterRemoval = try alice.d2.sign(.profileSet, alice.key, Payload.profile(.city, .text("Lost")), hlc: Scenario.at(30))
        let spend = try alice.d2.sign(.coinSpent, alice.key, Payload.spend(50), hlc: Scenario.at(31))
        let base = alice.bindings + [credit, beforeRemoval]
        let replicas = try s.foldInOrders(
            [base + [remove, afterRemoval, spend], base + [afterRemoval, spend, remove], [afterRemoval, spend, remove] + base.reversed()],
            users: [alice.key])
        for r in replicas {
            #expect(try r.projections.profile(alice.key).field("city") == .text("Oslo"))
            #expect(try r.projections.noEffect(beforeRemoval.id) == nil)
            #expect(try r.projections.noEffect(afterRemoval.id)?.code == "device_removed")
            #expect(try r.projections.noEffect(spend.id)?.code == "device_removed")
            // The removed device's coins still count for the user.
            #expect(try r.projections.balance(of: alice.key).total == 50)
        }
    }

    /// Follows and pictures are folded off the write transaction in a
    /// rebuild, and read device bindings (Specs/projections.md §9.2). With no
    /// class between the devices and them holding facts, the rebuild must
    /// still fold them after the bindings are committed.
    @Test func aRebuildFoldsDeviceEventsAsTheirUserWithNothingFiledBetween() throws {
        for withPicture in [false, true] {
            let s = Scenario()
            let alice = try s.person()
            let bob = try s.person()
            var events = alice.bindings + bob.bindings
            events.append(try alice.d1.sign(.followAdded, bob.key, hlc: Scenario.at(10)))
            if withPicture { events.append(try s.picture(alice.d2, at: 11).event) }
            let r = try s.fold(events)
            let digest = try r.digest()
            #expect(try r.projections.following(of: alice.key) == [bob.key])
            try r.store.rebuild(sliceSize: 20_000, part: 1)
            #expect(try r.digest() == digest)
            #expect(try r.projections.following(of: alice.key) == [bob.key])
            if withPicture { #expect(try r.projections.pictures(of: alice.key).count == 1) }
        }
    }

    /// A user's relay list (Specs/projections.md §6.12): one register per
    /// user, set by the user key or any of its devices, in merge order
    /// whatever the arrival order; another user's device takes no effect.
    @Test func aRelayListIsTheLatestListOfTheUserOrItsDevices() throws {
        let s = Scenario()
        let alice = try s.person()
        let bob = try s.person(devices: 1)
        func list(_ relays: [Relay]) -> [(String, CBORValue)] {
            guard case .map(let entries) = RelaysSetPayload(relays: relays).cbor else { return [] }
            return entries.compactMap { e in e.key.textValue.map { ($0, e.value) } }
        }
        let r1 = Relay(address: "relay1.example:7800", key: s.rng.bytes32(), roles: .all)
        let r2 = Relay(address: "[2001:db8::7]:7801", key: s.rng.bytes32(), roles: .inbox)
        let first = try alice.d1.sign(.relaysSet, alice.key, list([r1]), hlc: Scenario.at(10))
        let second = try alice.d2.sign(.relaysSet, alice.key, list([r2, r1]), hlc: Scenario.at(20))
        let byUserKey = try alice.user.sign(.relaysSet, alice.key, list([r1, r2]), hlc: Scenario.at(30))
        let forged = try bob.d1.sign(.relaysSet, alice.key, list([]), hlc: Scenario.at(40))
        for order in [[first, second, byUserKey, forged], [forged, byUserKey, second, first]] {
            let r = try s.replica()
            try r.deliver(alice.bindings + bob.bindings)
            for e in order { try r.deliver([e]) }
            let view = try #require(try r.projections.relays(of: UserID(alice.key)))
            #expect(view.relays == [r1, r2] && view.event == byUserKey.id)
            #expect(try r.projections.noEffect(forged.id)?.code == "not_owner")
            for e in [first, second, byUserKey] { #expect(try r.projections.noEffect(e.id) == nil) }
            #expect(try r.projections.relays(of: UserID(bob.key)) == nil)
        }
        // Two devices' concurrent lists: the greater merge order wins on every replica.
        let carol = try s.person()
        let a = try carol.d1.sign(.relaysSet, carol.key, list([r1]), hlc: Scenario.at(50))
        let b = try carol.d2.sign(.relaysSet, carol.key, list([r2]), hlc: Scenario.at(50))
        let winner = (a.hlc, a.author.bytes.lexicographicallyPrecedes(b.author.bytes)) == (b.hlc, true) ? b : a
        var digests: Set<Hash32> = []
        for order in [[a, b], [b, a]] {
            let r = try s.replica()
            try r.deliver(carol.bindings + order)
            #expect(try r.projections.relays(of: UserID(carol.key))?.event == winner.id)
            digests.insert(try r.projections.digest())
        }
        #expect(digests.count == 1)
    }
}

/// The 8 bytes of `n`, most significant first, as store keys hold numbers.
private func bigEndian(_ n: UInt64) -> [UInt8] { (0..<8).reversed().map { UInt8(truncatingIfNeeded: n >> (8 * $0)) } }
