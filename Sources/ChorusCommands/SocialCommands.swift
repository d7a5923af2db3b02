import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusEvents
import ChorusNode

/// follow, unfollow, like, unlike, block, unblock: one target each.
protocol RelationshipCommand: AsyncParsableCommand {
    var store: StoreOptions { get }
    var output: OutputOptions { get }
    var target: String { get }
    static var targetName: String { get }
    static var verb: String { get }
    static func act(_ node: Node, _ target: Bytes32) async throws -> EventID
}

extension RelationshipCommand {
    func validate() throws { _ = try parseKey(target, what: Self.targetName) }

    func run() async throws {
        let key = try parseKey(target, what: Self.targetName)
        try await mutate(store, output) { node in try await Self.perform(node, key) }
    }

    /// The mutation and what it reports: also what the local API runs for
    /// this command without parsing it (`DirectCommands`).
    static func perform(_ node: Node, _ key: Bytes32) async throws -> MutationResult {
        let event = try await act(node, key)
        return MutationResult(event: event, summary: "\(verb) \(key.short)", fields: [("target", .string(key.hex))])
    }
}

struct Follow: RelationshipCommand {
    static let configuration = CommandConfiguration(abstract: "Follow a user (their pictures join your feed).")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user to follow (64 hex digits).") var target: String
    static let targetName = "USER", verb = "Followed"
    static func act(_ node: Node, _ target: Bytes32) async throws -> EventID { try await node.follow(UserID(target)).id }
}

struct Unfollow: RelationshipCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stop following a user.", discussion: "Removes the follows this node has seen; one made concurrently elsewhere survives.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (64 hex digits).") var target: String
    static let targetName = "USER", verb = "Unfollowed"
    static func act(_ node: Node, _ target: Bytes32) async throws -> EventID { try await node.unfollow(UserID(target)).id }
}

struct Like: RelationshipCommand {
    static let configuration = CommandConfiguration(abstract: "Like a picture or message.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The picture or message id (64 hex digits).") var target: String
    static let targetName = "OBJECT", verb = "Liked"
    static func act(_ node: Node, _ target: Bytes32) async throws -> EventID { try await liking(node, target, like: true) }
}

struct Unlike: RelationshipCommand {
    static let configuration = CommandConfiguration(abstract: "Withdraw a like.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The picture or message id (64 hex digits).") var target: String
    static let targetName = "OBJECT", verb = "Unliked"
    static func act(_ node: Node, _ target: Bytes32) async throws -> EventID { try await liking(node, target, like: false) }
}

struct Block: RelationshipCommand {
    static let configuration = CommandConfiguration(
        abstract: "Block a user.", discussion: "A blocked user disappears from your feed, followers and chats.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user to block (64 hex digits).") var target: String
    static let targetName = "USER", verb = "Blocked"
    static func act(_ node: Node, _ target: Bytes32) async throws -> EventID { try await node.block(UserID(target)).id }
}

struct Unblock: RelationshipCommand {
    static let configuration = CommandConfiguration(abstract: "Unblock a user.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (64 hex digits).") var target: String
    static let targetName = "USER", verb = "Unblocked"
    static func act(_ node: Node, _ target: Bytes32) async throws -> EventID { try await node.unblock(UserID(target)).id }
}

/// A like names a picture or a message by id alone; the event is the same
/// either way, so the id is taken as a message's when this node holds one.
private func liking(_ node: Node, _ target: Bytes32, like: Bool) async throws -> EventID {
    if try node.projections.message(MessageID(target)) != nil {
        let message = MessageID(target)
        return try await (like ? node.like(message) : node.unlike(message)).id
    }
    let picture = PictureID(target)
    return try await (like ? node.like(picture) : node.unlike(picture)).id
}
