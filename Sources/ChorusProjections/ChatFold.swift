import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusStorage

/// The reasons a chat's creation and membership events take no effect
/// (Specs/projections.md §6.5), one wording for the whole and the
/// one-at-a-time fold.
enum ChatRule {
    static func foreign(_ chat: ObjectID) -> NoEffect {
        NoEffect("foreign_id", "chat id \(chat.short) is not bound to the key that signed its creation")
    }
    static func exists(_ chat: ObjectID) -> NoEffect { NoEffect("chat_exists", "chat \(chat.short) was already created by an earlier event") }
    static func unknown(_ chat: ObjectID) -> NoEffect {
        NoEffect("chat_unknown", "this node holds no creation of chat \(chat.short) before this event")
    }
    static let notAdminToAdd = NoEffect("not_admin", "only an administrator of the chat may add members")
    static let notAdminToRemove = NoEffect("not_admin", "only an administrator may remove another member")
    static func notMember(_ user: PublicKey) -> NoEffect { NoEffect("not_member", "\(user.short) is not a member at this point") }
}

/// The reasons a message's edits and deletions take no effect
/// (Specs/projections.md §6.6), one wording for the whole and the
/// one-at-a-time fold.
enum MessageRule {
    static func unknown(_ message: EventID) -> NoEffect { NoEffect("message_unknown", "this node does not hold message \(message.short)") }
    static func noEffect(_ message: EventID) -> NoEffect { NoEffect("message_no_effect", "message \(message.short) took no effect") }
    static let notAuthor = NoEffect("not_author", "only the sender may edit or delete a message")
    static func wrongChat(_ chat: ObjectID) -> NoEffect { NoEffect("wrong_chat", "the message belongs to chat \(chat.short)") }
    static let afterDeletion = NoEffect("after_deletion", "the message was deleted before this event")
}

extension FoldRun {
    /// Chat creation and membership, replayed in merge order; admins add and
    /// remove members, anyone may leave (Specs/projections.md §6.5).
    /// Returns the users whose membership changed (empty when none did),
    /// each with the span of time where it did (nil when only `admin`
    /// changed): their messages in that span, and the chat's read markers
    /// and keys, are decided again.
    mutating func foldChat(_ chat: ObjectID) throws -> [PublicKey: (from: HLC, to: HLC?)?] {
        var created: (fact: Fact, creator: PublicKey)? = nil
        var members: [PublicKey: Membership] = [:]
        func join(_ user: PublicKey, admin: Bool, at hlc: HLC) {
            var m = members[user] ?? Membership(admin: admin, intervals: [])
            m.admin = admin
            if !m.isCurrent { m.intervals.append((hlc, nil)) }
            members[user] = m
        }
        let all = try facts(.chat, chat)
        let bound = CreatedID.isBoundToACreation(chat, all.lazy.filter { $0.kind == .chatCreated }.map(\.author))
        for f in all {
            guard let user = try actingUserOrRecord(f) else { continue }
            if f.kind == .chatCreated {
                guard !bound || CreatedID.isBound(chat, to: f.author) else {
                    try decide(f, ChatRule.foreign(chat))
                    continue
                }
                if created != nil {
                    try decide(f, ChatRule.exists(chat))
                    continue
                }
                created = (f, user)
                join(user, admin: true, at: f.hlc)
                for m in f.readIfHeld(ChatCreatedPayload.self)?.members ?? [] where m != user {
                    join(m, admin: false, at: f.hlc)
                }
                try decide(f, nil)
                continue
            }
            guard created != nil else {
                try decide(f, ChatRule.unknown(chat))
                continue
            }
            let target: PublicKey
            var admin = false
            switch f.kind {
            case .chatMemberAdded:
                let added = try f.read(ChatMemberAddedPayload.self)
                (target, admin) = (added.user, added.admin)
            case .chatMemberRemoved: target = try f.read(ChatMemberRemovedPayload.self).user
            default: throw ProjectionError.corrupt("\(f.kind.name) filed as a membership fact")
            }
            let isAdmin = members[user].map { $0.isCurrent && $0.admin } ?? false
            switch f.kind {
            case .chatMemberAdded:
                guard isAdmin else {
                    try decide(f, ChatRule.notAdminToAdd)
                    continue
                }
                join(target, admin: admin, at: f.hlc)
            case .chatMemberRemoved:
                guard isAdmin || target == user else {
                    try decide(f, ChatRule.notAdminToRemove)
                    continue
                }
                guard var m = members[target], m.isCurrent, let last = m.intervals.indices.last else {
                    try decide(f, ChatRule.notMember(target))
                    continue
                }
                m.intervals[last].to = f.hlc
                members[target] = m
            default:
                throw ProjectionError.corrupt("\(f.kind.name) filed as a chat fact")
            }
            try decide(f, nil)
        }

        let chatKey = Table.chat.key(chat)
        let oldRecord = bulk ? nil : try txn.get(p.state, chatKey)
        let newRecord = created.map { created in
            ChatRecord(
                creator: created.creator, hlc: created.fact.hlc, createdBy: created.fact.id,
                title: created.fact.readIfHeld(ChatCreatedPayload.self)?.title
            ).encoded()
        }
        if newRecord != oldRecord {
            if let newRecord { try putState(chatKey, newRecord) } else { try deleteState(chatKey) }
            // Every member's entry shows the creation (its last activity, §7).
            chatActivityChanged(chat)
        }
        // A bulk fold writes into empty state: no member is stored yet.
        var old: [PublicKey: [UInt8]] = [:]
        if !bulk {
            try txn.scan(p.state, prefix: Table.member.key(chat)) { key, value in
                old[try Codec.b32(key[33...], "member")] = value
                return true
            }
        }
        var changed: [PublicKey: (from: HLC, to: HLC?)?] = [:]
        for (user, m) in members {
            let stored = old.removeValue(forKey: user)
            guard stored != m.encoded() else { continue }
            let before = try stored.map(Membership.decode)
            changed[user] = Membership.disagreement(before, m)
            try replaceMembership(of: user, in: chat, before, with: m)
        }
        for (user, value) in old {
            let before = try Membership.decode(value)
            changed[user] = Membership.disagreement(before, nil)
            try replaceMembership(of: user, in: chat, before, with: nil)
        }
        // The row lists the members; a joining member's entry is made, a
        // leaving one's removed, at the write's end. The others' entries
        // stay: their counts change only with the messages that take or
        // lose effect, whose folds note it (§9.1).
        if !changed.isEmpty { chatRowChanged(chat) }
        return changed
    }

    /// Folds one new membership event of `chat` from the chat's record and
    /// its actor's (and target's) stored membership alone where they decide
    /// it, as the whole fold would (Specs/projections.md §9.1): an event
    /// before the creation, or by a user who is not a member at its HLC, or
    /// (when it is the chat's last event in merge order, so the stored
    /// state is the state at its place) by a member who is not an
    /// administrator, or removing someone who is not a member. False when
    /// the chat must be folded whole: a creation that may take effect, an
    /// event that may change a membership, an HLC equal to a bound of the
    /// user's membership intervals.
    mutating func foldChatFact(_ chat: ObjectID, _ f: Fact) throws -> Bool {
        guard let raw = try txn.get(p.state, Table.chat.key(chat)) else {
            // No creation took effect, so any other event comes before one.
            guard f.kind != .chatCreated else { return false }
            guard try actingUserOrRecord(f) != nil else { return true }
            try decide(f, ChatRule.unknown(chat))
            return true
        }
        let record = try ChatRecord.decode(raw)
        if f.kind == .chatCreated {
            return try foldLaterCreation(f, of: chat, effective: try creationOrder(chat, record), foreign: ChatRule.foreign, exists: ChatRule.exists)
        }
        guard let user = try actingUserOrRecord(f) else { return true }
        // The HLC orders the event against the creation unless equal: anyone
        // may stamp an event with the creation's HLC.
        let afterCreation = f.hlc == record.hlc ? f.order > (try creationOrder(chat, record)) : f.hlc > record.hlc
        guard afterCreation else {
            try decide(f, ChatRule.unknown(chat))
            return true
        }
        var added: ChatMemberAddedPayload? = nil
        let target: PublicKey
        if f.kind == .chatMemberAdded {
            let payload = try f.read(ChatMemberAddedPayload.self)
            (added, target) = (payload, payload.user)
        } else {
            target = try f.read(ChatMemberRemovedPayload.self).user
        }
        let actor = try membership(chat, user)
        guard let actorIsMember = actor.map({ Self.isMember($0, atPlaceOf: f) }) ?? false else { return false }
        // The stored state is the state at the event's place only when
        // nothing is merged after it: then whether the actor is an
        // administrator is known, and an event that takes effect is applied
        // to the stored memberships as the whole fold would apply it.
        let last = try !p.hasFact(after: f.order, of: .chat, chat, in: txn)
        let actorIsAdmin: Bool? = !actorIsMember ? false : last ? actor?.admin ?? false : nil
        switch f.kind {
        case .chatMemberAdded:
            guard let actorIsAdmin else { return false }
            guard actorIsAdmin else {
                try decide(f, ChatRule.notAdminToAdd)
                return true
            }
            return try applyMembership(chat, f, of: target, joiningAsAdmin: added?.admin ?? false)
        case .chatMemberRemoved:
            if target == user {
                guard actorIsMember else {
                    try decide(f, ChatRule.notMember(target))
                    return true
                }
                return last ? try applyMembership(chat, f, of: target, joiningAsAdmin: nil) : false
            }
            guard let actorIsAdmin else { return false }
            guard actorIsAdmin else {
                try decide(f, ChatRule.notAdminToRemove)
                return true
            }
            let removed = try membership(chat, target)
            guard let targetIsMember = removed.map({ Self.isMember($0, atPlaceOf: f) }) ?? false else { return false }
            guard targetIsMember else {
                try decide(f, ChatRule.notMember(target))
                return true
            }
            return last ? try applyMembership(chat, f, of: target, joiningAsAdmin: nil) : false
        default:
            throw ProjectionError.corrupt("\(f.kind.name) filed as a membership fact")
        }
    }

    /// Applies an effective addition (`joiningAsAdmin`: the payload's
    /// `admin`) or removal of `target`, the chat's last membership event in
    /// merge order, to the stored memberships, as `foldChat` would from all
    /// of the chat's facts; false (fold whole) when the target's stored
    /// intervals start or end at its HLC, which alone does not order them.
    mutating func applyMembership(_ chat: ObjectID, _ f: Fact, of target: PublicKey, joiningAsAdmin admin: Bool?) throws -> Bool {
        let before = try membership(chat, target)
        if let before, before.intervals.contains(where: { $0.from == f.hlc || $0.to == f.hlc }) { return false }
        var m = before ?? Membership(admin: admin ?? false, intervals: [])
        if let admin {
            m.admin = admin
            if !m.isCurrent { m.intervals.append((f.hlc, nil)) }
        } else {
            guard m.isCurrent, let last = m.intervals.indices.last else {
                try decide(f, ChatRule.notMember(target))
                return true
            }
            m.intervals[last].to = f.hlc
        }
        try decide(f, nil)
        guard m != before else { return true }
        try replaceMembership(of: target, in: chat, before, with: m)
        chatRowChanged(chat)
        try membershipsChanged(in: chat, [target: Membership.disagreement(before, m)], existenceChanged: false)
        return true
    }

    /// Stores `user`'s membership of `chat` (nil: none) in place of
    /// `before`, with what follows from whether it is current: the
    /// `userChat` entry, and the member's chat-list entry (§9.1) removed
    /// when they leave (a joining member's is made at the write's end).
    mutating func replaceMembership(of user: PublicKey, in chat: ObjectID, _ before: Membership?, with after: Membership?) throws {
        if let after {
            try putIndex(IndexTable.memberOf.key(user, chat), [])
            try putState(Table.member.key(chat, user), after.encoded())
        } else {
            try txn.delete(p.state, Table.member.key(chat, user))
        }
        let (was, now) = (before?.isCurrent == true, after?.isCurrent == true)
        if now, !was { try putState(Table.userChat.key(user, chat), []) }
        if was, !now {
            try txn.delete(p.state, Table.userChat.key(user, chat))
            _ = try txn.delete(p.index, IndexTable.chatActivity.key(user, chat))
        }
    }

    /// The merge order of the chat's effective creation: the record names its
    /// HLC and id, the log its author.
    func creationOrder(_ chat: ObjectID, _ record: ChatRecord) throws -> MergeOrder {
        guard let creating = try p.log.readEvent(record.createdBy, in: txn)?.event else {
            throw ProjectionError.corrupt("chat \(chat.short) created by an event the log does not hold")
        }
        return MergeOrder(creating)
    }

    /// Whether `m`'s user is a member at the place of `f` in the chat's
    /// merge order; nil when an interval starts or ends at `f`'s HLC, where
    /// the HLC alone does not say which comes first.
    static func isMember(_ m: Membership, atPlaceOf f: Fact) -> Bool? {
        guard !m.intervals.contains(where: { $0.from == f.hlc || $0.to == f.hlc }) else { return nil }
        return m.isMember(at: f.hlc)
    }

    func membership(_ chat: ObjectID, _ user: PublicKey) throws -> Membership? {
        try txn.get(p.state, Table.member.key(chat, user)).map(Membership.decode)
    }

    /// A message: it takes effect when its sender was a member at its HLC;
    /// edits and deletion by the sender; deletion final and purging
    /// (Specs/projections.md §6.6).
    ///
    /// `held` is the send as a bulk fold's list gives it (§9.2): its fact,
    /// without its payload, and what the fold reads of that payload.
    mutating func foldMessage(_ message: EventID, held: (fact: Fact, content: SentContent)? = nil) throws {
        let (sentFact, edits, all) = try messageFacts(message, sent: held?.fact)
        guard let sent = sentFact else {
            for f in edits {
                try decide(f, MessageRule.unknown(message))
            }
            return
        }
        let chat = sent.object
        let key = Table.message.key(chat, Codec.u64(sent.hlc.rawValue), message)
        let content = held?.content ?? SentContent(payload: sent.payload)
        let attachment = content.attachment
        // The entry this key holds now: a bulk fold (§9.2) writes each
        // message's entry once, and a send first stored in this
        // transaction has none yet.
        let existing: [UInt8]? = bulk || newEvents.contains(message) ? nil : try txn.get(p.state, key)
        let wasEffective = try existing.map { try !MessageEntry.isWithdrawn($0) } ?? false
        let wasPurged = try existing.map { raw in try raw.withUnsafeBytes { try MessageEntry.isPurged($0) } } ?? false
        func store(_ entry: MessageEntry) throws {
            let value = entry.encoded()
            if value != existing {
                try putState(key, value)
                chatRowChanged(chat)
            }
            try setPayloadGap(.message, message, was: wasPurged, now: entry.purged)
            // What members' chat lists show (§9.1): a new message adds to
            // the counts of those who read before it; one that takes or
            // loses effect, or is deleted, has every count found again.
            let counts = !entry.withdrawn && entry.deleted == nil
            if let existing {
                let wasDeleted = try MessageEntry.isDeleted(existing)
                if wasEffective == entry.withdrawn || wasDeleted != (entry.deleted != nil) { chatActivityChanged(chat) }
            } else {
                messageAdded(message, in: chat, key: key, device: entry.device, counts: counts)
            }
        }
        func withdraw(_ why: NoEffect) throws {
            // The send's reason is kept in its entry (§9.1), not under its own key.
            for f in all where f.id != sent.id {
                try decide(f, MessageRule.noEffect(message))
            }
            // Every held send keeps an entry, withdrawn when it takes no
            // effect: the chat's messages are listed from these entries
            // (Specs/projections.md §9.1).
            if wasEffective { countMessage(in: chat, by: -1) }
            try store(MessageEntry(withdrawnBy: sent.author, sent: sent.arrival, reason: why))
            try setBlobReference(attachment, of: message, live: false)
        }
        let sender: PublicKey
        switch try actor(sent) {
        case .failure(let why): return try withdraw(why)
        case .success(let u): sender = u
        }
        guard try membershipForMessage(chat, sender)?.isMember(at: sent.hlc) == true else {
            return try withdraw(NoEffect("not_member", "\(sender.short) was not a member of chat \(chat.short) when sending"))
        }
        var edit: Fact? = nil
        var deleted: Fact? = nil
        for f in all where f.id != sent.id {
            switch try actor(f) {
            case .failure(let why):
                try decide(f, why)
                continue
            case .success(let user) where user != sender:
                try decide(f, MessageRule.notAuthor)
                continue
            case .success: break
            }
            if let named = Self.namedChat(f), named != chat {
                try decide(f, MessageRule.wrongChat(chat))
                continue
            }
            if deleted != nil {
                try decide(f, MessageRule.afterDeletion)
                continue
            }
            if f.kind == .messageDeleted { deleted = f } else { edit = f }
            try decide(f, nil)
        }
        // The stored entry names the events whose payloads hold the content
        // instead of copying it (Specs/projections.md §9.1);
        // `MessageRecord.live` decides the content, here and when the
        // entry is read.
        var entry = MessageEntry(device: sent.author, sent: sent.arrival)
        if let deleted {
            entry.deleted = deleted.hlc
            if purging {
                try purgeContent(ofMessage: message, all)
            } else if bulk {
                // As `purgeContent`, from what the bulk fold holds: its send
                // comes without its payload, which `content` says is held.
                for f in all where f.kind.payloadIsPurgeable && (f.payload != nil || (f.id == sent.id && content.held)) {
                    deletedInBulk.messagePurges.payloads.append(f.arrival)
                }
                if let attachment { deletedInBulk.messagePurges.blobs.append(attachment) }
            }
        } else if content.held {
            if let edit { entry.edit = (edit.arrival, edit.hlc, edit.author) }
        } else {
            entry.purged = true
        }
        try setBlobReference(attachment, of: message, live: deleted == nil)
        if !wasEffective { countMessage(in: chat, by: 1) }
        try store(entry)
    }

    /// Folds one new edit or deletion of `message` into its stored entry
    /// when that gives the state and decisions `foldMessage` gives from all
    /// the message's facts (Specs/projections.md §9.1); returns false when
    /// the message must be folded whole (a deletion by its sender, or an edit
    /// whose order against the stored one its HLC and author do not settle).
    /// Whether an edit or deletion takes effect depends on its own actor and
    /// chat, the sender and the deletion alone, so one by anyone else, or on
    /// a message that took no effect, is decided without reading the
    /// message's other facts: otherwise anyone could make each event naming a
    /// message cost every node more than the last.
    mutating func foldMessageFact(_ message: EventID, _ f: Fact) throws -> Bool {
        guard let stored = try p.sentEvent(message, in: txn) else {
            try decide(f, MessageRule.unknown(message))
            return true
        }
        let sent = Fact(stored)
        let chat = sent.object
        let key = Table.message.key(chat, Codec.u64(sent.hlc.rawValue), message)
        guard let raw = try txn.get(p.state, key) else { return false }
        var entry = try MessageEntry.decode(raw)
        if entry.withdrawn {
            try decide(f, MessageRule.noEffect(message))
            return true
        }
        guard case .success(let sender) = try actor(sent) else { return false }
        // A deleted message's facts are purged with it, whatever their decision.
        func decideOnDeleted(_ reason: NoEffect?) throws {
            try decide(f, reason)
            if entry.deleted != nil, purging { purge(f) }
        }
        switch try actor(f) {
        case .failure(let why): try decideOnDeleted(why); return true
        case .success(let user) where user != sender:
            try decideOnDeleted(MessageRule.notAuthor)
            return true
        case .success: break
        }
        if let named = Self.namedChat(f), named != chat {
            try decideOnDeleted(MessageRule.wrongChat(chat))
            return true
        }
        if let deletedAt = entry.deleted {
            guard f.hlc != deletedAt else { return false }
            if f.hlc > deletedAt {
                try decideOnDeleted(MessageRule.afterDeletion)
                return true
            }
            // Before the deletion: an edit takes effect (and is purged with
            // the message); an earlier deletion becomes the deletion.
            guard f.kind == .messageEdited else { return false }
            try decideOnDeleted(nil)
            return true
        }
        guard f.kind == .messageEdited else { return false }
        try decide(f, nil)
        // The entry shows the last effective edit in merge order, unless the
        // send's content is purged.
        guard !entry.purged else { return true }
        if let current = entry.edit {
            guard f.hlc != current.hlc || f.author != current.author else { return false }
            guard (f.hlc, f.author) > (current.hlc, current.author) else { return true }
        }
        entry.edit = (f.arrival, f.hlc, f.author)
        try putState(key, entry.encoded())
        chatRowChanged(chat)
        return true
    }

    /// The `blobRef` entry of a message's encrypted picture (Specs/
    /// encryption.md §7): present exactly while the message is live.
    mutating func setBlobReference(_ blob: Hash32?, of message: EventID, live: Bool) throws {
        guard let blob else { return }
        let key = Table.blobRef.key(blob, message)
        if live {
            try putState(key, [])
            try blobReferenced(blob)
        } else {
            try deleteState(key)
            try blobUnreferenced(blob)
        }
    }

    /// The chat an edit or a deletion names in its payload (nil when the
    /// payload is purged here).
    static func namedChat(_ f: Fact) -> ObjectID? {
        switch f.kind {
        case .messageEdited: f.readIfHeld(MessageEditedPayload.self)?.chat
        case .messageDeleted: f.readIfHeld(MessageDeletedPayload.self)?.chat
        default: nil
        }
    }

    /// Purges a deleted message's payloads and its encrypted picture, unless a
    /// live object still references the same bytes.
    mutating func purgeContent(ofMessage message: EventID, _ all: [Fact]) throws {
        let blob = all.first { $0.kind == .messageSent && $0.id == message }?.readIfHeld(MessageSentPayload.self)?.blob
        if let blob {
            try txn.delete(p.state, Table.blobRef.key(blob, message))
            try blobUnreferenced(blob)
        }
        for f in all { purge(f) }
        if let blob { purges.blobs.append(blob) }
    }

    /// Keeps the number of effective messages per chat, so listing chats
    /// never counts messages one by one; `writeMessageCounts` stores it.
    mutating func countMessage(in chat: ObjectID, by delta: Int) {
        messageCountDeltas[chat, default: 0] += delta
    }

    mutating func writeMessageCounts() throws {
        for (chat, delta) in messageCountDeltas.sorted(by: { $0.key < $1.key }) where delta != 0 {
            let key = Table.messageCount.key(chat)
            let current = try txn.get(p.state, key).map { Codec.readU64($0[...]) } ?? 0
            let next = delta < 0 ? current - min(current, UInt64(-delta)) : current + UInt64(delta)
            if next == 0 { try txn.delete(p.state, key) } else { try txn.put(p.state, key, Codec.u64(next)) }
        }
        messageCountDeltas.removeAll()
    }

    /// `membership`, remembered for the rest of the run (messages only).
    mutating func membershipForMessage(_ chat: ObjectID, _ user: PublicKey) throws -> Membership? {
        let key = MemberKey(chat: chat, user: user)
        if let cached = membershipsForMessages[key] { return cached }
        let m = try membership(chat, user)
        membershipsForMessages[key] = .some(m)
        return m
    }

    /// Read markers: per member, the furthest position read while a member;
    /// never moves backwards (Specs/projections.md §6.7).
    ///
    /// With `only`, folds just the facts `refolds` takes in and rewrites
    /// only the markers of `only.users`. Exact, because a member's marker
    /// and its decisions read only that member's facts and membership (§9.1).
    mutating func foldReads(_ chat: ObjectID, only: (users: Set<PublicKey>, new: Set<EventID>)? = nil) throws {
        // The counts of those whose markers may move (§9.1).
        if let only { for user in only.users { unreadChanged(in: chat, for: user) } } else { chatActivityChanged(chat) }
        var markers: [PublicKey: (hlc: UInt64, message: EventID)] = [:]
        for var f in try facts(.reads, chat, payloadNeeded: { _ in only == nil }) {
            if let only {
                guard refolds(f, actor: try actingUser(f.author, at: f.hlc), only: only) else { continue }
                f = try withPayload(f)
            }
            guard let user = try actingUserOrRecord(f) else { continue }
            guard try membership(chat, user)?.isMember(at: f.hlc) == true else {
                try decide(f, NoEffect("not_member", "\(user.short) was not a member of chat \(chat.short) then"))
                continue
            }
            let marker = try f.read(ChatReadPayload.self)
            let (hlc, message) = (marker.hlc, marker.message)
            // Never backwards: the marker is the furthest (hlc, message) read.
            if let current = markers[user], !(current.hlc < hlc || (current.hlc == hlc && current.message < message)) {
                try decide(f, nil)
                continue
            }
            markers[user] = (hlc, message)
            try decide(f, nil)
        }
        func encoded(_ m: (hlc: UInt64, message: EventID)) -> [UInt8] { ReadMarker.encoded(hlc: m.hlc, message: m.message) }
        if let only {
            for user in only.users {
                let key = Table.read.key(chat, user)
                let value = markers[user].map(encoded)
                guard try txn.get(p.state, key) != value else { continue }
                if let value { try txn.put(p.state, key, value) } else { try txn.delete(p.state, key) }
            }
            return
        }
        var entries: [StateKey: [UInt8]] = [:]
        for (user, m) in markers { entries[StateKey(Table.read.key(chat, user))] = encoded(m) }
        try replace(prefix: Table.read.key(chat), with: entries)
    }
}

extension FoldRun {
    /// Folds one new read marker into the stored one, with the same result
    /// and decision as `foldReads` from all of the chat's markers: the marker
    /// is the furthest effective read, so it only ever moves forward.
    mutating func foldReadFact(_ chat: ObjectID, _ f: Fact) throws {
        guard let user = try actingUserOrRecord(f) else { return }
        guard try membership(chat, user)?.isMember(at: f.hlc) == true else {
            return try decide(f, NoEffect("not_member", "\(user.short) was not a member of chat \(chat.short) then"))
        }
        unreadChanged(in: chat, for: user)
        let marker = try f.read(ChatReadPayload.self)
        let (hlc, message) = (marker.hlc, marker.message)
        let key = Table.read.key(chat, user)
        var forward = true
        if let raw = try txn.get(p.state, key) {
            let current = try ReadMarker.decode(raw)
            forward = current.hlc.rawValue < hlc || (current.hlc.rawValue == hlc && current.message.raw < message)
        }
        if forward { try txn.put(p.state, key, ReadMarker.encoded(hlc: hlc, message: message)) }
        try decide(f, nil)
    }
}
