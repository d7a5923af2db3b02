import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusOperations
import ChorusProjections
import Foundation

/// `chorus relays`: the user's relay list, a signed `relays.set` event
/// (Specs/events.md §6.2.29, Specs/projections.md §6.12).
struct Relays: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show or publish the relays that hold your feeds (home) and take what others send you (inbox).",
        discussion: """
            A relay is written [ROLES=]KEY@HOST:PORT: KEY is the relay node's device key (its `chorus whoami`; \
            its handshake must prove it), ROLES is home, inbox or home,inbox (the default). At most 8 relays. \
            The list is public to the network: anyone may learn where to find you.
            """,
        subcommands: [RelaysShow.self, RelaysSet.self, RelaysAdd.self, RelaysRemove.self])
}

/// Parses `[ROLES=]KEY@HOST:PORT`; a usage error says what is wrong.
func parseRelay(_ text: String) throws -> Relay {
    do { return try Relay(parsing: text) } catch let error as OperationError { throw ValidationError(error.message) }
}

func relayText(_ relay: Relay) -> String {
    "\(relay.roles.names.joined(separator: ",").padding(toLength: 10, withPad: " ", startingAt: 0)) \(relay.address)  \(relay.key.hex)"
}

/// Publishes the list as `change` makes it and reports the mutation; a
/// relay to remove that the list lacks is a usage error, as before.
private func publish(_ store: StoreOptions, _ output: OutputOptions, _ change: PublishRelays.Change) async throws {
    do {
        try await perform(PublishRelays(change), store, output)
    } catch let error as OperationError where error.code == "relay_not_listed" {
        throw ValidationError(error.message)
    }
}

struct RelaysShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "Show a user's relay list (default: yours).")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (64 hex digits; default this node's user).") var user: String?

    func validate() throws { if let user { _ = try parseKey(user, what: "USER") } }

    func run() async throws {
        let operation = GetRelays(user: try user.map { try parseID($0, what: "USER") })
        let result = try await withNode(store, readOnly: true) { node in try await operation.run(on: node) }
        let (user, list) = (result.user, result.list)
        if output.json { return printJSON(try JSONValueEncoder().encode(result)) }
        guard let list, !list.relays.isEmpty else {
            emit(list == nil ? "No relay list: user \(user.short) has published none." : "User \(user.short) cleared its relay list.")
            return
        }
        for relay in list.relays { emit(relayText(relay)) }
    }
}

struct RelaysSet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Publish your relay list, replacing the previous one.",
        discussion: "Relays are listed in order of preference. --clear publishes an empty list.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Option(name: .customLong("relay"), help: ArgumentHelp("A relay, [ROLES=]KEY@HOST:PORT (repeatable).", valueName: "relay"))
    var relays: [String] = []
    @Flag(help: "Publish an empty list.") var clear = false

    func validate() throws {
        if clear == !relays.isEmpty { throw ValidationError("give one or more --relay, or --clear") }
        for r in relays { _ = try parseRelay(r) }
    }

    func run() async throws {
        try await publish(store, output, .set(try relays.map(parseRelay)))
    }
}

struct RelaysAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add", abstract: "Add a relay to your list, or change the roles of one already in it.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The relay, [ROLES=]KEY@HOST:PORT.") var relay: String

    func validate() throws { _ = try parseRelay(relay) }

    func run() async throws {
        try await publish(store, output, .add(try parseRelay(relay)))
    }
}

struct RelaysRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove", abstract: "Remove a relay from your list, by its key or its address.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The relay's KEY (64 hex digits) or HOST:PORT.") var relay: String

    func run() async throws {
        try await publish(store, output, .remove(relay))
    }
}
