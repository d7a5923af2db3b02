import ChorusCrypto
import ChorusEvents
import ChorusNode

/// Send a message to a chat (Specs/api.md §5.1): text, a picture of the
/// sender's by id, an image sent inside the chat, or a combination.
/// `POST /v1/chats/{id}/messages`; `chorus chat send`.
public struct SendMessage: NodeOperation {
    /// `{"message": …}`: the new message's id.
    public struct Fields: Encodable, Sendable {
        /// The message id in hex.
        public let message: String
    }

    /// The chat.
    public let chat: ChatID
    /// The text (1 to 4,000 UTF-8 bytes), if any.
    public let text: String?
    /// A picture shown in the message, if any.
    public let picture: PictureID?
    /// An image sent inside the chat, encrypted, if any.
    public let image: [UInt8]?

    /// A message to `chat`.
    public init(chat: ChatID, text: String? = nil, picture: PictureID? = nil, image: [UInt8]? = nil) {
        self.chat = chat
        self.text = text
        self.picture = picture
        self.image = image
    }

    /// Seals and sends the message.
    public func run(on node: Node) async throws -> MutationReport<Fields> {
        let mutation = try await node.sendMessage(chat, text: text, picture: picture, image: image)
        return MutationReport(
            Fields(message: mutation.object.hex), mutation, summary: "Sent message \(mutation.object.short) to chat \(chat.short)")
    }
}

/// Mark a chat read up to a message (the marker never moves backwards).
/// `POST /v1/chats/{id}/read`; `chorus chat read`.
public struct MarkRead: NodeOperation {
    /// The chat.
    public let chat: ChatID
    /// The last message read.
    public let message: MessageID

    /// Read `chat` up to `message`.
    public init(chat: ChatID, upTo message: MessageID) {
        self.chat = chat
        self.message = message
    }

    /// Signs and commits the marker.
    public func run(on node: Node) async throws -> MutationReport<NoFields> {
        MutationReport(NoFields(), try await node.markRead(chat, upTo: message), summary: "Marked chat \(chat.short) read up to \(message.short)")
    }
}

/// Create a chat with this user as administrator (Specs/api.md §5.1).
/// `POST /v1/chats`; `chorus chat create`.
public struct CreateChat: NodeOperation {
    /// `{"chat": …}`: the new chat's id.
    public struct Fields: Encodable, Sendable {
        /// The chat id in hex.
        public let chat: String
    }

    /// The title (at most 200 UTF-8 bytes), sealed to the members.
    public let title: String?
    /// The other members.
    public let members: [UserID]

    /// A chat titled `title` with `members`.
    public init(title: String? = nil, members: [UserID] = []) {
        self.title = title
        self.members = members
    }

    /// Creates the chat and wraps its key for the members' devices this node knows.
    public func run(on node: Node) async throws -> MutationReport<Fields> {
        let created = try await node.createChat(title: title, members: members)
        return MutationReport(Fields(chat: created.object.hex), created, summary: "Created chat \(created.object.short)")
    }
}

/// Add a member to a chat, or remove one (administrators only), or leave it.
/// `POST /v1/chats/{id}/members`, `DELETE /v1/chats/{id}/members/{user}`,
/// `POST /v1/chats/{id}/leave`; `chorus chat add|remove|leave`.
public struct ChangeMembership: NodeOperation {
    /// What changes.
    public enum Change: Sendable {
        /// `user` joins, as an administrator or not.
        case add(UserID, admin: Bool)
        /// `user` is removed.
        case remove(UserID)
        /// This node's user leaves.
        case leave
    }

    /// The chat.
    public let chat: ChatID
    /// The change.
    public let change: Change

    /// `change` in `chat`.
    public init(_ chat: ChatID, _ change: Change) {
        self.chat = chat
        self.change = change
    }

    /// Signs and commits the membership event (and, for an addition, the new member's key wraps).
    public func run(on node: Node) async throws -> MutationReport<NoFields> {
        switch change {
        case .add(let user, let admin):
            MutationReport(NoFields(), try await node.addChatMember(chat, user, admin: admin), summary: "Added \(user.short) to chat \(chat.short)")
        case .remove(let user):
            MutationReport(NoFields(), try await node.removeChatMember(chat, user), summary: "Removed \(user.short) from chat \(chat.short)")
        case .leave:
            MutationReport(NoFields(), try await node.leaveChat(chat), summary: "Left chat \(chat.short)")
        }
    }
}

/// Edit the text of one of this user's messages, or delete one (its text
/// and picture reference are purged). `POST /v1/messages/{id}/edit`,
/// `DELETE /v1/messages/{id}`; `chorus chat edit|delete`.
public struct ChangeMessage: NodeOperation {
    /// The message.
    public let message: MessageID
    /// The new text (1 to 4,000 UTF-8 bytes), or nil to delete the message.
    public let newText: String?

    /// Replaces the text of `message` with `newText`, or deletes it when nil.
    public init(_ message: MessageID, newText: String?) {
        self.message = message
        self.newText = newText
    }

    /// Seals and signs the edit, or signs the deletion.
    public func run(on node: Node) async throws -> MutationReport<NoFields> {
        if let newText {
            return MutationReport(NoFields(), try await node.editMessage(message, text: newText), summary: "Edited message \(message.short)")
        }
        return MutationReport(NoFields(), try await node.deleteMessage(message), summary: "Deleted message \(message.short)")
    }
}

extension SendMessage.Fields: ReportFields {
    /// `{"message"}`.
    public static var fields: [(String, JSONSchema)] { [("message", .hex32)] }
}

extension CreateChat.Fields: ReportFields {
    /// `{"chat"}`.
    public static var fields: [(String, JSONSchema)] { [("chat", .hex32)] }
}
