import ArgumentParser
import ChorusCommandLine
import ChorusService
import Foundation

/// `chorus api-token`: the local API's bearer token (Specs/api.md §3).

struct APITokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api-token",
        abstract: "Show or replace the bearer token of the local API on TCP (keys/api.token).",
        subcommands: [APITokenShow.self, APITokenRotate.self])
}

struct APITokenShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Print the local API's token, making one if the store has none.",
        discussion: "A client sends it as Authorization: Bearer TOKEN; a browser opens http://HOST:PORT/#token=TOKEN once.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let path = APIPaths.token(inStore: store.path)
        let token = try APIToken.loadOrCreate(at: path)
        if output.json {
            printJSON(.object([("token", .string(token)), ("file", .string(path))]))
        } else {
            emit(token)
        }
    }
}

struct APITokenRotate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate",
        abstract: "Replace the local API's token with a new one and print it.",
        discussion: """
            A running `chorus serve` takes the new token at its next request: the old token, and every \
            page session a browser made with it, stop working at once.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        guard FileManager.default.fileExists(atPath: store.path) else {
            throw ValidationError("no store at \(store.path): give --store DIR or set CHORUS_STORE")
        }
        let path = APIPaths.token(inStore: store.path)
        let token = try APIToken.rotate(at: path)
        if output.json {
            printJSON(.object([("token", .string(token)), ("file", .string(path))]))
        } else {
            emit(token)
            emit("Written to \(path); the previous token no longer works.")
        }
    }
}
