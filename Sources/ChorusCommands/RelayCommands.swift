import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusEvents
import ChorusNode
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

/// Parses `[ROLES=]KEY@HOST:PORT`.
func parseRelay(_ text: String) throws -> Relay {
    var rest = Substring(text)
    var roles = Relay.Roles.all
    if let equals = rest.firstIndex(of: "=") {
        let names = rest[..<equals].split(separator: ",").map(String.init)
        guard let parsed = Relay.Roles(names: names) else {
            throw ValidationError("\"\(text)\": the roles before = are home, inbox or home,inbox")
        }
        roles = parsed
        rest = rest[rest.index(after: equals)...]
    }
    guard let at = rest.firstIndex(of: "@") else { throw ValidationError("\"\(text)\" is not [ROLES=]KEY@HOST:PORT") }
    let key = try parseKey(String(rest[..<at]), what: "the relay's KEY")
    let address = String(rest[rest.index(after: at)...])
    guard RelayAddress.isValid(address) else {
        throw ValidationError("\"\(address)\" is not HOST:PORT (a DNS name or [IPv6 literal], a port 1...65535)")
    }
    return Relay(address: address, key: key, roles: roles)
}

func relayJSON(_ relay: Relay) -> JSONValue {
    .object([("address", .string(relay.address)), ("key", .string(relay.key.hex)), ("roles", .array(relay.roles.names.map { .string($0) }))])
}

func relayText(_ relay: Relay) -> String {
    "\(relay.roles.names.joined(separator: ",").padding(toLength: 10, withPad: " ", startingAt: 0)) \(relay.address)  \(relay.key.hex)"
}

/// Publishes `relays` as the whole list and reports the mutation.
private func publish(_ store: StoreOptions, _ output: OutputOptions, _ relays: (Node) throws -> [Relay], summary: String) async throws {
    try await mutate(store, output) { node in
        let list = try relays(node)
        let event = try await node.setRelays(list).id
        return MutationResult(event: event, summary: summary, fields: [("relays", .array(list.map(relayJSON)))])
    }
}

/// The relays of this user's current list (empty when none).
private func currentRelays(_ node: Node) throws -> [Relay] {
    try node.projections.relays(of: node.identity.user)?.relays ?? []
}

struct RelaysShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "Show a user's relay list (default: yours).")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (64 hex digits; default this node's user).") var user: String?

    func validate() throws { if let user { _ = try parseKey(user, what: "USER") } }

    func run() async throws {
        let (user, list) = try await withNode(store, readOnly: true) { node in
            let user = try userOrSelf(self.user, node)
            return (user, try node.projections.relays(of: user))
        }
        if output.json {
            printJSON(
                .object([
                    ("user", .string(user.hex)), ("relays", .array((list?.relays ?? []).map(relayJSON))), ("hlc", hlcJSON(list?.hlc)),
                    ("event", optionalString(list?.event.hex)),
                ]))
            return
        }
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
        let list = try relays.map(parseRelay)
        try await publish(store, output, { _ in list }, summary: clear ? "Cleared your relay list" : "Published \(list.count) relays")
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
        let new = try parseRelay(relay)
        try await publish(
            store, output,
            { node in
                var list = try currentRelays(node)
                if let i = list.firstIndex(where: { $0.key == new.key }) { list[i] = new } else { list.append(new) }
                return list
            }, summary: "Added relay \(new.address)")
    }
}

struct RelaysRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove", abstract: "Remove a relay from your list, by its key or its address.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The relay's KEY (64 hex digits) or HOST:PORT.") var relay: String

    func run() async throws {
        let target = relay
        try await publish(
            store, output,
            { node in
                let list = try currentRelays(node)
                let kept = list.filter { $0.address != target && $0.key.hex != target.lowercased() }
                guard kept.count < list.count else { throw ValidationError("your relay list holds no relay \(target)") }
                return kept
            }, summary: "Removed relay \(target)")
    }
}
