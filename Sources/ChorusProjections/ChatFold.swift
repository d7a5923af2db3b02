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
}
