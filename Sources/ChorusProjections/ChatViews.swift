import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusStorage

/// A current member of a chat, as `ChatView.members` lists it
/// (Specs/projections.md §6.5).
public struct MemberView: Hashable, Sendable, Codable {
    /// The member's user key.
    public let user: UserID
    /// Whether the member is an administrator and may add or remove members.
    public let admin: Bool
    /// Start of the current membership interval: the HLC of the event by which
    /// the user last joined.
    public let since: HLC
}

/// A chat as this node projects it: its creation record and current members
/// (Specs/projections.md §6.5). The title stays sealed here.
public struct ChatView: Hashable, Sendable, Codable {
    /// The chat id: the object of its `chat.created`, chosen by the creating
    /// device.
    public let id: ChatID
    /// The title, sealed to the chat's members (Specs/encryption.md §7);
    /// `Node` opens it on a member's device.
    public let sealedTitle: [UInt8]?
    /// The acting user of the first `chat.created` (a user key, not the
    /// device).
    public let creator: UserID
    /// HLC of the first `chat.created`; `chats(of:)` orders by it.
    public let createdHLC: HLC
    /// The `chat.created` event (its device sealed the title).
    public let createdBy: EventID
    /// Current members only, in user key order (bytewise); former members are
    /// left out.
    public let members: [MemberView]
    /// Number of messages that took effect in the chat, deleted ones included
    /// (the `messageCount` table, Specs/projections.md §5).
    public let messageCount: Int
}

/// One message as every replica projects it (Specs/projections.md §6.6): who
/// sent it, when, and its sealed body; nothing here is decrypted.
public struct MessageView: Hashable, Sendable, Codable {
    /// The message id: the id of its `message.sent` event.
    public let id: MessageID
    /// The chat the message was sent to.
    public let chat: ChatID
    /// The acting user of the `message.sent` (a user key).
    public let sender: UserID
    /// The device that signed the `message.sent`.
    public let device: DeviceID
    /// HLC of the `message.sent`; messages order by (HLC, id).
    public let hlc: HLC
    /// The sealed body (Specs/encryption.md §7): text, picture reference and
    /// attachment, readable on a member's device through `Node`. nil when
    /// deleted or purged.
    public let body: [UInt8]?
    /// The encrypted picture sent with the message: hash and size of its
    /// ciphertext blob.
    public let blob: Hash32?
    /// Length in bytes of that ciphertext blob (the image's length + 16); nil
    /// when the message carries no picture, or is deleted or purged.
    public let blobSize: UInt64?
    /// HLC of the winning effective edit; nil when never edited, or deleted or
    /// purged.
    public let edited: HLC?
    /// The device that signed the winning edit (its body is sealed by it).
    public let editor: DeviceID?
    /// HLC of the effective `message.deleted`; nil while the message is live.
    public let deleted: HLC?
    /// True when the message is live but this node holds its payload no more
    /// (`purged: true`, Specs/projections.md §9.3); `body` is then nil.
    public let purged: Bool
    /// The epoch the body is sealed under (its first 32 bytes).
    public var epoch: Hash32? { body.flatMap { $0.count >= 32 ? Bytes32($0[0..<32]) : nil } }
    /// Pass as `before` to get the page of older messages.
    public var cursor: MessageCursor { MessageCursor(hlc: hlc, message: id) }
}

/// Where a page of a chat ends (its `older`): a message's place in the
/// chat's order, (HLC, id). Pass it as `before` for the page of older
/// messages. Its text form (`description`, `init(_:)`, and as `Codable`) is
/// the hex of `u64be(hlc) ‖ message id` (Specs/projections.md §7.3), as the
/// HTTP API and `chorus` print it.
public struct MessageCursor: Hashable, Sendable, Codable, LosslessStringConvertible {
    /// The message's sending HLC.
    package let hlc: HLC
    /// The message.
    package let message: MessageID

    /// The place of `message`, sent at `hlc`.
    package init(hlc: HLC, message: MessageID) {
        self.hlc = hlc
        self.message = message
    }

    /// Reads the hex form; nil unless it is 80 hex digits.
    public init?(_ description: String) {
        guard let raw = Hex.decode(description), raw.count == 40, let id = Bytes32(raw[8...]) else { return nil }
        self.init(hlc: HLC(rawValue: Codec.readU64(raw[0..<8])), message: MessageID(id))
    }

    /// The hex of `u64be(hlc) ‖ message id`.
    public var description: String { Hex.encode(bytes) }

    var bytes: [UInt8] { Codec.u64(hlc.rawValue) + message.raw.bytes }

    /// Decodes the hex form.
    public init(from decoder: any Decoder) throws { self = try decodeCursor(from: decoder, "a chat cursor") }

    /// Encodes the hex form.
    public func encode(to encoder: any Encoder) throws { try encodeCursor(self, to: encoder) }
}

/// A cursor's JSON form is its text form, one string.
func decodeCursor<C: LosslessStringConvertible>(from decoder: any Decoder, _ what: String) throws -> C {
    let text = try decoder.singleValueContainer().decode(String.self)
    guard let cursor = C(text) else {
        throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not \(what): \(text)"))
    }
    return cursor
}

/// Encodes a cursor as its text form.
func encodeCursor(_ cursor: some LosslessStringConvertible, to encoder: any Encoder) throws {
    var c = encoder.singleValueContainer()
    try c.encode(cursor.description)
}

/// Where a page of a chat list ends (`Node.chatList(limit:after:)`): the
/// last row's activity and chat. Written as 80 hex digits,
/// `u64be(lastActivity) ‖ chat id`.
public struct ChatListCursor: Hashable, Sendable, Codable, LosslessStringConvertible {
    /// The row's last activity (the list's order, newest first).
    package let lastActivity: HLC
    /// The row's chat (the order among equal activities, smaller ids first).
    package let chat: ChatID

    /// The place of `chat`, last active at `lastActivity`.
    package init(lastActivity: HLC, chat: ChatID) {
        self.lastActivity = lastActivity
        self.chat = chat
    }

    /// Reads the hex form; nil unless it is 80 hex digits.
    public init?(_ description: String) {
        guard let raw = Hex.decode(description), raw.count == 40, let id = Bytes32(raw[8...]) else { return nil }
        self.init(lastActivity: HLC(rawValue: Codec.readU64(raw[0..<8])), chat: ChatID(id))
    }

    /// The hex of `u64be(lastActivity) ‖ chat id`.
    public var description: String { Hex.encode(Codec.u64(lastActivity.rawValue) + chat.raw.bytes) }

    /// Decodes the hex form.
    public init(from decoder: any Decoder) throws { self = try decodeCursor(from: decoder, "a chat list cursor") }

    /// Encodes the hex form.
    public func encode(to encoder: any Encoder) throws { try encodeCursor(self, to: encoder) }
}

/// How far a member has read a chat: the furthest message their effective
/// `chat.read` events reached (Specs/projections.md §6.7), the message
/// `Node.markRead(_:upTo:)` names, with its sending HLC.
public struct ReadMarker: Hashable, Sendable, Codable {
    /// The furthest message marked read.
    public let message: MessageID
    /// That message's sending HLC; messages order by (HLC, id).
    public let hlc: HLC

    /// Whether `m` is at or before this marker in the chat's order.
    public func covers(_ m: MessageView) -> Bool { m.hlc < hlc || (m.hlc == hlc && !(message.raw < m.id.raw)) }

    /// The users among `markers` whose marker covers `message`, its sender
    /// left out, in key order: who has read it.
    package static func readers(of message: MessageView, among markers: [UserID: ReadMarker]) -> [UserID] {
        markers.filter { $0.key != message.sender && $0.value.covers(message) }.map(\.key).sorted()
    }

    /// A stored marker's canonical CBOR, `[hlc, message id]` (Specs/projections.md §5).
    static func encoded(hlc: UInt64, message: EventID) -> [UInt8] {
        var out: [UInt8] = [0x82]
        out.reserveCapacity(1 + 9 + 2 + 32)
        CBOREncoder.appendHead(major: 0, argument: hlc, to: &out)
        CBOREncoder.appendHead(major: 2, argument: 32, to: &out)
        message.append(to: &out)
        return out
    }

    /// A stored marker, `[hlc, message id]` (Specs/projections.md §5), read
    /// in place; any other layout goes the long way.
    static func decode(_ value: [UInt8]) throws -> ReadMarker {
        var r = HeadReader(value)
        if r.head(major: 4) == 2, let hlc = r.head(major: 0), let id = r.bytes32(), r.atEnd {
            return ReadMarker(message: MessageID(id), hlc: HLC(rawValue: hlc))
        }
        guard let a = try Codec.decode(value, "read marker").arrayValue, a.count == 2, let hlc = a[0].unsignedValue, let message = a[1].id32 else {
            throw ProjectionError.corrupt("read marker")
        }
        return ReadMarker(message: MessageID(message), hlc: HLC(rawValue: hlc))
    }
}

/// One chat of a chat list (`chatList(of:)`): what an inbox row shows.
package struct ChatSummary: Hashable, Sendable, Codable {
    /// The chat's record and current members (the title still sealed).
    package let chat: ChatView
    /// The newest message that took effect, deleted ones included, leaving
    /// out senders the viewer blocks; nil in a chat without messages.
    package let lastMessage: MessageView?
    /// Messages after the viewer's read marker that the viewer did not send
    /// and that are not deleted, leaving out senders the viewer blocks,
    /// counted up to `unreadLimit`: that value means at least as many (a
    /// list shows "99+").
    package let unread: Int

    /// Where unread counting stops.
    package static let unreadLimit = 100
    /// The viewer's own read marker; nil before they marked anything read.
    package let readMarker: ReadMarker?
    /// The last message's HLC, or the chat's creation when it has none: the
    /// list is sorted by it, newest first.
    package let lastActivity: HLC
    /// The device that signed the chat's creation (its sealed title's
    /// author), from the chat's row; nil when the row was not read.
    package var creatorDevice: PublicKey? = nil
}

/// One page of a chat as `chat(_:viewer:limit:before:)` returns it: the chat, a
/// run of its messages and everyone's read markers.
package struct ChatPage: Hashable, Sendable, Codable {
    /// The chat's record and current members.
    package let chat: ChatView
    /// Oldest first.
    package let messages: [MessageView]
    /// The cursor for the next (older) page, nil when this is the first message.
    package let older: MessageCursor?
    /// Per user, the furthest message their effective `chat.read` events
    /// reached (Specs/projections.md §6.7); users without one are absent.
    package let readMarkers: [UserID: ReadMarker]

    /// The users whose read marker covers `message` (its sender left out), in
    /// key order: who has read it.
    package func readers(of message: MessageView) -> [UserID] { ReadMarker.readers(of: message, among: readMarkers) }
}
