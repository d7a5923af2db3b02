import ChorusCrypto
import ChorusEncryption
import ChorusEvents
import ChorusNode
import ChorusProjections

/// What this device can show of a sealed value (Specs/api.md §5.1):
/// `readable`, `locked`, `unreadable` or `sealed`.
func readableState<T>(_ r: Readable<T>) -> String {
    switch r {
    case .content: "readable"
    case .locked: "locked"
    case .unreadable: "unreadable"
    case .sealed: "sealed"
    }
}

/// CHAT (Specs/api.md §5.1): `{"id", "title", "title_state", "creator", "created", "created_time", "members", "messages"}`.
public struct ChatShape: Encodable, Sendable {
    struct Member: Encodable, Sendable {
        let user: String
        let admin: Bool
        let since: UInt64
        let sinceTime: String

        enum CodingKeys: String, CodingKey { case user, admin, since, sinceTime = "since_time" }
    }

    let id: String
    let title: String?
    let titleState: String?
    let creator: String
    let created: UInt64
    let createdTime: String
    let members: [Member]
    let messages: Int

    enum CodingKeys: String, CodingKey {
        case id, title, titleState = "title_state", creator, created, createdTime = "created_time", members, messages
    }

    /// The shape of `c`.
    public init(_ c: ReadableChat) {
        id = c.view.id.hex
        title = c.title?.value
        titleState = c.title.map(readableState)
        creator = c.view.creator.hex
        created = c.view.createdHLC.rawValue
        createdTime = c.view.createdHLC.description
        members = c.view.members.map { Member(user: $0.user.hex, admin: $0.admin, since: $0.since.rawValue, sinceTime: $0.since.description) }
        messages = c.view.messageCount
    }
}

/// MESSAGE (Specs/api.md §5.1).
public struct MessageShape: Encodable, Sendable {
    struct AttachmentShape: Encodable, Sendable {
        let mime: String
        let size: UInt64
        let width: UInt64?
        let height: UInt64?
        let blob: String?
    }

    let id: String
    let sender: String
    let device: String
    let hlc: UInt64
    let time: String
    let content: String
    let text: String?
    let picture: ReferenceShape?
    let attachment: AttachmentShape?
    let epoch: String?
    let sealedBytes: UInt64?
    let blobSize: UInt64?
    let edited: UInt64?
    let editedTime: String?
    let deleted: UInt64?
    let deletedTime: String?
    let purged: Bool
    let cursor: String

    enum CodingKeys: String, CodingKey {
        case id, sender, device, hlc, time, content, text, picture, attachment, epoch
        case sealedBytes = "sealed_bytes", blobSize = "blob_size", edited, editedTime = "edited_time", deleted, deletedTime = "deleted_time"
        case purged, cursor
    }

    /// The shape of `r`.
    public init(_ r: ReadableMessage) {
        let m = r.view
        let opened = r.content.value
        id = m.id.hex
        sender = m.sender.hex
        device = m.device.hex
        hlc = m.hlc.rawValue
        time = m.hlc.description
        content = m.deleted != nil ? "deleted" : m.purged ? "purged" : readableState(r.content)
        text = opened?.text
        picture = r.picture.map(ReferenceShape.init)
        attachment = opened?.attachment.map { AttachmentShape(mime: $0.mime, size: $0.size, width: $0.width, height: $0.height, blob: m.blob?.hex) }
        epoch = m.epoch?.hex
        sealedBytes = m.body.map { UInt64($0.count) }
        blobSize = m.blobSize
        edited = m.edited?.rawValue
        editedTime = m.edited?.description
        deleted = m.deleted?.rawValue
        deletedTime = m.deleted?.description
        purged = m.purged
        cursor = m.cursor.description
    }
}

/// The chats this user is a member of, as this device reads them.
/// `GET /v1/chats`; `chorus query chats`.
public struct ListChats: NodeOperation {
    /// `[CHAT, …]`.
    public struct Result: OperationResult {
        /// The chats.
        public let chats: [ReadableChat]
        /// The `after` that reads the next page; nil on the last.
        public var nextPage: String? = nil

        /// An array of chats.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.unkeyedContainer()
            for chat in chats { try c.encode(ChatShape(chat)) }
        }
    }

    /// The chat the page starts after; nil: from the first.
    public let after: ChatID?
    /// At most this many chats; nil: all of them.
    public let limit: Int?

    /// This node's user's chats, all of them or a page of `limit` after `after`.
    public init(after: ChatID? = nil, limit: Int? = nil) {
        self.after = after
        self.limit = limit
    }

    /// Reads the chats (a page of them) and opens their titles.
    public func run(on node: Node) async throws -> Result {
        let user = node.identity.user
        if limit == nil, after == nil { return Result(chats: try node.projections.chats(of: user).map(node.readableChat)) }
        let limit = try pageLimit(limit)
        let page = try onePage(limit: limit, read: { try node.projections.chats(of: user, after: after, limit: $0) }, next: \.id.hex)
        return Result(chats: try page.items.map(node.readableChat), nextPage: page.next)
    }
}

/// One row of this user's chat list (Specs/api.md §5.1): `{"chat": CHAT,
/// "last_message": MESSAGE|null, "unread": N, "read": CURSOR|null,
/// "last_activity": HLC, "last_activity_time": TIME, "cursor": CURSOR}`.
public struct InboxRowShape: Encodable, Sendable {
    let chat: ChatShape
    let lastMessage: MessageShape?
    let unread: Int
    let read: String?
    let lastActivity: UInt64
    let lastActivityTime: String
    let cursor: String

    enum CodingKeys: String, CodingKey {
        case chat, lastMessage = "last_message", unread, read, lastActivity = "last_activity", lastActivityTime = "last_activity_time", cursor
    }

    /// The shape of `row`.
    public init(_ row: ReadableChatSummary) {
        chat = ChatShape(row.chat)
        lastMessage = row.lastMessage.map(MessageShape.init)
        unread = row.unread
        read = row.readMarker.map { MessageCursor(hlc: $0.hlc, message: $0.message).description }
        lastActivity = row.lastActivity.rawValue
        lastActivityTime = row.lastActivity.description
        cursor = row.cursor.description
    }
}

/// This user's chat list, as an inbox screen draws it (Specs/projections.md
/// §7): each chat with its last message, this user's unread count and read
/// marker, newest activity first. `GET /v1/inbox`; `chorus query inbox`.
public struct ListInbox: NodeOperation {
    /// `[INBOX_ROW, …]`.
    public struct Result: OperationResult {
        /// The rows, newest activity first.
        public let rows: [ReadableChatSummary]
        /// The `after` that reads the next page; nil on the last.
        public var nextPage: String? = nil

        /// An array of rows.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.unkeyedContainer()
            for row in rows { try c.encode(InboxRowShape(row)) }
        }
    }

    /// The `cursor` of the previous page's last row; nil: from the newest.
    public let after: String?
    /// At most this many rows; nil: all of them.
    public let limit: Int?

    /// This user's chat list, all of it or a page of `limit` rows after `after`.
    public init(after: String? = nil, limit: Int? = nil) {
        self.after = after
        self.limit = limit
    }

    /// Reads the list (a page of it) and opens what this device can.
    public func run(on node: Node) async throws -> Result {
        var cursor: ChatListCursor? = nil
        if let after {
            guard let parsed = ChatListCursor(after) else { throw QueryError.badCursor(after) }
            cursor = parsed
        }
        if limit == nil, cursor == nil { return Result(rows: try node.chatList()) }
        let limit = try pageLimit(limit)
        let page = try onePage(limit: limit, read: { try node.chatList(limit: $0, after: cursor) }, next: \.cursor.description)
        return Result(rows: page.items, nextPage: page.next)
    }
}

/// A page of a chat's messages, oldest first, as this device reads them.
/// `GET /v1/chats/{id}`; `chorus query chat`. A chat this node does not hold is 404 `chat_unknown`.
public struct GetChatPage: NodeOperation {
    /// `{"chat": CHAT, "messages": [MESSAGE, …], "older": CURSOR|null, "read": {USER: HLC, …}, "read_time": {USER: TIME, …}}`.
    public struct Result: OperationResult {
        /// The page.
        public let page: ReadableChatPage

        enum Keys: String, CodingKey { case chat, messages, older, read, readTime = "read_time" }

        /// The page's fields; read markers by user, in key order.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: Keys.self)
            try c.encode(ChatShape(page.chat), forKey: .chat)
            try c.encode(page.messages.map(MessageShape.init), forKey: .messages)
            try c.encodeIfPresent(page.older?.description, forKey: .older)
            let markers = page.readMarkers.sorted { $0.key < $1.key }
            try c.encode(JSONValue.object(markers.map { ($0.key.hex, .uint($0.value.hlc.rawValue)) }), forKey: .read)
            try c.encode(JSONValue.object(markers.map { ($0.key.hex, .string($0.value.hlc.description)) }), forKey: .readTime)
        }
    }

    /// The chat.
    public let chat: ChatID
    /// At most this many messages (at least 1).
    public let limit: Int
    /// The cursor of the previous page's `older`, or nil for the newest page.
    public let before: String?

    /// The page of `chat` with at most `limit` messages before `before`.
    public init(_ chat: ChatID, limit: Int = 50, before: String? = nil) {
        self.chat = chat
        self.limit = limit
        self.before = before
    }

    /// Reads the page and opens what this device can.
    public func run(on node: Node) async throws -> Result {
        guard limit >= 1 else { throw OperationError(.badInput, code: "bad_limit", "limit must be at least 1") }
        var cursor: MessageCursor? = nil
        if let before {
            guard let parsed = MessageCursor(before) else { throw QueryError.badCursor(before) }
            cursor = parsed
        }
        return Result(page: try node.readableChatPage(chat, limit: limit, before: cursor))
    }
}

extension ChatShape: SchemaDescribed {
    /// `title` and `title_state` are null for a chat without a title.
    public static var schema: JSONSchema {
        .object([
            ("id", .hex32), ("title", .nullable(.string)), ("title_state", .nullable(.oneOfTexts(["readable", "locked", "unreadable", "sealed"]))),
            ("creator", .hex32), ("created", .integer), ("created_time", .string),
            ("members", .array(.object([("user", .hex32), ("admin", .boolean), ("since", .integer), ("since_time", .string)]))),
            ("messages", .integer),
        ])
    }
}

extension MessageShape: SchemaDescribed {
    /// `text`, `picture` and `attachment` are null unless the body opened and holds them.
    public static var schema: JSONSchema {
        .object([
            ("id", .hex32), ("sender", .hex32), ("device", .hex32), ("hlc", .integer), ("time", .string),
            ("content", .oneOfTexts(["readable", "locked", "unreadable", "sealed", "deleted", "purged"])), ("text", .nullable(.string)),
            ("picture", .nullable(.ref("Reference"))),
            (
                "attachment",
                .nullable(
                    .object([
                        ("mime", .string), ("size", .integer), ("width", .nullable(.integer)), ("height", .nullable(.integer)),
                        ("blob", .nullable(.hex32)),
                    ]))
            ),
            ("epoch", .nullable(.hex32)), ("sealed_bytes", .nullable(.integer)), ("blob_size", .nullable(.integer)),
            ("edited", .nullable(.integer)), ("edited_time", .nullable(.string)), ("deleted", .nullable(.integer)),
            ("deleted_time", .nullable(.string)), ("purged", .boolean), ("cursor", .string),
        ])
    }
}

extension ListChats.Result {
    /// `[CHAT, …]`.
    public static var schema: JSONSchema { .array(.ref("Chat")) }
}

extension InboxRowShape: SchemaDescribed {
    /// `last_message` is null in a chat without messages, `read` before this user marked anything read.
    public static var schema: JSONSchema {
        .object([
            ("chat", .ref("Chat")), ("last_message", .nullable(.ref("Message"))), ("unread", .integer), ("read", .nullable(.string)),
            ("last_activity", .integer), ("last_activity_time", .string), ("cursor", .string),
        ])
    }
}

extension ListInbox.Result {
    /// `[INBOX_ROW, …]`.
    public static var schema: JSONSchema { .array(.ref("InboxRow")) }
}

extension GetChatPage.Result {
    /// `older` is null on the oldest page; `read` maps users to the HLC they read up to, `read_time` to the same time as a person reads it.
    public static var schema: JSONSchema {
        .object([
            ("chat", .ref("Chat")), ("messages", .array(.ref("Message"))), ("older", .nullable(.string)), ("read", .map(.integer)),
            ("read_time", .map(.string)),
        ])
    }
}
