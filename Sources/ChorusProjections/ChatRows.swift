import ChorusCrypto
import ChorusEvents
import ChorusStorage

/// What a chat list shows of one chat, kept whole in one `chatRow` index
/// entry (Specs/projections.md §9.1): its record, current members, message
/// count and last message with its content and its sender's user. A list
/// reads one entry per row instead of the chat's record, its members, its
/// count, the last message's entry, the payloads that entry names and the
/// sending device's binding.
///
/// It is derived from the state the long way (`Projections.chatRow(of:)`)
/// whenever a write changes any of those (`ChatActivityChanges.OfChat.row`;
/// a device's new binding notes the chats of every message it sent), so it
/// always equals what the state says; a test compares the two.
struct ChatRow: Equatable {
    struct Last: Equatable {
        let id: EventID
        let record: MessageRecord
    }

    let chat: ChatView
    /// The device that signed the chat's creation: its sealed title's
    /// author (Specs/encryption.md §7), which opening the title needs.
    let creatorDevice: PublicKey
    let last: Last?

    private enum Flag {
        static let body: UInt8 = 1, blob: UInt8 = 2, size: UInt8 = 4, edited: UInt8 = 8
        static let editor: UInt8 = 16, deleted: UInt8 = 32, purged: UInt8 = 64
    }

    /// u8(1) ‖ u64(created hlc) ‖ creator ‖ created-by event ‖ the device
    /// that signed it ‖ u32(title
    /// length + 1, 0 without one) ‖ title ‖ u64(message count) ‖ u16(member
    /// count) ‖ per member: user ‖ u8(admin) ‖ u64(since) ‖ u8(1 with a last
    /// message, else 0), then for one: message id ‖ u64(hlc) ‖ device ‖
    /// sender's user ‖ u8(flags) ‖ the fields the flags name, in flag order (body as u32
    /// length ‖ bytes, blob 32 bytes, size, edited and deleted as u64, editor
    /// 32 bytes). Integers big-endian.
    func encoded() -> [UInt8] {
        var out: [UInt8] = [1]
        out.reserveCapacity(160 + chat.members.count * 41 + (chat.sealedTitle?.count ?? 0) + (last?.record.body?.count ?? 0))
        Self.append(chat.createdHLC.rawValue, to: &out)
        chat.creator.raw.append(to: &out)
        chat.createdBy.append(to: &out)
        creatorDevice.append(to: &out)
        Self.append(chat.sealedTitle, to: &out)
        Self.append(UInt64(max(0, chat.messageCount)), to: &out)
        Self.append(UInt16(clamping: chat.members.count), to: &out)
        for member in chat.members.prefix(Int(UInt16.max)) {
            member.user.raw.append(to: &out)
            out.append(member.admin ? 1 : 0)
            Self.append(member.since.rawValue, to: &out)
        }
        guard let last else {
            out.append(0)
            return out
        }
        out.append(1)
        let r = last.record
        last.id.append(to: &out)
        Self.append(r.hlc.rawValue, to: &out)
        r.device.append(to: &out)
        r.sender.append(to: &out)
        var flags: UInt8 = 0
        if r.body != nil { flags |= Flag.body }
        if r.blob != nil { flags |= Flag.blob }
        if r.size != nil { flags |= Flag.size }
        if r.edited != nil { flags |= Flag.edited }
        if r.editor != nil { flags |= Flag.editor }
        if r.deleted != nil { flags |= Flag.deleted }
        if r.purged { flags |= Flag.purged }
        out.append(flags)
        if let body = r.body { Self.append(body, to: &out) }
        if let blob = r.blob { blob.append(to: &out) }
        if let size = r.size { Self.append(size, to: &out) }
        if let edited = r.edited { Self.append(edited.rawValue, to: &out) }
        if let editor = r.editor { editor.append(to: &out) }
        if let deleted = r.deleted { Self.append(deleted.rawValue, to: &out) }
        return out
    }

    /// The creating event and device of a stored row, read alone in place.
    static func creation(in raw: UnsafeRawBufferPointer) throws -> (createdBy: EventID, device: PublicKey) {
        var r = Reader(raw: raw)
        guard try r.u8() == 1 else { throw ProjectionError.corrupt("chat row of an unknown layout") }
        _ = try r.take(8 + 32)
        return (try r.b32(), try r.b32())
    }

    /// Reads a stored row in place.
    static func decode(_ raw: UnsafeRawBufferPointer, chat id: ChatID) throws -> ChatRow {
        var r = Reader(raw: raw)
        guard try r.u8() == 1 else { throw ProjectionError.corrupt("chat row of an unknown layout") }
        let created = HLC(rawValue: try r.u64())
        let creator = try r.b32()
        let createdBy = try r.b32()
        let creatorDevice = try r.b32()
        let title = try r.optionalBytes()
        let count = try r.u64()
        let memberCount = Int(try r.u16())
        var members: [MemberView] = []
        members.reserveCapacity(memberCount)
        for _ in 0..<memberCount {
            let user = try r.b32()
            let admin = try r.u8() != 0
            members.append(MemberView(user: UserID(user), admin: admin, since: HLC(rawValue: try r.u64())))
        }
        let chat = ChatView(
            id: id, sealedTitle: title, creator: UserID(creator), createdHLC: created, createdBy: createdBy, members: members,
            messageCount: Int(clamping: count))
        guard try r.u8() == 1 else {
            guard r.atEnd else { throw ProjectionError.corrupt("chat row with bytes after its end") }
            return ChatRow(chat: chat, creatorDevice: creatorDevice, last: nil)
        }
        let message = try r.b32()
        let hlc = HLC(rawValue: try r.u64())
        let device = try r.b32()
        let sender = try r.b32()
        let flags = try r.u8()
        var record = MessageRecord(sender: sender, device: device, hlc: hlc)
        if flags & Flag.body != 0 { record.body = try r.bytes() }
        if flags & Flag.blob != 0 { record.blob = try r.b32() }
        if flags & Flag.size != 0 { record.size = try r.u64() }
        if flags & Flag.edited != 0 { record.edited = HLC(rawValue: try r.u64()) }
        if flags & Flag.editor != 0 { record.editor = try r.b32() }
        if flags & Flag.deleted != 0 { record.deleted = HLC(rawValue: try r.u64()) }
        record.purged = flags & Flag.purged != 0
        guard r.atEnd, flags & 0x80 == 0 else { throw ProjectionError.corrupt("chat row with unknown flags or bytes after its end") }
        return ChatRow(chat: chat, creatorDevice: creatorDevice, last: Last(id: message, record: record))
    }

    private static func append(_ n: UInt64, to out: inout [UInt8]) {
        withUnsafeBytes(of: n.bigEndian) { out.append(contentsOf: $0) }
    }

    private static func append(_ n: UInt16, to out: inout [UInt8]) {
        withUnsafeBytes(of: n.bigEndian) { out.append(contentsOf: $0) }
    }

    private static func append(_ bytes: [UInt8], to out: inout [UInt8]) {
        withUnsafeBytes(of: UInt32(clamping: bytes.count).bigEndian) { out.append(contentsOf: $0) }
        out.append(contentsOf: bytes)
    }

    /// A title as u32(length + 1) ‖ bytes, 0 without one.
    private static func append(_ bytes: [UInt8]?, to out: inout [UInt8]) {
        guard let bytes else { return withUnsafeBytes(of: UInt32(0)) { out.append(contentsOf: $0) } }
        withUnsafeBytes(of: UInt32(clamping: bytes.count + 1).bigEndian) { out.append(contentsOf: $0) }
        out.append(contentsOf: bytes)
    }

    /// Bounds-checked big-endian reads over a stored value.
    private struct Reader {
        let raw: UnsafeRawBufferPointer
        var at = 0
        var atEnd: Bool { at == raw.count }

        mutating func take(_ n: Int) throws -> UnsafeRawBufferPointer {
            guard n >= 0, raw.count - at >= n else { throw ProjectionError.corrupt("chat row cut short") }
            defer { at += n }
            return UnsafeRawBufferPointer(rebasing: raw[at..<at + n])
        }
        mutating func u8() throws -> UInt8 { try take(1)[0] }
        mutating func u16() throws -> UInt16 { UInt16(bigEndian: try take(2).loadUnaligned(as: UInt16.self)) }
        mutating func u32() throws -> UInt32 { UInt32(bigEndian: try take(4).loadUnaligned(as: UInt32.self)) }
        mutating func u64() throws -> UInt64 { UInt64(bigEndian: try take(8).loadUnaligned(as: UInt64.self)) }
        mutating func b32() throws -> Bytes32 { try Codec.b32(try take(32), "chat row key") }
        mutating func bytes() throws -> [UInt8] { Array(try take(Int(try u32()))) }
        mutating func optionalBytes() throws -> [UInt8]? {
            let n = Int(try u32())
            return n == 0 ? nil : Array(try take(n - 1))
        }
    }
}

extension Projections {
    /// `chat`'s row from the state, the long way: its view and the last
    /// message of its activity (`chatActivity(of:)`, no sender skipped)
    /// with the content its entry names and its sender's user from the
    /// device's binding. Nil without the chat's creation. The creating
    /// device is `previous`'s when it names the same creation (it never
    /// changes), else read from the creation's header in the log.
    func chatRow(
        of chat: ObjectID, activity: ChatActivity?, previous: (createdBy: EventID, device: PublicKey)? = nil, in txn: Transaction
    ) throws -> ChatRow? {
        guard let view = try chatView(chat, in: txn) else { return nil }
        let creatorDevice: PublicKey
        if let previous, previous.createdBy == view.createdBy {
            creatorDevice = previous.device
        } else if let arrival = try log.readArrival(of: view.createdBy, in: txn) {
            creatorDevice = try log.readHeaderAndPayload(at: arrival, in: txn).header.author
        } else {
            throw ProjectionError.corrupt("chat \(chat.short) names a creation the log does not hold")
        }
        guard let last = activity?.last else { return ChatRow(chat: view, creatorDevice: creatorDevice, last: nil) }
        let key = Table.message.key(chat, Codec.u64(last.hlc.rawValue), last.message)
        guard let value = try txn.get(state, key) else { throw ProjectionError.corrupt("chat activity names a message without an entry") }
        let entry = try MessageEntry.decode(value)
        var senders = Senders(state: state)
        let record = try entry.expand(hlc: last.hlc, senders: &senders, log: log, in: txn)
        return ChatRow(chat: view, creatorDevice: creatorDevice, last: ChatRow.Last(id: last.message, record: record))
    }

    /// Writes `chat`'s row (or removes it when this node holds no creation
    /// of the chat); an equal row is left alone.
    func writeChatRow(of chat: ObjectID, activity: ChatActivity?, in txn: Transaction) throws {
        let key = IndexTable.chatRow.key(chat)
        let old = try txn.get(index, key)
        let previous = try old.flatMap { raw in try raw.withUnsafeBytes(ChatRow.creation(in:)) }
        guard let row = try chatRow(of: chat, activity: activity, previous: previous, in: txn)?.encoded() else {
            _ = try txn.delete(index, key)
            return
        }
        if old != row { try txn.put(index, key, row) }
    }

    /// `chat`'s stored row, read in place; nil when it has none.
    func storedChatRow(of chat: ObjectID, in txn: Transaction) throws -> ChatRow? {
        try txn.withValue(index, IndexTable.chatRow.key(chat)) { raw in try raw.map { try ChatRow.decode($0, chat: ChatID(chat)) } }
    }

    /// The device that signed `chat`'s creation, from its row; nil when it has none.
    package func creatorDevice(of chat: ChatID) throws -> PublicKey? {
        try log.env.read { txn in
            try txn.withValue(index, IndexTable.chatRow.key(chat.raw)) { raw in try raw.map { try ChatRow.creation(in: $0).device } }
        }
    }

    /// A row's last message as a view.
    func messageView(_ last: ChatRow.Last, chat: ObjectID) -> MessageView {
        let r = last.record
        return MessageView(
            id: MessageID(last.id), chat: ChatID(chat), sender: UserID(r.sender), device: DeviceID(r.device),
            hlc: r.hlc, body: r.body, blob: r.blob, blobSize: r.size, edited: r.edited, editor: r.editor.map(DeviceID.init),
            deleted: r.deleted, purged: r.purged)
    }
}
