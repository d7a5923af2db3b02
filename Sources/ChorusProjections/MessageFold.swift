import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusStorage

// Messages and read markers of chats (Specs/projections.md §6.6, §6.7);
// chat creation and membership are in ChatFold.swift.

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
