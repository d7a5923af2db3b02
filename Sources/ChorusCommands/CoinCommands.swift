import ArgumentParser
import ChorusCommandLine
import ChorusEvents
import ChorusCrypto
import ChorusNode
import ChorusOperations

struct Coins: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Credit, spend, give and move coins.",
        discussion: """
            Coins are spending rights held by devices. A device spends, gives or \
            moves only within its own rights; an event that would exceed them takes \
            no effect. Check with `chorus query balance`.
            """,
        subcommands: [CoinsCredit.self, CoinsSpend.self, CoinsGive.self, CoinsMove.self])
}

struct CoinsCredit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "credit", abstract: "Credit a purchase to a user (issuer key required).",
        discussion: """
            A receipt (the store's transaction id) is credited once however often it \
            is delivered: a repeated delivery is stored but takes no effect (exit 1). \
            Acknowledge the purchase to the store once this command succeeded. The \
            coins land on --device, or on the user's first device this node knows.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The buyer (user key).") var user: String
    @Argument(help: "How many coins.") var amount: String
    @Option(help: ArgumentHelp("The store's transaction id.", valueName: "txid")) var receipt: String
    @Option(help: ArgumentHelp("The buyer's device to credit.", valueName: "hex")) var device: String?
    @Option(help: "The product bought.") var product: String?

    func validate() throws {
        _ = try parseKey(user, what: "USER")
        _ = try parseAmount(amount)
        if let device { _ = try parseKey(device, what: "--device") }
        if receipt.isEmpty { throw ValidationError("--receipt must not be empty") }
    }

    func run() async throws {
        let buyer = try parseID(user, what: "USER", as: UserID.self)
        let coins = try parseAmount(amount)
        let target = try device.map { try parseID($0, what: "--device", as: DeviceID.self) }
        try await perform(MoveCoins(coins, .credit(user: buyer, receipt: receipt, device: target, product: product)), store, output)
    }
}

struct CoinsSpend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "spend", abstract: "Spend coins from this device's rights.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "How many coins.") var amount: String
    @Option(name: .customLong("for"), help: ArgumentHelp("What the coins pay for.", valueName: "text")) var purpose: String

    func validate() throws { _ = try parseAmount(amount) }

    func run() async throws {
        let coins = try parseAmount(amount)
        try await perform(MoveCoins(coins, .spend(for: purpose)), store, output)
    }
}

struct CoinsGive: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "give", abstract: "Give coins from this device's rights to another user.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The recipient (user key).") var user: String
    @Argument(help: "How many coins.") var amount: String
    @Option(help: ArgumentHelp("The recipient's device to land on (default: their first device).", valueName: "hex"))
    var device: String?
    @Option(help: "A note for the recipient.") var note: String?

    func validate() throws {
        _ = try parseKey(user, what: "USER")
        _ = try parseAmount(amount)
        if let device { _ = try parseKey(device, what: "--device") }
    }

    func run() async throws {
        let recipient = try parseID(user, what: "USER", as: UserID.self)
        let coins = try parseAmount(amount)
        let target = try device.map { try parseID($0, what: "--device", as: DeviceID.self) }
        try await perform(MoveCoins(coins, .give(to: recipient, device: target, note: note)), store, output)
    }
}

struct CoinsMove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "move", abstract: "Move spending rights from this device to another device of this user.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The sibling device.") var device: String
    @Argument(help: "How many coins.") var amount: String

    func validate() throws {
        _ = try parseKey(device, what: "DEVICE")
        _ = try parseAmount(amount)
    }

    func run() async throws {
        let sibling = try parseID(device, what: "DEVICE", as: DeviceID.self)
        let coins = try parseAmount(amount)
        try await perform(MoveCoins(coins, .moveRights(to: sibling)), store, output)
    }
}

struct Slot: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Unlock lock slots and put pictures in them.", subcommands: [SlotUnlock.self, SlotSet.self])
}

struct SlotUnlock: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unlock", abstract: "Unlock a slot of your profile, spending its price (see `chorus network show`).")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The slot number (slot 0 is always unlocked).") var slot: Int

    func run() async throws {
        try await perform(ChangeSlot(slot, .unlock), store, output)
    }
}

struct SlotSet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Put one of your pictures in an unlocked slot, or empty it with --empty.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The slot number.") var slot: Int
    @Argument(help: "The picture id.") var picture: String?
    @Flag(help: "Empty the slot.") var empty = false

    func validate() throws {
        if empty == (picture != nil) { throw ValidationError("give either a PICTURE or --empty") }
        if let picture { _ = try parseKey(picture, what: "PICTURE") }
    }

    func run() async throws {
        let id = try picture.map { try parseID($0, what: "PICTURE", as: PictureID.self) }
        try await perform(ChangeSlot(slot, .set(id)), store, output)
    }
}
