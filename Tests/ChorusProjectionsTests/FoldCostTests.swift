import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusProjections
import ChorusTestSupport
import Testing

/// What an event's fold reads is bounded by what it changes, not by how many
/// events name its object (Specs/projections.md §9.1): otherwise a peer could
/// name one object with event after event, each costing every node that folds
/// them more than the last. Counted in facts read back, not timed.
@Suite("Fold cost: an event's fold does not read the events that named its object before")
struct FoldCostTests {
    /// Delivers `events` one write each and expects their folds to have read
    /// no fact back.
    static func expectNoFactsRead(
        _ replica: Replica, _ events: [Event], _ comment: Comment, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let before = replica.projections.factsReadByFolds.value
        for e in events { try replica.deliver([e]) }
        #expect(replica.projections.factsReadByFolds.value == before, comment, sourceLocation: sourceLocation)
    }

    /// Expects a rebuild from the log to give the state the one-at-a-time folds gave.
    static func expectRebuildAgrees(_ replica: Replica, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let incremental = try replica.digest()
        try replica.store.rebuild()
        #expect(try replica.digest() == incremental, "a rebuild differs from the state folded one write at a time", sourceLocation: sourceLocation)
    }

    @Test("a device.key reads none of the keys named for its device before, by others or by the device")
    func deviceKeys() throws {
        let replica = try Replica(config: NetworkConfig())
        let device = FeedWriter(SigningKey.generate())
        let stranger = FeedWriter(SigningKey.generate())
        var random = SplitMix64(seed: 63)
        func key(_ writer: FeedWriter) throws -> Event {
            try writer.sign(.deviceKey, device.publicKey, [("key", .bytes(random.bytes(32)))], nowMillis: Replica.nowMillis - 10_000)
        }
        let first = try key(device)
        try replica.deliver([first])
        var junk: [Event] = []
        for _ in 0..<200 {
            junk.append(try key(stranger))
            try replica.deliver([junk[junk.count - 1]])
        }
        let late = try key(stranger)
        let second = try key(device)
        try Self.expectNoFactsRead(replica, [late, second], "the folds read facts of the device's earlier keys")
        // And decided as folding the device's keys whole decides them.
        #expect(try replica.projections.encryptionKey(of: device.publicKey)?.event == first.id)
        #expect(try replica.projections.noEffect(of: second)?.code == "already_published")
        #expect(try replica.projections.noEffect(of: late)?.code == "not_owner")
        #expect(try replica.projections.noEffect(of: first) == nil)
        try Self.expectRebuildAgrees(replica)
    }

    @Test("a member removed or added again now decides again only the messages and read markers since, not the chat's history")
    func membershipChangesNow() throws {
        let replica = try Replica(config: NetworkConfig())
        // Unbound keys act for themselves: Alice creates a chat with Bob.
        let alice = FeedWriter(SigningKey.generate())
        let bob = FeedWriter(SigningKey.generate())
        let start = Replica.nowMillis - 1_000_000
        let chatID = alice.createdID([UInt8](repeating: 0xC8, count: 16))
        try replica.deliver([try alice.sign(.chatCreated, chatID, Payload.chatCreated(members: [bob.publicKey]), nowMillis: start)])
        var history: [Event] = []
        for i in 0..<200 {
            history.append(try bob.sign(.messageSent, chatID, Payload.message(text: "message \(i)"), nowMillis: start + 1 + UInt64(i)))
        }
        try replica.deliver(history)
        // And Bob marked each read (Alice's side of the chat is quiet).
        for (i, message) in history.enumerated() {
            try replica.deliver([try bob.sign(.chatRead, chatID, Payload.read(message: message.id, hlc: message.hlc), nowMillis: start + 300 + UInt64(i))])
        }
        // Bob's message stamped after his removal arrives first, and takes effect until the removal does.
        let removal = try alice.sign(.chatMemberRemoved, chatID, Payload.member(bob.publicKey), nowMillis: start + 1_000)
        let late = try bob.sign(.messageSent, chatID, Payload.message(text: "after the removal"), nowMillis: start + 2_000)
        try replica.deliver([late])
        #expect(try replica.projections.noEffect(of: late) == nil)
        let readAt = replica.projections.factsReadByFolds.value
        try replica.deliver([removal])
        let read = replica.projections.factsReadByFolds.value - readAt
        // The chat's own facts (its creation and the removal) and the late message's.
        #expect(read <= 4, "the removal's fold read \(read) facts: it decided the chat's history again")
        #expect(try replica.projections.noEffect(of: late)?.code == "not_member")
        #expect(try history.allSatisfy { try replica.projections.noEffect(of: $0) == nil })
        // Added again: the same.
        let again = try alice.sign(.chatMemberAdded, chatID, Payload.member(bob.publicKey), nowMillis: start + 3_000)
        let readBefore = replica.projections.factsReadByFolds.value
        try replica.deliver([again])
        #expect(replica.projections.factsReadByFolds.value - readBefore <= 4)
        #expect(try replica.projections.noEffect(of: late)?.code == "not_member")
        try Self.expectRebuildAgrees(replica)
    }

    @Test("a membership change after a chat's key events re-folds none of them; one before a later key event does")
    func membershipChangesAfterTheKeys() throws {
        let replica = try Replica(config: NetworkConfig())
        let alice = FeedWriter(SigningKey.generate())
        let bob = FeedWriter(SigningKey.generate())
        let carol = FeedWriter(SigningKey.generate())
        let start = Replica.nowMillis - 1_000_000
        let chatID = alice.createdID([UInt8](repeating: 0xC9, count: 16))
        try replica.deliver([try alice.sign(.chatCreated, chatID, Payload.chatCreated(members: [carol.publicKey]), nowMillis: start)])
        // Each epoch wrapped to all three; Bob is not a member yet.
        func key(_ writer: FeedWriter, epoch: Bytes32, at t: UInt64) throws -> Event {
            let wraps = [alice.publicKey, bob.publicKey, carol.publicKey].sorted().flatMap { $0.bytes + Random.bytes(PayloadLimits.wrapBytes - 32) }
            return try writer.sign(
                .chatKey, chatID, [("epoch", .bytes(epoch.bytes)), ("wraps", .bytes(wraps)), ("ephemeral", .bytes(Random.bytes(32)))],
                nowMillis: start + t)
        }
        for i in 0..<100 { try replica.deliver([try key(alice, epoch: Random.bytes32(), at: 1 + UInt64(i))]) }
        // Carol's key event stamped after Bob's addition arrives before it:
        // the addition then re-folds the keys, and Bob's wrap of it counts.
        let lateEpoch = Random.bytes32()
        let late = try key(carol, epoch: lateEpoch, at: 2_000)
        let add = try alice.sign(.chatMemberAdded, chatID, Payload.member(bob.publicKey), nowMillis: start + 1_500)
        try replica.deliver([late])
        #expect(try !replica.projections.wraps(of: chatID, epoch: lateEpoch).contains { $0.device == bob.publicKey })
        try replica.deliver([add])
        #expect(try replica.projections.wraps(of: chatID, epoch: lateEpoch).contains { $0.device == bob.publicKey })
        // Removed after every key event: none is read again.
        let removal = try alice.sign(.chatMemberRemoved, chatID, Payload.member(bob.publicKey), nowMillis: start + 3_000)
        let readAt = replica.projections.factsReadByFolds.value
        try replica.deliver([removal])
        let read = replica.projections.factsReadByFolds.value - readAt
        // The chat's own facts: its creation, the addition and the removal.
        #expect(read <= 4, "the removal's fold read \(read) facts: it re-folded the chat's keys")
        #expect(try replica.projections.wraps(of: chatID, epoch: lateEpoch).contains { $0.device == bob.publicKey })
        try Self.expectRebuildAgrees(replica)
    }

    @Test("a member joining or leaving a large chat finds its own chat-list entry, not every member's unread count again")
    func membershipChangesKeepTheOthersCounts() throws {
        let replica = try Replica(config: NetworkConfig())
        let alice = FeedWriter(SigningKey.generate())
        let others = (0..<50).map { _ in FeedWriter(SigningKey.generate()) }
        let newcomer = FeedWriter(SigningKey.generate())
        let start = Replica.nowMillis - 1_000_000
        let chatID = alice.createdID([UInt8](repeating: 0xCA, count: 16))
        try replica.deliver([try alice.sign(.chatCreated, chatID, Payload.chatCreated(members: others.map(\.publicKey)), nowMillis: start)])
        try replica.deliver((0..<20).map { i in try alice.sign(.messageSent, chatID, Payload.message(text: "\(i)"), nowMillis: start + 1 + UInt64(i)) })
        for (i, change) in [
            try alice.sign(.chatMemberAdded, chatID, Payload.member(newcomer.publicKey), nowMillis: start + 100),
            try alice.sign(.chatMemberRemoved, chatID, Payload.member(others[0].publicKey), nowMillis: start + 200),
        ].enumerated() {
            let before = replica.projections.unreadRecountsByFolds.value
            try replica.deliver([change])
            let recounts = replica.projections.unreadRecountsByFolds.value - before
            #expect(recounts <= 1, "change \(i) found \(recounts) members' unread counts again")
            #expect(try replica.chatActivityProblems().isEmpty)
        }
        #expect(try replica.projections.chatList(of: UserID(newcomer.publicKey)).first?.unread == 20)
        #expect(try replica.projections.chatList(of: UserID(others[0].publicKey)).isEmpty)
        try Self.expectRebuildAgrees(replica)
    }

    @Test("an administrator's addition, removal or a member's leaving, the chat's last membership event, reads none of the chat's earlier ones")
    func effectiveMembershipEvents() throws {
        let replica = try Replica(config: NetworkConfig())
        let alice = FeedWriter(SigningKey.generate())
        let start = Replica.nowMillis - 1_000_000
        let chatID = alice.createdID([UInt8](repeating: 0xCB, count: 16))
        try replica.deliver([try alice.sign(.chatCreated, chatID, Payload.chatCreated(members: []), nowMillis: start)])
        let users = (0..<150).map { _ in FeedWriter(SigningKey.generate()) }
        for (i, user) in users.enumerated() {
            try replica.deliver([try alice.sign(.chatMemberAdded, chatID, Payload.member(user.publicKey), nowMillis: start + 1 + UInt64(i))])
        }
        let carol = FeedWriter(SigningKey.generate())
        let add = try alice.sign(.chatMemberAdded, chatID, Payload.member(carol.publicKey, admin: true), nowMillis: start + 1_000)
        let removal = try carol.sign(.chatMemberRemoved, chatID, Payload.member(users[0].publicKey), nowMillis: start + 1_001)
        let leave = try users[1].sign(.chatMemberRemoved, chatID, Payload.member(users[1].publicKey), nowMillis: start + 1_002)
        try Self.expectNoFactsRead(replica, [add, removal, leave], "the folds read the chat's earlier membership events")
        for e in [add, removal, leave] { #expect(try replica.projections.noEffect(of: e) == nil) }
        let members = try replica.projections.chat(chatID).chat.members.map { $0.user.raw }
        #expect(members.contains(carol.publicKey) && !members.contains(users[0].publicKey) && !members.contains(users[1].publicKey))
        #expect(try replica.chatActivityProblems().isEmpty)
        try Self.expectRebuildAgrees(replica)
    }

    @Test("an edit or deletion reads none of the edits named for its message before, by others or by the sender")
    func messageEdits() throws {
        let replica = try Replica(config: NetworkConfig())
        // A chat of one member (unbound keys act for themselves), one message.
        let sender = FeedWriter(SigningKey.generate())
        let stranger = FeedWriter(SigningKey.generate())
        let now = Replica.nowMillis - 10_000
        let chatID = sender.createdID([UInt8](repeating: 0xC7, count: 16))
        try replica.deliver([try sender.sign(.chatCreated, chatID, Payload.chatCreated(members: []), nowMillis: now)])
        let message = try sender.sign(.messageSent, chatID, Payload.message(text: "hello"), nowMillis: now)
        try replica.deliver([message])
        var edits: [Event] = []
        for i in 0..<100 {
            // Junk by a stranger, and the sender's own edits.
            try replica.deliver([try stranger.sign(.messageEdited, message.id, Payload.edit(chat: chatID, text: "junk \(i)"), nowMillis: now)])
            edits.append(try sender.sign(.messageEdited, message.id, Payload.edit(chat: chatID, text: "edit \(i)"), nowMillis: now))
            try replica.deliver([edits[edits.count - 1]])
        }
        let junk = try stranger.sign(.messageEdited, message.id, Payload.edit(chat: chatID, text: "more junk"), nowMillis: now)
        let last = try sender.sign(.messageEdited, message.id, Payload.edit(chat: chatID, text: "last"), nowMillis: now)
        try Self.expectNoFactsRead(replica, [junk, last], "the folds read the message's earlier edits")
        #expect(try replica.projections.noEffect(of: junk)?.code == "not_author")
        #expect(try replica.projections.noEffect(of: last) == nil)
        // The same state a fold of all the facts gives, and after the
        // deletion (folded whole), the junk that follows is decided and purged
        // without reading the rest.
        try Self.expectRebuildAgrees(replica)
        try replica.deliver([try sender.sign(.messageDeleted, message.id, Payload.delete(chat: chatID), nowMillis: now)])
        let late = try stranger.sign(.messageEdited, message.id, Payload.edit(chat: chatID, text: "late junk"), nowMillis: now)
        try Self.expectNoFactsRead(replica, [late], "the folds read the deleted message's earlier edits")
        #expect(try replica.projections.noEffect(of: late)?.code == "not_author")
        let payload = try replica.env.read { txn in try replica.log.readArrival(of: late.id, in: txn).map { try replica.log.readPayload(at: $0, in: txn) } }
        #expect(payload == .some(nil), "the junk edit of a deleted message kept its payload")
        try Self.expectRebuildAgrees(replica)
    }

    @Test("a slot.set reads none of the slot sets named for its user before, by others or by the user")
    func slots() throws {
        let replica = try Replica(config: NetworkConfig(issuers: [], slotPrices: [0, 10, 20]))
        let user = FeedWriter(SigningKey.generate())
        let stranger = FeedWriter(SigningKey.generate())
        let now = Replica.nowMillis - 10_000
        func set(_ writer: FeedWriter, _ slot: UInt64, _ picture: Bytes32?) throws -> Event {
            try writer.sign(.slotSet, user.publicKey, [("slot", .unsigned(slot)), ("picture", picture.map { .bytes($0.bytes) } ?? .null)], nowMillis: now)
        }
        for i in 0..<100 {
            try replica.deliver([try set(stranger, UInt64(i % 3), Random.bytes32())])
            try replica.deliver([try set(user, UInt64(i % 3), i % 5 == 0 ? nil : Random.bytes32())])
        }
        let junk = try set(stranger, 1, Random.bytes32())
        let beyond = try set(user, 7, nil)
        let last = try set(user, 1, Random.bytes32())
        try Self.expectNoFactsRead(replica, [junk, beyond, last], "the folds read the user's earlier slot sets")
        #expect(try replica.projections.noEffect(of: junk)?.code == "not_owner")
        #expect(try replica.projections.noEffect(of: beyond)?.code == "no_such_slot")
        #expect(try replica.projections.noEffect(of: last) == nil)
        try Self.expectRebuildAgrees(replica)
    }

    @Test("a chat.key reads none of the key events named for its chat before, by members or not")
    func chatKeys() throws {
        let replica = try Replica(config: NetworkConfig())
        let member = FeedWriter(SigningKey.generate())
        let stranger = FeedWriter(SigningKey.generate())
        let now = Replica.nowMillis - 10_000
        let chatID = member.createdID([UInt8](repeating: 0xC8, count: 16))
        try replica.deliver([try member.sign(.chatCreated, chatID, Payload.chatCreated(members: []), nowMillis: now)])
        func key(_ writer: FeedWriter, epoch: Bytes32) throws -> Event {
            let wraps = member.publicKey.bytes + Random.bytes(PayloadLimits.wrapBytes - 32)
            return try writer.sign(
                .chatKey, chatID, [("epoch", .bytes(epoch.bytes)), ("wraps", .bytes(wraps)), ("ephemeral", .bytes(Random.bytes(32)))], nowMillis: now)
        }
        let firstEpoch = Random.bytes32()
        let first = try key(member, epoch: firstEpoch)
        try replica.deliver([first])
        for _ in 0..<100 {
            try replica.deliver([try key(stranger, epoch: firstEpoch)])
            try replica.deliver([try key(member, epoch: Random.bytes32())])
        }
        let junk = try key(stranger, epoch: Random.bytes32())
        let again = try key(member, epoch: firstEpoch)
        try Self.expectNoFactsRead(replica, [junk, again], "the folds read the chat's earlier key events")
        #expect(try replica.projections.noEffect(of: junk)?.code == "not_member")
        #expect(try replica.projections.noEffect(of: again) == nil)
        try Self.expectRebuildAgrees(replica)
    }

    @Test("a picture's edits read none of the events named for it before, by strangers (stamped later) or by the owner, before and after its deletion")
    func pictureEdits() throws {
        let replica = try Replica(config: NetworkConfig())
        let owner = FeedWriter(SigningKey.generate())
        let stranger = FeedWriter(SigningKey.generate())
        // The stranger's events are stamped after the owner's: the owner's are never the last.
        let ownerTime = Replica.nowMillis - 20_000, strangerTime = Replica.nowMillis - 5_000
        let picture = owner.createdID([UInt8](repeating: 0xC9, count: 16))
        try replica.deliver([try owner.sign(.pictureCreated, picture, Payload.pictureCreated(blob: [1, 2, 3]), nowMillis: ownerTime)])
        func edit(_ writer: FeedWriter, _ i: Int) throws -> Event {
            let time = writer === owner ? ownerTime : strangerTime
            return i % 2 == 0
                ? try writer.sign(.pictureCaptioned, picture, Payload.caption("caption \(i)"), nowMillis: time)
                : try writer.sign(.pictureMoved, picture, Payload.position([UInt8(1 + i % 200)]), nowMillis: time)
        }
        for i in 0..<100 {
            try replica.deliver([try edit(stranger, i)])
            try replica.deliver([try edit(owner, i)])
            // A stranger's creation of the owner's id.
            if i % 10 == 0 {
                try replica.deliver([try stranger.sign(.pictureCreated, picture, Payload.pictureCreated(blob: [4]), nowMillis: strangerTime)])
            }
        }
        let junk = try edit(stranger, 0)
        let taken = try stranger.sign(.pictureCreated, picture, Payload.pictureCreated(blob: [5]), nowMillis: strangerTime)
        let caption = try edit(owner, 100)
        let move = try edit(owner, 101)
        try Self.expectNoFactsRead(replica, [junk, taken, caption, move], "the folds read the picture's earlier events")
        #expect(try replica.projections.noEffect(of: junk)?.code == "not_owner")
        #expect(try replica.projections.noEffect(of: taken)?.code == "foreign_id")
        #expect(try replica.projections.noEffect(of: caption) == nil && replica.projections.noEffect(of: move) == nil)
        guard case .live(let live) = try replica.projections.picture(PictureID(picture)) else {
            Issue.record("the picture is not live")
            return
        }
        #expect(live.caption == "caption 100")
        try Self.expectRebuildAgrees(replica)

        // Deleted (folded whole, once): later events are decided from the record.
        try replica.deliver([try owner.sign(.pictureDeleted, picture, [], nowMillis: ownerTime)])
        for i in 0..<50 {
            try replica.deliver([try edit(stranger, i)])
            try replica.deliver([try edit(owner, i)])
        }
        let late = try edit(owner, 1)
        let again = try owner.sign(.pictureDeleted, picture, [], nowMillis: ownerTime)
        try Self.expectNoFactsRead(replica, [late, again], "the folds read the deleted picture's earlier events")
        #expect(try replica.projections.noEffect(of: late)?.code == "after_deletion")
        #expect(try replica.projections.noEffect(of: again)?.code == "after_deletion")
        try Self.expectRebuildAgrees(replica)
    }

    @Test("a chat's membership events that change nothing read none of the chat's earlier events: strangers', a former member's, an admin's last")
    func chatMembership() throws {
        let replica = try Replica(config: NetworkConfig())
        let admin = FeedWriter(SigningKey.generate())
        let former = FeedWriter(SigningKey.generate())
        let stranger = FeedWriter(SigningKey.generate())
        let now = Replica.nowMillis - 10_000
        let chat = admin.createdID([UInt8](repeating: 0xCA, count: 16))
        let create = try admin.sign(.chatCreated, chat, Payload.chatCreated(members: [former.publicKey]), nowMillis: now)
        try replica.deliver([create])
        try replica.deliver([try admin.sign(.chatMemberRemoved, chat, Payload.member(former.publicKey), nowMillis: now)])
        let someone = SigningKey.generate().publicKey
        for i in 0..<100 {
            try replica.deliver([try stranger.sign(.chatMemberAdded, chat, Payload.member(stranger.publicKey, admin: true), nowMillis: now)])
            try replica.deliver([try former.sign(.chatMemberRemoved, chat, Payload.member(former.publicKey), nowMillis: now)])
            try replica.deliver([try stranger.sign(.chatMemberRemoved, chat, Payload.member(admin.publicKey), nowMillis: now)])
            if i % 10 == 0 { try replica.deliver([try stranger.sign(.chatCreated, chat, Payload.chatCreated(members: []), nowMillis: now)]) }
            if i % 10 == 5 { try replica.deliver([try admin.sign(.chatMemberRemoved, chat, Payload.member(someone), nowMillis: now)]) }
        }
        let add = try stranger.sign(.chatMemberAdded, chat, Payload.member(stranger.publicKey, admin: true), nowMillis: now)
        let remove = try stranger.sign(.chatMemberRemoved, chat, Payload.member(admin.publicKey), nowMillis: now)
        let leave = try former.sign(.chatMemberRemoved, chat, Payload.member(former.publicKey), nowMillis: now)
        let take = try stranger.sign(.chatCreated, chat, Payload.chatCreated(members: []), nowMillis: now)
        // The chat's last event: the stored state is the state at its place.
        let nobody = try admin.sign(.chatMemberRemoved, chat, Payload.member(someone), nowMillis: now + 1)
        // Stamped with the creation's HLC, which alone does not order it.
        let tied = try FeedWriter(SigningKey.generate()).sign(.chatMemberAdded, chat, Payload.member(someone), hlc: create.hlc)
        try Self.expectNoFactsRead(replica, [add, remove, leave, take, nobody, tied], "the folds read the chat's earlier events")
        #expect(try replica.projections.noEffect(of: add)?.code == "not_admin")
        #expect(try replica.projections.noEffect(of: remove)?.code == "not_admin")
        #expect(try replica.projections.noEffect(of: leave)?.code == "not_member")
        #expect(try replica.projections.noEffect(of: take)?.code == "foreign_id")
        #expect(try replica.projections.noEffect(of: nobody)?.code == "not_member")
        #expect(try replica.projections.noEffect(of: tied)?.code == (MergeOrder(tied) > MergeOrder(create) ? "not_admin" : "chat_unknown"))
        #expect(try replica.projections.membership(of: admin.publicKey, in: chat)?.isCurrent == true)
        try Self.expectRebuildAgrees(replica)
    }

    @Test("a device binding or removal that changes nothing reads none of the device's earlier events: strangers', later bindings with consent, removals after the removal")
    func deviceBindings() throws {
        let replica = try Replica(config: NetworkConfig())
        let user = FeedWriter(SigningKey.generate())
        let device = SigningKey.generate()
        let stranger = FeedWriter(SigningKey.generate())
        let now = Replica.nowMillis - 10_000
        func bind(_ by: FeedWriter, consent: Bool = true) throws -> Event {
            let payload = consent ? Payload.deviceAdded(device: device, user: by.publicKey) : []
            return try by.sign(.deviceAdded, device.publicKey, payload, nowMillis: now)
        }
        try replica.deliver([try user.sign(.deviceAdded, device.publicKey, Payload.deviceAdded(device: device, user: user.publicKey), nowMillis: now - 1)])
        for i in 0..<100 {
            try replica.deliver([try bind(stranger, consent: false)])
            try replica.deliver([try stranger.sign(.deviceRemoved, device.publicKey, [], nowMillis: now)])
            // The device consenting to another user, after its binding.
            if i % 10 == 0 { try replica.deliver([try bind(FeedWriter(SigningKey.generate()))]) }
        }
        let noConsent = try bind(stranger, consent: false)
        let another = try bind(FeedWriter(SigningKey.generate()))
        let notOwner = try stranger.sign(.deviceRemoved, device.publicKey, [], nowMillis: now)
        try Self.expectNoFactsRead(replica, [noConsent, another, notOwner], "the folds read the device's earlier events")
        #expect(try replica.projections.noEffect(of: noConsent)?.code == "already_bound")
        #expect(try replica.projections.noEffect(of: another)?.code == "already_bound")
        #expect(try replica.projections.noEffect(of: notOwner)?.code == "not_owner")
        // Removed (folded whole, once): later removals are decided from the binding.
        try replica.deliver([try user.sign(.deviceRemoved, device.publicKey, [], nowMillis: now)])
        let again = try user.sign(.deviceRemoved, device.publicKey, [], nowMillis: now)
        try Self.expectNoFactsRead(replica, [again], "the folds read the removed device's earlier events")
        let againReason = try replica.projections.noEffect(of: again)
        #expect(againReason?.code == "already_removed", "\(String(describing: againReason))")
        try Self.expectRebuildAgrees(replica)
    }
}
