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
