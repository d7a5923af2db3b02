import ArgumentParser
import ChorusCommandLine
import ChorusEvents
import ChorusCrypto
import ChorusNode
import ChorusOperations
import ChorusProjections
import Foundation

// MARK: Devices

struct Device: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Bind, unbind and list the devices of a user.",
        discussion: """
            A second device of a user starts with `chorus init --user USER` on that \
            device, which prints the `chorus device add` command to run here, on a \
            node holding the user key.
            """,
        subcommands: [DeviceAdd.self, DeviceRemove.self, DeviceList.self])
}

struct DeviceAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Bind a device to this user (user key required; signs device.added).",
        discussion: "DEVICE and --proof are printed by `chorus init --user USER` on the new device.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The new device's public key (64 hex digits).") var device: String
    @Option(help: ArgumentHelp("The device's signature consenting to this user (128 hex digits).", valueName: "hex"))
    var proof: String
    @Option(help: "A name for the device.") var name: String?

    func validate() throws {
        _ = try parseKey(device, what: "DEVICE")
        guard let bytes = Hex.decode(proof.lowercased()), bytes.count == 64 else {
            throw ValidationError("--proof must be 128 hex digits (as printed by `chorus init --user`), got \"\(proof)\"")
        }
    }

    func run() async throws {
        let key = try parseID(device, what: "DEVICE", as: DeviceID.self)
        let proofBytes = Hex.decode(proof.lowercased()) ?? []
        try await perform(ChangeDevice(key, .add(proof: proofBytes, name: name)), store, output)
    }
}

struct DeviceRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Unbind a device from this user (user key required; signs device.removed).",
        discussion: "Events the device signs after its removal take no effect; its coins stay the user's.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The device's public key (64 hex digits).") var device: String
    @Option(help: "Why the device is removed (kept in the event).") var reason: String?

    func validate() throws { _ = try parseKey(device, what: "DEVICE") }

    func run() async throws {
        let key = try parseID(device, what: "DEVICE", as: DeviceID.self)
        try await perform(ChangeDevice(key, .remove(reason: reason)), store, output)
    }
}

struct DeviceList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List a user's devices with their coin rights (same as `chorus query devices`).")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (default: this node's user).") var user: String?

    func validate() throws { if let user { _ = try parseKey(user, what: "USER") } }

    func run() async throws { try await printDevices(store, output, user) }
}

func printDevices(_ store: StoreOptions, _ output: OutputOptions, _ userText: String?) async throws {
    let user = try userText.map { try parseID($0, what: "USER", as: UserID.self) }
    let result = try await withNode(store, readOnly: true) { node in try await ListDevices(user: user).run(on: node) }
    let devices = result.devices
    if output.json {
        printJSON(try JSONValueEncoder().encode(result))
    } else if devices.isEmpty {
        emit("No devices known for this user.")
    } else {
        emit(deviceRows(devices))
    }
}

// MARK: Issuers and the network configuration

struct Issuer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage this node's coin issuer key.", subcommands: [IssuerCreate.self])
}

struct IssuerCreate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Create an issuer key in this store (for a test network) and print its public key.",
        discussion: """
            The key is added to this store's network configuration. Every other \
            node of the network must list it too: create them with \
            `chorus init --issuer KEY`, or copy this store's network.json with \
            `chorus init --network FILE`. Only events signed by an issuer key \
            credit coins. Run it while no other command uses the store. If the \
            store already holds an issuer key, prints that key.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let existed = FileManager.default.fileExists(atPath: store.path + "/keys/issuer.secret")
        let key = try Node.createIssuer(at: store.path)
        if !existed {
            // The configuration changed: open once for writing so the
            // projections are rebuilt now and read-only queries work at once.
            await release(try store.open())
        }
        if output.json {
            printJSON(.object([("issuer", .string(key.hex)), ("created", .bool(!existed))]))
            return
        }
        emit(key.hex)
        emit(existed ? "This store already holds this issuer key." : "Created this issuer key and added it to this store's network configuration.")
        emit("Other nodes of this network pass it at creation: chorus init --issuer \(key.hex)")
        emit("(or copy \(store.path)/\(NetworkConfig.fileName) with `chorus init --network FILE`).")
    }
}

struct Network: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the network configuration, or the invite that joins a node to it.",
        subcommands: [NetworkShow.self, NetworkInvite.self, NetworkRelayAdd.self, NetworkRelayRemove.self])
}

struct NetworkInvite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "invite",
        abstract: "Print this network's invite: one line that joins a new node to it.",
        discussion: """
            The invite holds the whole configuration: the network key, the issuer keys and the slot prices \
            (Specs/projections.md §1.1). A new node joins with `chorus init --network INVITE`. It carries the \
            network key, which keeps outsiders from connecting: share it like a password, with members only.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let result = try await withNode(store, readOnly: true) { node in try await GetInvite().run(on: node) }
        if output.json {
            printJSON(try JSONValueEncoder().encode(result))
        } else {
            emit(result.invite)
        }
    }
}

struct NetworkShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Show this store's network configuration: issuer keys and lock slot prices.",
        discussion: "Nodes whose configurations differ may disagree on balances, so their digests differ.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let result = try await withNode(store, readOnly: true) { node in try await GetNetwork().run(on: node) }
        if output.json { return printJSON(try JSONValueEncoder().encode(result)) }
        let config = result.config
        emit("issuers      \(config.issuers.isEmpty ? "(none: no coins can be credited)" : config.issuers.map(\.hex).joined(separator: "\n             "))")
        emit("slot prices  \(config.slotPrices.map(String.init).joined(separator: ", "))")
        emit("relays       \(config.bootstrapRelays.isEmpty ? "(none: give an address to chorus sync)" : config.bootstrapRelays.map { "\($0.key.hex)@\($0.address)" }.joined(separator: "\n             "))")
        emit("fingerprint  \(config.fingerprint.hex)")
    }
}

/// `[{"address", "key"}, …]`: a configuration's bootstrap relays.
func bootstrapRelaysJSON(_ config: NetworkConfig) -> JSONValue {
    .array(config.bootstrapRelays.map { .object([("address", .string($0.address)), ("key", .string($0.key.hex))]) })
}

/// Edits the bootstrap relays of this store's network.json (Specs/projections.md §1).
private func editBootstrapRelays(_ store: StoreOptions, _ edit: (inout [BootstrapRelay]) throws -> Void) throws -> NetworkConfig {
    let path = store.path + "/" + NetworkConfig.fileName
    var config = try NetworkConfig.load(from: path)
    try edit(&config.bootstrapRelays)
    if let problem = config.problems.first { throw ValidationError("invalid network configuration: \(problem)") }
    try config.write(to: path)
    return config
}

struct NetworkRelayAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay-add",
        abstract: "Add a bootstrap relay to this network's configuration: a relay every node may sync with first.",
        discussion: """
            Written KEY@HOST:PORT, KEY the relay node's device key (its `chorus whoami`), which its handshake must \
            prove. The invite (`chorus network invite`) then carries it, so a node that joins knows where to sync \
            (`chorus sync` with no address). It does not change projections or the digest; a running server reads \
            it at its next start.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The relay, KEY@HOST:PORT.") var relay: String

    func validate() throws { _ = try parseBootstrapRelay(relay) }

    func run() async throws {
        let parsed = try parseBootstrapRelay(relay)
        let config = try editBootstrapRelays(store) { relays in
            relays.removeAll { $0.key == parsed.key }
            relays.append(BootstrapRelay(address: parsed.address, key: parsed.key))
        }
        if output.json {
            printJSON(.object([("bootstrap_relays", bootstrapRelaysJSON(config))]))
        } else {
            emit("Added bootstrap relay \(parsed.address); the network's invite now carries \(config.bootstrapRelays.count).")
        }
    }
}

struct NetworkRelayRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay-remove", abstract: "Remove a bootstrap relay from this network's configuration, by key or address.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The relay's KEY (64 hex digits) or HOST:PORT.") var relay: String

    func run() async throws {
        let target = relay
        let config = try editBootstrapRelays(store) { relays in
            let before = relays.count
            relays.removeAll { $0.address == target || $0.key.hex == target.lowercased() }
            guard relays.count < before else { throw ValidationError("this network has no bootstrap relay \(target)") }
        }
        if output.json {
            printJSON(.object([("bootstrap_relays", bootstrapRelaysJSON(config))]))
        } else {
            emit("Removed bootstrap relay \(target).")
        }
    }
}

/// A bootstrap relay, KEY@HOST:PORT: roles belong to a user's relay list,
/// so one written with them is refused rather than its roles dropped.
func parseBootstrapRelay(_ text: String) throws -> Relay {
    guard !text.contains("=") else {
        throw ValidationError("a bootstrap relay is KEY@HOST:PORT, without roles (roles belong in a user's relay list: chorus relays set), got \"\(text)\"")
    }
    guard text.contains("@") else { throw ValidationError("\"\(text)\" is not KEY@HOST:PORT") }
    return try parseRelay(text)
}
