import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusOperations

/// follow, unfollow, like, unlike, block, unblock: one target each, the
/// operation `Relate`.
protocol RelationshipCommand: AsyncParsableCommand {
    var store: StoreOptions { get }
    var output: OutputOptions { get }
    var target: String { get }
    static var targetName: String { get }
    static var verb: Relate.Verb { get }
}

extension RelationshipCommand {
    func validate() throws { _ = try parseKey(target, what: Self.targetName) }

    func run() async throws {
        let key = try parseKey(target, what: Self.targetName)
        try await perform(Relate(Self.verb, key), store, output)
    }
}

struct Follow: RelationshipCommand {
    static let configuration = CommandConfiguration(abstract: "Follow a user (their pictures join your feed).")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user to follow (64 hex digits).") var target: String
    static let targetName = "USER"
    static let verb = Relate.Verb.follow
}

struct Unfollow: RelationshipCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stop following a user.", discussion: "Removes the follows this node has seen; one made concurrently elsewhere survives.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (64 hex digits).") var target: String
    static let targetName = "USER"
    static let verb = Relate.Verb.unfollow
}

struct Like: RelationshipCommand {
    static let configuration = CommandConfiguration(abstract: "Like a picture or message.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The picture or message id (64 hex digits).") var target: String
    static let targetName = "OBJECT"
    static let verb = Relate.Verb.like
}

struct Unlike: RelationshipCommand {
    static let configuration = CommandConfiguration(abstract: "Withdraw a like.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The picture or message id (64 hex digits).") var target: String
    static let targetName = "OBJECT"
    static let verb = Relate.Verb.unlike
}

struct Block: RelationshipCommand {
    static let configuration = CommandConfiguration(
        abstract: "Block a user.", discussion: "A blocked user disappears from your feed, followers and chats.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user to block (64 hex digits).") var target: String
    static let targetName = "USER"
    static let verb = Relate.Verb.block
}

struct Unblock: RelationshipCommand {
    static let configuration = CommandConfiguration(abstract: "Unblock a user.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (64 hex digits).") var target: String
    static let targetName = "USER"
    static let verb = Relate.Verb.unblock
}
