import ChorusCrypto
import ChorusEvents
import ChorusStorage

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

    /// u64be(activity), then for a chat with messages u64be(last hlc) ‖
    /// message id ‖ sending device.
    func encoded() -> [UInt8] {
        var out = Codec.u64(activity.rawValue)
        if let last {
            out.reserveCapacity(8 + 8 + 32 + 32)
            out += Codec.u64(last.hlc.rawValue)
            last.message.append(to: &out)
            last.device.append(to: &out)
        }
        return out
    }

    static func decode(_ raw: UnsafeRawBufferPointer) throws -> ChatActivity {
        let bytes = Array(raw)
        switch bytes.count {
        case 8:
            return ChatActivity(activity: HLC(rawValue: Codec.readU64(bytes[0..<8])), last: nil)
        case 80:
            let last = Last(
                hlc: HLC(rawValue: Codec.readU64(bytes[8..<16])), message: try Codec.b32(bytes[16..<48], "last message"),
                device: try Codec.b32(bytes[48..<80], "last sender"))
            return ChatActivity(activity: HLC(rawValue: Codec.readU64(bytes[0..<8])), last: last)
        default:
            throw ProjectionError.corrupt("chat activity of \(bytes.count) bytes")
        }
    }
}

extension Projections {
    /// A chat's activity from its state, the long way: its creation and a
    /// step back from its newest `message` entry past withdrawn ones. Nil
    /// when this node holds no creation of the chat.
    func chatActivity(of chat: ObjectID, in txn: Transaction) throws -> ChatActivity? {
        guard let created = try createdHLC(of: chat, in: txn) else { return nil }
        var last: ChatActivity.Last? = nil
        try txn.scanBackward(state, prefix: Table.message.key(chat)) { key, value in
            if try MessageEntry.isWithdrawn(value) { return true }
            last = ChatActivity.Last(
                hlc: HLC(rawValue: Codec.readU64(key.dropLast(32).suffix(8))), message: try Codec.b32(key.suffix(32), "message id"),
                device: try MessageEntry.send(of: value).device)
            return false
        }
        return ChatActivity(activity: max(last?.hlc ?? created, created), last: last)
    }

    /// Writes `chat`'s activity for each of its current members and removes
    /// it for each former one (§9.1): what a fold that changed the chat's
    /// membership or which of its messages take effect calls once per
    /// write. An entry already equal is left alone, so members' chat lists
    /// are not told of a change that is not one.
    func writeChatActivity(of chat: ObjectID, in txn: Transaction) throws {
        let activity = try chatActivity(of: chat, in: txn)?.encoded()
        var members: [(user: PublicKey, current: Bool)] = []
        try txn.scan(state, prefix: Table.member.key(chat)) { key, value in
            members.append((try Codec.b32(key[33...], "member"), try Membership.decode(value).isCurrent))
            return true
        }
        for (user, current) in members {
            let key = IndexTable.chatActivity.key(user, chat)
            if current, let activity {
                if try txn.get(index, key) != activity { try txn.put(index, key, activity) }
            } else {
                _ = try txn.delete(index, key)
            }
        }
    }

    /// Writes every chat's activity for its current members: the end of a
    /// rebuild (§9.2), once memberships and messages are folded.
    func writeEveryChatActivity(in txn: Transaction) throws {
        var chats: [ObjectID] = []
        try txn.scan(state, prefix: [Table.chat.rawValue]) { key, _ in
            chats.append(try Codec.b32(key[1...], "chat id"))
            return true
        }
        for chat in chats { try writeChatActivity(of: chat, in: txn) }
    }
}

extension FoldRun {
    /// Notes that `chat`'s activity may have changed in this run (a message
    /// took or lost effect, a membership changed), to be written once at
    /// its end (`writeChatActivity`). A bulk fold skips it: the rebuild
    /// writes every chat's at its end.
    mutating func chatActivityChanged(_ chat: ObjectID) {
        if !bulk { chatsWithNewActivity.insert(chat) }
    }

    /// Writes the activity of every chat this run noted.
    mutating func writeChatActivity() throws {
        for chat in chatsWithNewActivity.sorted() { try p.writeChatActivity(of: chat, in: txn) }
        chatsWithNewActivity.removeAll()
    }
}
