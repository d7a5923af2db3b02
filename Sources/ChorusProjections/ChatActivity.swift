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
    /// member's unread count, at most `ChatSummary.unreadLimit`, then for a
    /// member who marked messages read their read marker as u64be(hlc) ‖
    /// message id.
    func encoded(unread: Int, marker: ReadMarker?) -> [UInt8] {
        var out = Codec.u64(activity.rawValue)
        out.reserveCapacity(8 + 8 + 32 + 32 + 1 + 40)
        if let last {
            out += Codec.u64(last.hlc.rawValue)
            last.message.append(to: &out)
            last.device.append(to: &out)
        }
        out.append(UInt8(clamping: min(max(0, unread), ChatSummary.unreadLimit)))
        if let marker {
            out += Codec.u64(marker.hlc.rawValue)
            marker.message.raw.append(to: &out)
        }
        return out
    }

    /// Where a chat's last message is in its `message` entries.
    struct LastKey {
        let hlc: HLC
        let message: EventID

        /// A stored entry's activity, last message key, unread count and
        /// read marker, read in place (the sending device, bytes 48..<80,
        /// is read where it is needed); nil for an entry of another length.
        static func read(_ raw: UnsafeRawBufferPointer) -> (activity: HLC, last: LastKey?, unread: Int, marker: ReadMarker?)? {
            let hasLast = raw.count == 81 || raw.count == 121
            guard hasLast || raw.count == 9 || raw.count == 49 else { return nil }
            let activity = HLC(rawValue: UInt64(bigEndian: raw.loadUnaligned(as: UInt64.self)))
            let end = hasLast ? 80 : 8
            let unread = Int(raw[end])
            var marker: ReadMarker? = nil
            if raw.count == end + 41, let id = Bytes32(UnsafeRawBufferPointer(rebasing: raw[(end + 9)...])) {
                let hlc = HLC(rawValue: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: end + 1, as: UInt64.self)))
                marker = ReadMarker(message: MessageID(id), hlc: hlc)
            }
            guard hasLast, let message = Bytes32(UnsafeRawBufferPointer(rebasing: raw[16..<48])) else { return (activity, nil, unread, marker) }
            let hlc = HLC(rawValue: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
            return (activity, LastKey(hlc: hlc, message: message), unread, marker)
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

    /// `chat`'s entries for its current members and its row, for a
    /// rebuild (nothing to remove).
    func chatActivityEntries(of chat: ObjectID, into out: inout SortedEntries, filters: inout UnreadFilters, in txn: Transaction) throws {
        guard let activity = try chatActivity(of: chat, in: txn) else { return }
        if let row = try chatRow(of: chat, activity: activity, in: txn) { out.add(IndexTable.chatRow.key(chat), row.encoded()) }
        for (user, current) in try members(of: chat, in: txn) where current {
            out.add(IndexTable.chatActivity.key(user, chat), try chatActivityEntry(activity, of: chat, for: user, filters: &filters, in: txn))
        }
    }

    /// A current member's entry: the chat's activity and the member's unread count.
    func chatActivityEntry(
        _ activity: ChatActivity, of chat: ObjectID, for user: PublicKey, filters: inout UnreadFilters, in txn: Transaction
    ) throws -> [UInt8] {
        let (unread, marker) = try unreadCount(in: chat, for: try filters.filter(for: user, in: txn, self), in: txn)
        return activity.encoded(unread: unread, marker: marker)
    }

    /// Writes `chat`'s entry for each of its current members and removes
    /// it for each former one (§9.1): what a write calls once for each chat
    /// it noted (`ChatActivityChanges`). A member's unread count is found
    /// again from their read marker when `changes` says so; otherwise the
    /// stored count grows by the messages this write added that count for
    /// them (a step per unread message would cost every member of a chat a
    /// walk for each new message). An entry already equal is left alone, so
    /// members' chat lists are not told of a change that is not one.
    func writeChatActivity(
        of chat: ObjectID, _ changes: ChatActivityChanges.OfChat, filters: inout UnreadFilters, in txn: Transaction
    ) throws {
        let activity = try chatActivity(of: chat, in: txn)
        if changes.row { try writeChatRow(of: chat, activity: activity, in: txn) }
        let added = changes.added
        for (user, current) in try members(of: chat, in: txn) {
            let key = IndexTable.chatActivity.key(user, chat)
            guard current, let activity else {
                _ = try txn.delete(index, key)
                continue
            }
            let old = try txn.get(index, key)
            let stored = old.flatMap { raw in raw.withUnsafeBytes { ChatActivity.LastKey.read($0) } }
            let unread: Int
            let marker: ReadMarker?
            if let stored, !changes.recountAll, !changes.recount.contains(user) {
                // The marker moves only with a recount (`unreadChanged`).
                marker = stored.marker
                unread =
                    added.isEmpty || stored.unread >= ChatSummary.unreadLimit
                    ? stored.unread
                    : try grown(stored.unread, by: added, in: chat, for: try filters.filter(for: user, in: txn, self), in: txn)
            } else {
                unreadRecountsByFolds.add(1)
                (unread, marker) = try unreadCount(in: chat, for: try filters.filter(for: user, in: txn, self), in: txn)
            }
            let value = activity.encoded(unread: unread, marker: marker)
            if old != value { try txn.put(index, key, value) }
        }
    }

    /// `count` with the messages of `added` (their `message` keys and
    /// sending devices) that are after the viewer's read marker and from
    /// a sender they count, up to the limit.
    func grown(
        _ count: Int, by added: [(key: [UInt8], device: PublicKey)], in chat: ObjectID, for filter: SenderFilter, in txn: Transaction
    ) throws -> Int {
        guard count < ChatSummary.unreadLimit, !added.isEmpty else { return count }
        let marker = try txn.get(state, Table.read.key(chat, filter.viewer)).map(ReadMarker.decode)
        let read = marker.map { Table.message.key(chat) + Codec.u64($0.hlc.rawValue) + $0.message.raw.bytes }
        var unread = count
        for (key, device) in added where read.map({ $0.lexicographicallyPrecedes(key) }) ?? true && filter.counts(device: device) {
            unread += 1
        }
        return min(unread, ChatSummary.unreadLimit)
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

/// What a write changed that its chats' entries show (§9.1), noted by the
/// folds and written once at its end (`FoldRun.writeChatActivity`).
struct ChatActivityChanges {
    struct OfChat {
        /// Every member's count is found again: the chat's membership or
        /// which of its messages count changed.
        var recountAll = false
        /// The chat's row is found again (`ChatRow`): its membership, a
        /// message entry or its count changed.
        var row = false
        /// Members whose count is found again (their read marker or blocks changed).
        var recount: Set<PublicKey> = []
        /// Messages new in this write that count for members who read
        /// before them, by id (a message folded twice is added once).
        var messages: [EventID: (key: [UInt8], device: PublicKey)] = [:]
        var added: [(key: [UInt8], device: PublicKey)] { Array(messages.values) }
    }
    var chats: [ObjectID: OfChat] = [:]
    /// Users whose blocks this write changed: their count in each of their chats.
    var blockers: Set<PublicKey> = []
}

extension FoldRun {
    /// Notes that every member's entry of `chat` must be found again (its
    /// membership changed, or which of its messages take effect or are
    /// deleted). A bulk fold skips it: the rebuild writes every chat's
    /// entries at its end.
    mutating func chatActivityChanged(_ chat: ObjectID) {
        guard !bulk else { return }
        chatActivity.chats[chat, default: .init()].recountAll = true
        chatActivity.chats[chat, default: .init()].row = true
    }

    /// Notes that one of `chat`'s message entries changed (a send, an
    /// edit, a deletion, a purge or a refill): its row is found again.
    mutating func chatRowChanged(_ chat: ObjectID) {
        if !bulk { chatActivity.chats[chat, default: .init()].row = true }
    }

    /// Notes `user`'s count in `chat` to be found again (their read marker moved).
    mutating func unreadChanged(in chat: ObjectID, for user: PublicKey) {
        if !bulk { chatActivity.chats[chat, default: .init()].recount.insert(user) }
    }

    /// Notes a message new in this write: the chat's activity may change,
    /// and members who read before it count it when `counts` (it took
    /// effect and is not deleted).
    mutating func messageAdded(_ message: EventID, in chat: ObjectID, key: [UInt8], device: PublicKey, counts: Bool) {
        guard !bulk else { return }
        chatActivity.chats[chat, default: .init()].messages[message] = counts ? (key, device) : nil
    }

    /// Notes that `user` started or stopped blocking someone: the unread
    /// counts of every chat they are in may change.
    mutating func blocksChanged(of user: PublicKey) {
        if !bulk { chatActivity.blockers.insert(user) }
    }

    /// Writes the entries of every chat this run noted.
    mutating func writeChatActivity() throws {
        var chatsOfBlockers: [(chat: ObjectID, user: PublicKey)] = []
        for user in chatActivity.blockers {
            try txn.scan(p.index, prefix: IndexTable.chatActivity.key(user)) { key, _ in
                chatsOfBlockers.append((try Codec.b32(key.suffix(32), "chat id"), user))
                return true
            }
        }
        for (chat, user) in chatsOfBlockers { chatActivity.chats[chat, default: .init()].recount.insert(user) }
        var filters = UnreadFilters(state: p.state)
        for (chat, changes) in chatActivity.chats.sorted(by: { $0.key < $1.key }) {
            try p.writeChatActivity(of: chat, changes, filters: &filters, in: txn)
        }
        chatActivity = ChatActivityChanges()
    }
}
