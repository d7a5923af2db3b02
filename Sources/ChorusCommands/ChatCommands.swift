import ArgumentParser
import ChorusCommandLine
import ChorusEvents
import ChorusCrypto
import ChorusNode
import ChorusOperations
import ChorusStorage
import Foundation

struct Chat: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create chats, manage members, send, edit and delete messages.",
        discussion: "Read a chat with `chorus query chat ID`; list yours with `chorus query chats`.",
        subcommands: [
            ChatCreate.self, ChatAdd.self, ChatRemove.self, ChatLeave.self, ChatSend.self, ChatEdit.self, ChatDelete.self,
            ChatRead.self, ChatAttachment.self,
        ])
}

struct ChatCreate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create", abstract: "Create a chat with you as administrator; prints its id.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Option(help: "A title.") var title: String?
    @Option(name: .customLong("member"), help: ArgumentHelp("A user to add as member (repeatable).", valueName: "user"))
    var members: [String] = []

    func validate() throws {
        for m in members { _ = try parseKey(m, what: "--member") }
        if let title, title.utf8.count > PayloadLimits.chatTitleBytes {
            throw ValidationError("--title is at most \(PayloadLimits.chatTitleBytes) bytes of UTF-8, got \(title.utf8.count)")
        }
    }

    func run() async throws {
        let operation = CreateChat(title: title, members: try members.map { try parseID($0, what: "--member", as: UserID.self) })
        let report = try await withNode(store) { node in try await operation.run(on: node) }
        if !output.json { emit(report.fields.chat) }
        try show(report, json: output.json)
    }
}

struct ChatAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "add", abstract: "Add a member to a chat (administrators only).")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The chat id.") var chat: String
    @Argument(help: "The user to add.") var user: String
    @Flag(help: "Make the member an administrator.") var admin = false

    func validate() throws {
        _ = try parseKey(chat, what: "CHAT")
        _ = try parseKey(user, what: "USER")
    }

    func run() async throws {
        let (chatID, userKey) = (try parseID(chat, what: "CHAT", as: ChatID.self), try parseID(user, what: "USER", as: UserID.self))
        try await perform(ChangeMembership(chatID, .add(userKey, admin: admin)), store, output)
    }
}

struct ChatRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "remove", abstract: "Remove a member from a chat (administrators only).")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The chat id.") var chat: String
    @Argument(help: "The member to remove.") var user: String

    func validate() throws {
        _ = try parseKey(chat, what: "CHAT")
        _ = try parseKey(user, what: "USER")
    }

    func run() async throws {
        let (chatID, userKey) = (try parseID(chat, what: "CHAT", as: ChatID.self), try parseID(user, what: "USER", as: UserID.self))
        try await perform(ChangeMembership(chatID, .remove(userKey)), store, output)
    }
}

struct ChatLeave: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "leave", abstract: "Leave a chat.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The chat id.") var chat: String

    func validate() throws { _ = try parseKey(chat, what: "CHAT") }

    func run() async throws {
        let chatID = try parseID(chat, what: "CHAT", as: ChatID.self)
        try await perform(ChangeMembership(chatID, .leave), store, output)
    }
}

struct ChatSend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send", abstract: "Send a message (text, a picture, or both); prints the message id.",
        discussion: """
            The message is end-to-end encrypted to the chat's members' devices. --image sends a picture file \
            inside the chat, encrypted too (relays store only ciphertext); --picture refers to an existing \
            picture by id. A message takes effect only if you are a member of the chat when you send it.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The chat id.") var chat: String
    @Option(help: "The message text.") var text: String?
    @Option(help: ArgumentHelp("A picture to show in the message.", valueName: "id")) var picture: String?
    @Option(help: ArgumentHelp("An image file to send, encrypted, inside the chat.", valueName: "file")) var image: String?

    func validate() throws {
        _ = try parseKey(chat, what: "CHAT")
        if let picture { _ = try parseKey(picture, what: "--picture") }
        if text == nil, picture == nil, image == nil { throw ValidationError("give --text, --picture, --image or a combination") }
        if let text, let problem = Self.textProblem(text) { throw ValidationError("--text \(problem)") }
    }

    /// Why a message text cannot be sealed (Specs/encryption.md §7: 1…4000 UTF-8 bytes), or nil.
    static func textProblem(_ text: String) -> String? {
        let n = text.utf8.count
        if n == 0 { return "is empty: leave it out to send only a picture" }
        if n > PayloadLimits.messageTextBytes { return "is at most \(PayloadLimits.messageTextBytes) bytes of UTF-8, got \(n)" }
        return nil
    }

    func run() async throws {
        let chatID = try parseID(chat, what: "CHAT", as: ChatID.self)
        let pictureID = try picture.map { try parseID($0, what: "--picture", as: PictureID.self) }
        let imageBytes = try image.map { try readImageFile($0) }
        let operation = SendMessage(chat: chatID, text: text, picture: pictureID, image: imageBytes)
        let report = try await withNode(store) { node in try await operation.run(on: node) }
        if !output.json { emit(report.fields.message) }
        try show(report, json: output.json)
    }
}

struct ChatEdit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "edit", abstract: "Edit the text of one of your messages.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The message id.") var message: String
    @Argument(help: "The new text.") var text: String

    func validate() throws {
        _ = try parseKey(message, what: "MESSAGE")
        if let problem = ChatSend.textProblem(text) { throw ValidationError("TEXT \(problem)") }
    }

    func run() async throws {
        let id = try parseID(message, what: "MESSAGE", as: MessageID.self)
        try await perform(ChangeMessage(id, newText: text), store, output)
    }
}

struct ChatDelete: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete", abstract: "Delete one of your messages (purges its text and picture reference).")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The message id.") var message: String

    func validate() throws { _ = try parseKey(message, what: "MESSAGE") }

    func run() async throws {
        let id = try parseID(message, what: "MESSAGE", as: MessageID.self)
        try await perform(ChangeMessage(id, newText: nil), store, output)
    }
}

struct ChatRead: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "read", abstract: "Mark a chat read up to a message (the marker never moves backwards).")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The chat id.") var chat: String
    @Argument(help: "The last message read.") var message: String

    func validate() throws {
        _ = try parseKey(chat, what: "CHAT")
        _ = try parseKey(message, what: "MESSAGE")
    }

    func run() async throws {
        let (chatID, id) = (try parseID(chat, what: "CHAT", as: ChatID.self), try parseID(message, what: "MESSAGE", as: MessageID.self))
        try await perform(MarkRead(chat: chatID, upTo: id), store, output)
    }
}

struct ChatAttachment: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachment", abstract: "Save the picture sent inside a message, decrypted on this device.",
        discussion: """
            Only a member device that holds the message's epoch key can decrypt it; relays hold only the \
            ciphertext. The encrypted blob arrives with `chorus sync`.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The message id.") var message: String
    @Option(name: .customLong("output"), help: ArgumentHelp("Where to write the image.", valueName: "file")) var file: String

    func validate() throws { _ = try parseKey(message, what: "MESSAGE") }

    func run() async throws {
        let id = try parseID(message, what: "MESSAGE", as: MessageID.self)
        let (bytes, mime) = try await withNode(store, readOnly: true) { node -> ([UInt8], String) in
            guard let view = try node.projections.message(id) else {
                throw CommandFailure(message: "no message \(id.short) in this store: check the id, or sync first")
            }
            guard let blob = view.blob else { throw CommandFailure(message: "message \(id.short) has no picture sent inside it") }
            guard let content = try node.readableMessage(view).content.value else {
                throw CommandFailure(message: "this device cannot read message \(id.short): it holds no key of its epoch (not a member then, or the key has not arrived: sync with a member's node)")
            }
            guard try node.blobs.read(blob) != nil else {
                throw CommandFailure(message: "the encrypted picture of message \(id.short) has not arrived yet: run `chorus sync`")
            }
            guard let (bytes, attachment) = try await node.attachmentBytes(of: id), content.attachment != nil else {
                throw CommandFailure(message: "the picture of message \(id.short) does not decrypt with the key in its message")
            }
            return (bytes, attachment.mime)
        }
        // Decrypted private content: readable by its owner only.
        do { try OwnerOnlyFile.replace(Console.path(file), with: Data(bytes)) } catch {
            throw CommandFailure(message: "cannot write \(file): \(error)")
        }
        if output.json {
            printJSON(.object([("message", .string(id.hex)), ("file", .string(file)), ("mime", .string(mime)), ("bytes", .uint(UInt64(bytes.count)))]))
        } else {
            emit("Saved the picture of message \(id.short) (\(mime), \(bytes.count) bytes) to \(file)")
        }
    }
}
