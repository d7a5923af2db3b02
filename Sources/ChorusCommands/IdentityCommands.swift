import ArgumentParser
import ChorusCommandLine
import ChorusCBOR
import ChorusEvents
import ChorusNode
import ChorusOperations
import ChorusProjections
import ChorusCrypto
import Foundation

struct Init: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create a store with a new user key and device key.",
        discussion: """
            Creates the store directory (mode 700), a user key and a device key \
            (secret key files readable by the owner only), and the first event: \
            the user key binding the device (device.added). With --name, also \
            sets the user's profile name.

            Every node of one network must share its configuration (network key, \
            issuer keys and slot prices, stored as network.json): create it once, \
            then join every other node with --network INVITE (printed by \
            `chorus network invite` on a member) or --network FILE (a member's \
            network.json). Options given the same way on two nodes do not make one \
            network: each new configuration has its own network key.

            With --user HEX, creates a second device of an existing user instead: \
            only a device key is made here, and the command prints the \
            `chorus device add` command to run on a node holding the user key.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Option(help: "The user's display name (sets the profile field `name`).")
    var name: String?
    @Option(name: .customLong("device-name"), help: "A name for this device (default: the host name).")
    var deviceName: String?
    @Option(name: .customLong("issuer"), help: ArgumentHelp(
        "A public key whose coin credits take effect in this network (repeatable).", valueName: "hex"))
    var issuers: [String] = []
    @Option(help: ArgumentHelp(
        "Join this network: an invite (`chorus network invite` on a member node) or a copy of a member's network.json.",
        valueName: "invite|file"))
    var network: String?
    @Option(name: .customLong("slot-prices"), help: ArgumentHelp(
        "Lock slot prices in coins, comma-separated; the first must be 0 (default \(NetworkConfig.defaultSlotPrices.map(String.init).joined(separator: ","))).",
        valueName: "list"))
    var slotPrices: String?
    @Option(help: ArgumentHelp("Create a device-only store for this existing user.", valueName: "hex"))
    var user: String?

    func validate() throws {
        for issuer in issuers { _ = try parseKey(issuer, what: "--issuer") }
        if let user { _ = try parseKey(user, what: "--user") }
        if user != nil, name != nil {
            throw ValidationError("--name cannot be used with --user: set the name from a node of that user with `chorus profile set name NAME`")
        }
        _ = try parsedSlotPrices()
    }

    func parsedSlotPrices() throws -> [UInt64]? {
        guard let slotPrices else { return nil }
        var prices: [UInt64] = []
        for part in slotPrices.split(separator: ",", omittingEmptySubsequences: false) {
            guard let n = UInt64(part.trimmingCharacters(in: .whitespaces)) else {
                throw ValidationError("--slot-prices must be whole numbers separated by commas, like 0,50,100; got \"\(slotPrices)\"")
            }
            prices.append(n)
        }
        return prices
    }

    func networkConfig() throws -> NetworkConfig {
        var base = NetworkConfig()
        if let network {
            base = network.hasPrefix("chorus-network") ? try NetworkConfig(invite: network) : try NetworkConfig.load(from: network)
        }
        var keys = base.issuers
        for text in issuers {
            let key = try parseKey(text, what: "--issuer")
            if !keys.contains(key) { keys.append(key) }
        }
        let config = NetworkConfig(
            issuers: keys, slotPrices: try parsedSlotPrices() ?? base.slotPrices, networkKey: base.networkKey,
            bootstrapRelays: base.bootstrapRelays)
        if let problem = config.problems.first { throw ValidationError("invalid network configuration: \(problem)") }
        return config
    }

    func run() async throws {
        let config = try networkConfig()
        if let user {
            try await createDevice(user: try parseID(user, what: "--user"), config: config)
            return
        }
        let node = try await Node.create(
            at: store.path, deviceName: deviceName ?? ProcessInfo.processInfo.hostName, network: config)
        if let name {
            try await node.setProfile(.name, .text(name))
        }
        await node.close()
        if output.json {
            printJSON(identityJSON(node.identity))
        } else {
            emit("Created a Chorus store at \(store.path)")
            emit("user    \(node.identity.user.hex)")
            emit("device  \(node.identity.device.hex)")
        }
    }

    func createDevice(user: UserID, config: NetworkConfig) async throws {
        let node = try await Node.createDevice(at: store.path, user: user, network: config)
        await node.close()
        let proof = Hex.encode(try node.bindingProof())
        var command = "chorus device add \(node.identity.device.hex) --proof \(proof)"
        if let deviceName { command += " --name '\(deviceName.replacingOccurrences(of: "'", with: "'\\''"))'" }
        if output.json {
            printJSON(.object([
                ("user", .string(user.hex)), ("device", .string(node.identity.device.hex)), ("proof", .string(proof)),
                ("command", .string(command)),
            ]))
        } else {
            emit("Created a device-only Chorus store at \(store.path)")
            emit("user    \(user.hex)")
            emit("device  \(node.identity.device.hex)")
            emit("")
            emit("This device acts for the user once the user binds it. On a node holding the user key, run:")
            emit("  \(command)")
            emit("then move that node's events here (chorus export / chorus import).")
        }
    }
}

struct Whoami: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show this store's user and device ids.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let me = try await withNode(store, readOnly: true) { node in try await GetIdentity().run(on: node) }
        if output.json {
            printJSON(try JSONValueEncoder().encode(me))
        } else {
            emit("user    \(me.user)")
            emit("device  \(me.device)")
        }
    }
}

func identityJSON(_ identity: Identity) -> JSONValue {
    .object([("user", .string(identity.user.hex)), ("device", .string(identity.device.hex))])
}

struct Profile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Edit this user's profile.", subcommands: [ProfileSet.self])
}

struct ProfileSet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set",
        abstract: "Set one profile field (appends a profile.set event).",
        discussion: """
            Fields: \(ProfileField.settable.map(\.rawValue).joined(separator: ", ")). \
            birthday is YYYY-MM-DD; avatar is a picture id (64 hex digits). Every profile \
            field is public to the network. Use --clear instead of a value to reset a field.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The field to set.") var field: String
    @Argument(help: "The new value.") var value: String?
    @Flag(help: "Reset the field to no value.") var clear = false

    func validate() throws {
        guard let parsed = ProfileField(rawValue: field) else {
            throw ValidationError(
                "unknown profile field \"\(field)\"; fields are \(ProfileField.settable.map(\.rawValue).joined(separator: ", "))")
        }
        if parsed.isRetired {
            throw ValidationError(
                "the profile field \(field) is retired: profiles are public to the network, and a setting that hid them from non-followers would promise privacy the network cannot give")
        }
        if clear == (value != nil) { throw ValidationError("give either a VALUE or --clear") }
    }

    func run() async throws {
        if !clear, field == ProfileField.avatar.rawValue { _ = try parseKey(value ?? "", what: "avatar (a picture id)") }
        let operation = try SetProfile(named: field, text: clear ? nil : (value ?? ""))
        let result = try await withNode(store) { node in try await operation.run(on: node) }
        if output.json {
            printJSON(try JSONValueEncoder().encode(result))
        } else {
            emit("Set \(field) (event \(result.id.short), seq \(result.seq))")
        }
    }
}
