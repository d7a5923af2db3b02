import ChorusCrypto
import ChorusEvents
import ChorusParallel
import ChorusStorage
import Foundation

/// A chat's last activity as its members' chat lists sort by it
/// (Specs/projections.md §7): the last message that took effect (deleted
/// ones included) or, without one, the chat's creation. The folds keep it
/// in `index` for every current member (`IndexTable.chatActivity`, §9.1),
/// so a chat list orders a user's chats from one scan of that user's
/// entries instead of a record lookup and a message seek per chat.
struct ChatActivity: Equatable {
    /// The last message's key in the chat's `message` entries and the
    /// device that sent it (what a viewer's block list is checked against).
    struct Last: Equatable {
        let hlc: HLC
        let message: EventID
        let device: PublicKey
    }

    /// The last message's HLC, or the creation's when it has none or that is later.
    let activity: HLC
    let last: Last?

    /// A member's entry: u64be(activity), then for a chat with messages
    /// u64be(last hlc) ‖ message id ‖ sending device, then u8(unread): the
    /// member's unread count, at most `ChatSummary.unreadLimit`.
    func encoded(unread: Int) -> [UInt8] {
        var out = Codec.u64(activity.rawValue)
        if let last {
            out.reserveCapacity(8 + 8 + 32 + 32 + 1)
            out += Codec.u64(last.hlc.rawValue)
            last.message.append(to: &out)
            last.device.append(to: &out)
        }
        out.append(UInt8(clamping: min(max(0, unread), ChatSummary.unreadLimit)))
        return out
    }

    /// Where a chat's last message is in its `message` entries.
    struct LastKey {
        let hlc: HLC
        let message: EventID

        /// A stored entry's activity, last message key and unread count,
        /// read in place (the sending device, bytes 48..<80, is read where
        /// it is needed); nil for an entry of another length.
        static func read(_ raw: UnsafeRawBufferPointer) -> (activity: HLC, last: LastKey?, unread: Int)? {
            guard raw.count == 9 || raw.count == 81 else { return nil }
            let activity = HLC(rawValue: UInt64(bigEndian: raw.loadUnaligned(as: UInt64.self)))
            let unread = Int(raw[raw.count - 1])
            guard raw.count == 81, let message = Bytes32(UnsafeRawBufferPointer(rebasing: raw[16..<48])) else { return (activity, nil, unread) }
            let hlc = HLC(rawValue: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
            return (activity, LastKey(hlc: hlc, message: message), unread)
        }
    }
}

/// Each member's view of whose messages count as unread for them (their
/// own devices and those of users they block do not), found once per
/// user for a write or a part of a rebuild: blocks and bindings are final
/// by the time the entries are written.
struct UnreadFilters {
    private var senders: Senders
    private var filters: [PublicKey: SenderFilter] = [:]

    init(state: Database) { senders = Senders(state: state) }

    mutating func filter(for user: PublicKey, in txn: Transaction, _ p: Projections) throws -> SenderFilter {
        if let f = filters[user] { return f }
        let f = try SenderFilter(
            viewer: user, blocked: Set(try p.targets(.block, of: user, in: txn)), senders: &senders, state: p.state, in: txn)
        filters[user] = f
        return f
    }
}

extension Projections {
    /// A chat's activity from its state, the long way: its creation and a
    /// step back from its newest `message` entry past withdrawn ones and
    /// those whose sending device `skipping` names (a viewer's blocks).
    /// Nil when this node holds no creation of the chat.
    func chatActivity(
        of chat: ObjectID, in txn: Transaction, skipping: (PublicKey) -> Bool = { _ in false }
    ) throws -> ChatActivity? {
        guard let created = try createdHLC(of: chat, in: txn) else { return nil }
        var last: ChatActivity.Last? = nil
        try txn.scanBackward(state, prefix: Table.message.key(chat)) { key, value in
            if try MessageEntry.isWithdrawn(value) { return true }
            let device = try MessageEntry.send(of: value).device
            if skipping(device) { return true }
            last = ChatActivity.Last(
                hlc: HLC(rawValue: Codec.readU64(key.dropLast(32).suffix(8))), message: try Codec.b32(key.suffix(32), "message id"),
                device: device)
            return false
        }
        return ChatActivity(activity: max(last?.hlc ?? created, created), last: last)
    }

    /// `chat`'s members, each with whether the membership is current.
    func members(of chat: ObjectID, in txn: Transaction) throws -> [(user: PublicKey, current: Bool)] {
        var members: [(user: PublicKey, current: Bool)] = []
        try txn.scan(state, prefix: Table.member.key(chat)) { key, value in
            members.append((try Codec.b32(key[33...], "member"), try Membership.decode(value).isCurrent))
            return true
        }
        return members
    }

    /// `chat`'s entries for its current members, for a rebuild (nothing to remove).
    func chatActivityEntries(of chat: ObjectID, into out: inout SortedEntries, filters: inout UnreadFilters, in txn: Transaction) throws {
        guard let activity = try chatActivity(of: chat, in: txn) else { return }
        for (user, current) in try members(of: chat, in: txn) where current {
            out.add(IndexTable.chatActivity.key(user, chat), try chatActivityEntry(activity, of: chat, for: user, filters: &filters, in: txn))
        }
    }

    /// A current member's entry: the chat's activity and the member's unread count.
    func chatActivityEntry(
        _ activity: ChatActivity, of chat: ObjectID, for user: PublicKey, filters: inout UnreadFilters, in txn: Transaction
    ) throws -> [UInt8] {
        activity.encoded(unread: try unreadCount(in: chat, for: try filters.filter(for: user, in: txn, self), in: txn).unread)
    }

    /// Writes `chat`'s entry for each of its current members and removes
    /// it for each former one (§9.1): what a write calls once for each chat
    /// whose membership, messages, read markers or members' blocks it
    /// changed. An entry already equal is left alone, so members' chat
    /// lists are not told of a change that is not one.
    func writeChatActivity(of chat: ObjectID, filters: inout UnreadFilters, in txn: Transaction) throws {
        let activity = try chatActivity(of: chat, in: txn)
        for (user, current) in try members(of: chat, in: txn) {
            let key = IndexTable.chatActivity.key(user, chat)
            if current, let activity {
                let value = try chatActivityEntry(activity, of: chat, for: user, filters: &filters, in: txn)
                if try txn.get(index, key) != value { try txn.put(index, key, value) }
            } else {
                _ = try txn.delete(index, key)
            }
        }
    }

    /// Writes every chat's activity for its current members: the end of a
    /// rebuild (§9.2), once memberships and messages are folded and
    /// committed. The entries are found on all cores, each part of the
    /// chats in a read transaction of its own, and written in key order in
    /// one write.
    func writeEveryChatActivity() throws {
        let chats: [ObjectID] = try log.env.read { txn in
            var chats: [ObjectID] = []
            try txn.scanInPlace(state, prefix: [Table.chat.rawValue]) { key, _ in
                chats.append(try Codec.b32(UnsafeRawBufferPointer(rebasing: key[1...]), "chat id"))
                return true
            }
            return chats
        }
        guard !chats.isEmpty else { return }
        let parts = min(chats.count, 4 * ProcessInfo.processInfo.activeProcessorCount)
        let size = (chats.count + parts - 1) / parts
        let ranges = stride(from: 0, to: chats.count, by: size).map { $0..<min(chats.count, $0 + size) }
        let runs = try parallelMap(ranges, chunk: 1) { range in
            Result {
                try log.env.read { txn in
                    var out = SortedEntries()
                    var filters = UnreadFilters(state: state)
                    for chat in chats[range] { try chatActivityEntries(of: chat, into: &out, filters: &filters, in: txn) }
                    out.sort()
                    return out
                }
            }
        }.map { try $0.get() }
        try SortedEntries.writeMerged(runs, to: index, in: log.env, append: false)
    }
}

extension FoldRun {
    /// Notes that `chat`'s entries may have changed in this run (a message
    /// took, lost or changed effect, a membership or a read marker
    /// changed), to be written once at its end (`writeChatActivity`). A
    /// bulk fold skips it: the rebuild writes every chat's at its end.
    mutating func chatActivityChanged(_ chat: ObjectID) {
        if !bulk { chatsWithNewActivity.insert(chat) }
    }

    /// Notes that `user` started or stopped blocking someone: the unread
    /// counts of every chat they are in may change.
    mutating func blocksChanged(of user: PublicKey) {
        if !bulk { blockersChanged.insert(user) }
    }

    /// Writes the entries of every chat this run noted.
    mutating func writeChatActivity() throws {
        var chatsOfBlockers: [ObjectID] = []
        for user in blockersChanged {
            try txn.scan(p.index, prefix: IndexTable.chatActivity.key(user)) { key, _ in
                chatsOfBlockers.append(try Codec.b32(key.suffix(32), "chat id"))
                return true
            }
        }
        chatsWithNewActivity.formUnion(chatsOfBlockers)
        blockersChanged.removeAll()
        var filters = UnreadFilters(state: p.state)
        for chat in chatsWithNewActivity.sorted() { try p.writeChatActivity(of: chat, filters: &filters, in: txn) }
        chatsWithNewActivity.removeAll()
    }
}
