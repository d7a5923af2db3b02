import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusStorage

extension Projections {
    // MARK: Chats

    /// Chats `user` is a member of now.
    package func chats(of user: UserID) throws -> [ChatView] {
        try chats(of: user.raw)
    }

    package func chats(of user: PublicKey) throws -> [ChatView] {
        try log.env.read { txn in
            var ids: [ObjectID] = []
            try txn.scan(state, prefix: Table.userChat.key(user)) { key, _ in
                ids.append(try Codec.b32(key.suffix(32), "chat id"))
                return true
            }
            return try ids.compactMap { try chatView($0, in: txn) }.sorted { ($0.createdHLC, $0.id) < ($1.createdHLC, $1.id) }
        }
    }

    /// A page of `chats(of:)`: up to `limit` chats after the chat `after`
    /// in the same order (creation, then id). Only the page's chats are
    /// read whole; the others cost one record lookup each.
    package func chats(of user: UserID, after: ChatID?, limit: Int) throws -> [ChatView] {
        try log.env.read { txn in
            func created(_ id: ObjectID) throws -> HLC? {
                guard let raw = try txn.get(state, Table.chat.key(id)), let hlc = try Codec.decode(raw, "chat record")[text: "hlc"]?.unsignedValue
                else { return nil }
                return HLC(rawValue: hlc)
            }
            var order: [(HLC, ObjectID)] = []
            try txn.scan(state, prefix: Table.userChat.key(user.raw)) { key, _ in
                let id = try Codec.b32(key.suffix(32), "chat id")
                if let hlc = try created(id) { order.append((hlc, id)) }
                return true
            }
            order.sort { ($0.0, $0.1) < ($1.0, $1.1) }
            var start = order.startIndex
            if let after {
                guard let hlc = try created(after.raw) else { throw QueryError.badCursor(after.hex) }
                start = order.firstIndex { ($0.0, $0.1) > (hlc, after.raw) } ?? order.endIndex
            }
            return try order[start...].prefix(max(0, limit)).compactMap { try chatView($0.1, in: txn) }
        }
    }

    /// The chats `user` is a member of now, as a chat list shows them: each
    /// with its last message, the user's unread count and read marker,
    /// newest activity first (then by id). One read transaction; a chat
    /// costs its entry in the user's list and its row.
    package func chatList(of user: UserID) throws -> [ChatSummary] {
        try chatList(of: user, limit: nil, after: nil)
    }

    /// A page of `chatList(of:)`: up to `limit` chats (all with nil) after
    /// `after` in the same order. The user's chats are ordered from one
    /// scan of their entries (§9.1, `IndexTable.chatActivity`), which also
    /// hold their unread counts; only a chat whose last message comes from
    /// a sender the user blocks steps back through its messages. A page's
    /// row is then one read of the chat's row (§9.1, `IndexTable.chatRow`:
    /// its record, members, count and last message with its content), so a
    /// row costs about what it shows.
    package func chatList(of user: UserID, limit: Int?, after: ChatListCursor?) throws -> [ChatSummary] {
        try log.env.read { txn in
            var senders = Senders(state: state)
            let filter = try SenderFilter(
                viewer: user.raw, blocked: Set(try targets(.block, of: user.raw, in: txn)), senders: &senders, state: state, in: txn)
            // Each chat's last activity: its last message that took effect
            // and whose sender the user does not block, or its creation.
            var order: [(activity: HLC, chat: ObjectID, last: ChatActivity.LastKey?, unread: Int, marker: ReadMarker?)] = []
            var stepBack: [(chat: ObjectID, unread: Int, marker: ReadMarker?)] = []
            // Read in place: a list reads every chat's entry to sort them,
            // and builds the key of a chat's last message only for its page.
            let prefix = IndexTable.chatActivity.key(user.raw)
            try txn.scanInPlace(index, prefix: prefix) { key, value in
                guard key.count == prefix.count + 32, let chat = Bytes32(UnsafeRawBufferPointer(rebasing: key[prefix.count...])),
                    let entry = ChatActivity.LastKey.read(value)
                else { throw ProjectionError.corrupt("chat activity entry of \(value.count) bytes") }
                if entry.last != nil, filter.isBlocked(UnsafeRawBufferPointer(rebasing: value[48..<80])) {
                    stepBack.append((chat, entry.unread, entry.marker))
                } else {
                    order.append((entry.activity, chat, entry.last, entry.unread, entry.marker))
                }
                return true
            }
            for (chat, unread, marker) in stepBack {
                guard let seen = try chatActivity(of: chat, in: txn, skipping: filter.isBlocked) else { continue }
                order.append((seen.activity, chat, seen.last.map { ChatActivity.LastKey(hlc: $0.hlc, message: $0.message) }, unread, marker))
            }
            // Positions are sorted, not the entries: moving entries of a
            // hundred bytes was a twentieth of a whole list's time.
            let ranked = order.indices.sorted { a, b in
                let (x, y) = (order[a].activity, order[b].activity)
                return x != y ? x > y : order[a].chat < order[b].chat
            }
            var start = ranked.startIndex
            if let after {
                start = ranked.firstIndex { (order[$0].activity, after.chat.raw) < (after.lastActivity, order[$0].chat) } ?? ranked.endIndex
            }
            let page = ranked[start...].prefix(limit.map { max(0, $0) } ?? ranked.count)
            // Rows are large values: grown one by one, the list would copy them all again at each doubling.
            var list: [ChatSummary] = []
            list.reserveCapacity(page.count)
            for position in page {
                let entry = order[position]
                // The chat's row holds its view and its last message (§9.1);
                // a last message the viewer's blocks stepped back from is
                // read from its entry.
                let row = try storedChatRow(of: entry.chat, in: txn)
                guard let chat = try row?.chat ?? chatView(entry.chat, in: txn) else { continue }
                let last = try entry.last.flatMap { last in
                    if let stored = row?.last, stored.id == last.message {
                        return messageView(stored, chat: entry.chat)
                    }
                    let key = Table.message.key(entry.chat, Codec.u64(last.hlc.rawValue), last.message)
                    return try txn.get(state, key).flatMap { try messageView(key: key, value: $0, chat: entry.chat, senders: &senders, in: txn) }
                }
                // The count and the marker are kept with the entry (§9.1).
                list.append(
                    ChatSummary(
                        chat: chat, lastMessage: last, unread: entry.unread, readMarker: entry.marker, lastActivity: entry.activity,
                        creatorDevice: row?.creatorDevice))
            }
            return list
        }
    }

    /// The creation HLC of a chat this node holds the creation of.
    func createdHLC(of chat: ObjectID, in txn: Transaction) throws -> HLC? {
        guard let raw = try txn.get(state, Table.chat.key(chat)) else { return nil }
        // The record is canonical CBOR, so its map's first key is the
        // shortest, "hlc" (0x63 'h' 'l' 'c'), followed by the HLC as an
        // 8-byte unsigned (0x1B): read in place, since a chat list sorts
        // every chat of its user by it. Any other layout is decoded whole.
        if raw.count >= 14, raw[0] & 0xE0 == 0xA0, raw[1] == 0x63, raw[2] == 0x68, raw[3] == 0x6C, raw[4] == 0x63, raw[5] == 0x1B {
            return HLC(rawValue: Codec.readU64(raw[6..<14]))
        }
        guard let hlc = try Codec.decode(raw, "chat record")[text: "hlc"]?.unsignedValue else { throw ProjectionError.corrupt("chat record") }
        return HLC(rawValue: hlc)
    }

    /// Messages after the viewer's read marker in `chat` that others sent,
    /// not deleted and not from senders the viewer blocks, counted up to
    /// `ChatSummary.unreadLimit`; with the marker.
    func unreadCount(in chat: ObjectID, for filter: SenderFilter, in txn: Transaction) throws -> (unread: Int, marker: ReadMarker?) {
        let prefix = Table.message.key(chat)
        let marker = try txn.get(state, Table.read.key(chat, filter.viewer)).map(ReadMarker.decode)
        var unread = 0
        let from = marker.map { prefix + Codec.u64($0.hlc.rawValue) + $0.message.raw.bytes + [0] } ?? prefix
        try txn.scanInPlace(state, from: from) { key, value in
            guard key.starts(with: prefix) else { return false }
            // Flags (Specs/projections.md §9.1): 8 withdrawn, 2 deleted.
            guard value.count >= MessageEntry.baseLength, value[40] & (MessageEntry.withdrawnFlag | 2) == 0 else { return true }
            if filter.counts(entry: value) { unread += 1 }
            return unread < ChatSummary.unreadLimit
        }
        return (unread, marker)
    }

    /// A chat's record and current members, nil when this node holds no creation.
    package func chatView(_ id: ChatID) throws -> ChatView? {
        try log.env.read { txn in try chatView(id.raw, in: txn) }
    }

    package func chatView(_ id: ObjectID) throws -> ChatView? {
        try log.env.read { txn in try chatView(id, in: txn) }
    }

    func chatView(_ id: ObjectID, in txn: Transaction) throws -> ChatView? {
        guard let raw = try txn.get(state, Table.chat.key(id)) else { return nil }
        let record = try ChatRecord.decode(raw)
        var members: [MemberView] = []
        try txn.scanInPlace(state, prefix: Table.member.key(id)) { key, value in
            if let (admin, since) = try Membership.current(Array(value)) {
                members.append(MemberView(user: UserID(try Codec.b32(UnsafeRawBufferPointer(rebasing: key[33...]), "member")), admin: admin, since: since))
            }
            return true
        }
        let count = try txn.get(state, Table.messageCount.key(id)).map { Int(Codec.readU64($0[...])) } ?? 0
        return ChatView(
            id: ChatID(id), sealedTitle: record.title, creator: UserID(record.creator), createdHLC: record.hlc, createdBy: record.createdBy,
            members: members, messageCount: count)
    }

    /// A page of a chat's messages, oldest first: the `limit` newest
    /// messages before `before` (a cursor from an earlier page). Messages
    /// from users `viewer` blocked are left out.
    package func chat(_ id: ChatID, viewer: UserID? = nil, limit: Int = 50, before: MessageCursor? = nil) throws -> ChatPage {
        try chat(id.raw, viewer: viewer?.raw, limit: limit, before: before)
    }

    package func chat(_ id: ObjectID, viewer: PublicKey? = nil, limit: Int = 50, before: MessageCursor? = nil) throws -> ChatPage {
        try log.env.read { txn in
            guard let chat = try chatView(id, in: txn) else { throw QueryError.unknownChat(id) }
            let blocked = Set((try viewer.map { try targets(.block, of: $0, in: txn) } ?? []).map(UserID.init))
            let prefix = Table.message.key(id)
            var upper: [UInt8]? = nil
            if let before { upper = prefix + before.bytes }
            var messages: [MessageView] = []
            var more = false
            var senders = Senders(state: state)
            try txn.scanBackward(state, prefix: prefix, before: upper) { key, value in
                // A withdrawn entry only lists its send (Specs/projections.md §9.1).
                if try MessageEntry.isWithdrawn(value) { return true }
                if messages.count == limit {
                    more = true
                    return false
                }
                guard let m = try messageView(key: key, value: value, chat: id, senders: &senders, in: txn) else { return true }
                if !blocked.contains(m.sender) { messages.append(m) }
                return true
            }
            messages.reverse()
            var markers: [UserID: ReadMarker] = [:]
            try txn.scan(state, prefix: Table.read.key(id)) { key, value in
                markers[UserID(try Codec.b32(key[33...], "reader"))] = try ReadMarker.decode(value)
                return true
            }
            return ChatPage(chat: chat, messages: messages, older: more ? messages.first?.cursor : nil, readMarkers: markers)
        }
    }

    /// The message a state entry holds; nil for a withdrawn entry (a send
    /// that takes no effect).
    func messageView(key: [UInt8], value: [UInt8], chat: ObjectID, senders: inout Senders, in txn: Transaction) throws -> MessageView? {
        let hlc = HLC(rawValue: Codec.readU64(key.dropLast(32).suffix(8)))
        let entry = try MessageEntry.decode(value)
        if entry.withdrawn { return nil }
        let r = try entry.expand(hlc: hlc, senders: &senders, log: log, in: txn)
        return MessageView(
            id: MessageID(try Codec.b32(key.suffix(32), "message id")), chat: ChatID(chat), sender: UserID(r.sender), device: DeviceID(r.device),
            hlc: r.hlc, body: r.body, blob: r.blob, blobSize: r.size, edited: r.edited, editor: r.editor.map(DeviceID.init),
            deleted: r.deleted, purged: r.purged)
    }

    /// The sealed body of `message` as first sent (before its edits), read
    /// from its send's payload through its `message` entry (§9.1); nil when
    /// this node holds no entry for it or the payload is purged.
    package func sentBody(of message: MessageView) throws -> [UInt8]? {
        try log.env.read { txn in
            let key = Table.message.key(message.chat.raw, Codec.u64(message.hlc.rawValue), message.id.raw)
            guard let value = try txn.get(state, key) else { return nil }
            let entry = try MessageEntry.decode(value)
            guard let bytes = try log.readPayload(at: entry.sent, in: txn) else { return nil }
            return try MessageRecord.sentPayload(bytes, at: entry.sent)?.body
        }
    }

    /// The chat a message belongs to, when it took effect here.
    package func message(_ id: MessageID) throws -> MessageView? {
        try message(id.raw)
    }

    package func message(_ id: EventID) throws -> MessageView? {
        try log.env.read { txn in
            // The message's state key is (chat, sending HLC, id): the chat is
            // its `message.sent`'s header object, so one read of the send
            // from the log finds it, however long the chat.
            guard let sent = try sentEvent(id, in: txn)?.event else { return nil }
            let chat = sent.object
            let stateKey = Table.message.key(chat, Codec.u64(sent.hlc.rawValue), id)
            guard let record = try txn.get(state, stateKey) else { return nil }
            var senders = Senders(state: state)
            return try messageView(key: stateKey, value: record, chat: chat, senders: &senders, in: txn)  // nil when withdrawn
        }
    }

    static func factKeyPrefix(_ cls: ObjectClass, _ object: Bytes32) -> [UInt8] { keyBytes(cls.rawValue, object) }

    /// The `message.sent` with id `id`, when this node holds one: a send is
    /// not filed as a fact (Specs/projections.md §9.1), the log has it, at
    /// `arrival` when the chat's message index named it, else where `ids` says.
    func sentEvent(_ id: EventID, at known: UInt64? = nil, in txn: Transaction) throws -> StoredEvent? {
        guard let arrival = try known ?? log.readArrival(of: id, in: txn) else { return nil }
        let event = try log.readTrusted(at: arrival, in: txn)
        return event.kind == .messageSent && event.id == id ? StoredEvent(event: event, arrival: arrival) : nil
    }
}

/// Whose messages count for a viewer of a chat list: not the viewer's own,
/// not from a user the viewer blocks. A message names its sending device;
/// only devices bound to the viewer or to a blocked user (and those keys
/// themselves, which sign as their own devices) can be excluded, so the
/// filter reads those devices' bindings once, when it is made, and every
/// other device counts without reading anything.
struct SenderFilter {
    let viewer: PublicKey
    let blocked: Set<PublicKey>
    /// The viewer, the blocked users, and every device they ever bound
    /// (Table.userDevice), each with the user its binding names (the key
    /// itself without one): a few, so they are searched in a line, first
    /// by their first eight bytes (a message entry starts with its device).
    private let candidates: [(head: UInt64, device: PublicKey, user: PublicKey)]

    init(viewer: PublicKey, blocked: Set<PublicKey>, senders: inout Senders, state: Database, in txn: Transaction) throws {
        self.viewer = viewer
        self.blocked = blocked
        let users = blocked.union([viewer])
        var keys = users
        for user in users {
            try txn.scan(state, prefix: Table.userDevice.key(user)) { key, _ in
                keys.insert(try Codec.b32(key[33...], "device"))
                return true
            }
        }
        candidates = try keys.sorted().map { key in
            (key.bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }, key, try senders.user(of: key, in: txn))
        }
    }

    /// The user of `device` when it is a candidate; nil for any other device.
    private func candidateUser(_ device: UnsafeRawBufferPointer) -> PublicKey? {
        guard device.count >= 32 else { return nil }
        let head = device.loadUnaligned(as: UInt64.self)
        for c in candidates where c.head == head {
            if c.device.bytes.withUnsafeBytes({ $0.elementsEqual(device.prefix(32)) }) { return c.user }
        }
        return nil
    }

    /// Whether the user of `device` is blocked by the viewer.
    func isBlocked(_ device: PublicKey) -> Bool {
        guard !blocked.isEmpty else { return false }
        return device.bytes.withUnsafeBytes { isBlocked($0) }
    }

    /// Whether the user of the device whose key `device` starts with is blocked by the viewer.
    func isBlocked(_ device: UnsafeRawBufferPointer) -> Bool {
        guard !blocked.isEmpty else { return false }
        return candidateUser(device).map(blocked.contains) ?? false
    }

    /// Whether a message whose entry (bytes starting with its sending
    /// device) is `entry` counts as unread for the viewer.
    func counts(entry: UnsafeRawBufferPointer) -> Bool {
        guard let user = candidateUser(entry) else { return true }
        return user != viewer && !blocked.contains(user)
    }

    /// Whether a message sent from `device` counts as unread for the viewer.
    func counts(device: PublicKey) -> Bool { device.bytes.withUnsafeBytes { counts(entry: $0) } }
}
