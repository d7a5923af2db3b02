import ArgumentParser
import ChorusCBOR
import ChorusEvents
import ChorusNode
import Foundation

struct Init: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create a store with a new user key and device key.",
        discussion: """
            Creates the store directory (mode 700), a user key and a device key \
            (secret key files readable by the owner only), and the first event: \
            the user key binding the device (device.added). With --name, also \
            sets the user's profile name.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Option(help: "The user's display name (sets the profile field `name`).")
    var name: String?
    @Option(name: .customLong("device-name"), help: "A name for this device (default: the host name).")
    var deviceName: String?

    func run() async throws {
        let node = try await Node.create(
            at: store.path, deviceName: deviceName ?? ProcessInfo.processInfo.hostName)
        if let name {
            try await node.append(.profileSet, object: node.identity.user,
                payload: .textMap([("field", .text("name")), ("value", .text(name))]))
        }
        await node.close()
        if output.json {
            printJSON(identityJSON(node.identity))
        } else {
            print("Created a Chorus store at \(store.path)")
            print("user    \(node.identity.user.hex)")
            print("device  \(node.identity.device.hex)")
        }
    }
}

struct Whoami: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show this store's user and device ids.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let node = try await store.open(readOnly: true)
        if output.json {
            printJSON(identityJSON(node.identity))
        } else {
            print("user    \(node.identity.user.hex)")
            print("device  \(node.identity.device.hex)")
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
            Fields: \(ProfileField.allCases.map(\.rawValue).joined(separator: ", ")). \
            birthday is YYYY-MM-DD; avatar is a picture id (64 hex digits); \
            visibility is public, followers or private. Use --clear instead of \
            a value to reset a field.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The field to set.") var field: String
    @Argument(help: "The new value.") var value: String?
    @Flag(help: "Reset the field to no value.") var clear = false

    func validate() throws {
        guard ProfileField(rawValue: field) != nil else {
            throw ValidationError(
                "unknown profile field \"\(field)\"; fields are \(ProfileField.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        if clear == (value != nil) { throw ValidationError("give either a VALUE or --clear") }
    }

    func run() async throws {
        // Validated above.
        let field = ProfileField(rawValue: self.field)!
        let cborValue: CBORValue
        if clear {
            cborValue = .null
        } else if field == .avatar {
            cborValue = .bytes(try parseKey(value ?? "", what: "avatar (a picture id)").bytes)
        } else {
            cborValue = .text(value ?? "")
        }
        let node = try await store.open()
        let event = try await node.append(.profileSet, object: node.identity.user,
            payload: .textMap([("field", .text(field.rawValue)), ("value", cborValue)]))
        await node.close()
        if output.json {
            printJSON(.object([("id", .string(event.id.hex)), ("seq", .uint(event.seq))]))
        } else {
            print("Set \(field.rawValue) (event \(event.id.short), seq \(event.seq))")
        }
    }
}
