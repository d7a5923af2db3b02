import ArgumentParser
import ChorusCommandLine
import ChorusEvents
import ChorusCrypto
import ChorusNode
import ChorusOperations
import ChorusProjections
import Foundation

struct Picture: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Add, caption, reorder, delete and read pictures.",
        subcommands: [PictureAdd.self, PictureCaption.self, PictureMove.self, PictureDelete.self, PictureGet.self])
}

struct PictureAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Store an image file as a blob and create a picture owned by this user; prints its id.",
        discussion: "The type is recognised from the file's first bytes (JPEG, PNG, GIF, WebP, HEIC, AVIF) unless --mime is given.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The image file.") var file: String
    @Option(help: "A caption.") var caption: String?
    @Option(help: ArgumentHelp("The MIME type, e.g. image/png.", valueName: "type")) var mime: String?

    func run() async throws {
        let operation = AddPicture(try readImageFile(file), mime: mime, caption: caption)
        let report = try await withNode(store) { node in try await operation.run(on: node) }
        if !output.json { emit(report.fields.picture) }
        try show(report, json: output.json)
    }
}

/// Reads an image file, refusing a missing, unreadable or oversized one.
/// The size is checked with `stat` before anything is read, and at most one
/// byte past the limit is ever read (a file that grows, a device file), so
/// memory stays bounded whatever the file.
func readImageFile(_ path: String) throws -> [UInt8] {
    let limit = NodeOptions().maxBlobBytes
    func tooLarge(_ size: UInt64) -> CommandFailure {
        CommandFailure(message: "\(path) is \(size) bytes; a picture may be at most \(limit) bytes (16 MiB): shrink or recompress it")
    }
    let file = Console.path(path)
    guard let attributes = try? FileManager.default.attributesOfItem(atPath: file) else {
        throw CommandFailure(message: "cannot read \(path): no such file or not readable")
    }
    if attributes[.type] as? FileAttributeType == .typeDirectory {
        throw CommandFailure(message: "\(path) is a directory, not an image file")
    }
    let size = (attributes[.size] as? NSNumber)?.uint64Value ?? 0
    if size > UInt64(limit) { throw tooLarge(size) }
    guard let handle = FileHandle(forReadingAtPath: file) else {
        throw CommandFailure(message: "cannot read \(path): not readable")
    }
    defer { try? handle.close() }
    let data: Data
    do { data = try handle.read(upToCount: limit + 1) ?? Data() } catch {
        throw CommandFailure(message: "cannot read \(path): \(error.localizedDescription)")
    }
    if data.count > limit { throw tooLarge(UInt64(data.count)) }
    return Array(data)
}

struct PictureCaption: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "caption", abstract: "Set a picture's caption.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The picture id (64 hex digits).") var id: String
    @Argument(help: "The new caption.") var text: String

    func validate() throws { _ = try parseKey(id, what: "ID") }

    func run() async throws {
        let picture = try parseID(id, what: "ID", as: PictureID.self)
        try await perform(ChangePicture(picture, .caption(text)), store, output)
    }
}

struct PictureMove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "move", abstract: "Move a picture within this user's gallery.",
        discussion: "Give exactly one of --before, --after, --first, --last.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The picture to move (64 hex digits).") var id: String
    @Option(help: ArgumentHelp("Put it just before this picture.", valueName: "id")) var before: String?
    @Option(help: ArgumentHelp("Put it just after this picture.", valueName: "id")) var after: String?
    @Flag(help: "Put it first.") var first = false
    @Flag(help: "Put it last.") var last = false

    func validate() throws {
        _ = try parseKey(id, what: "ID")
        let given = [before != nil, after != nil, first, last].filter { $0 }.count
        guard given == 1 else { throw ValidationError("give exactly one of --before ID2, --after ID2, --first, --last") }
        _ = try placement()
    }

    func placement() throws -> GalleryPlacement {
        if let before { return .before(try parseID(before, what: "--before")) }
        if let after { return .after(try parseID(after, what: "--after")) }
        return first ? .first : .last
    }

    func run() async throws {
        let picture = try parseID(id, what: "ID", as: PictureID.self)
        let placement = try placement()
        try await perform(ChangePicture(picture, .move(placement)), store, output)
    }
}

struct PictureDelete: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete", abstract: "Delete a picture (final) and purge its bytes.",
        discussion: "The picture disappears from every projection that referred to it: the avatar resets, a lock slot empties, likes vanish, chat messages show it as removed.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The picture id (64 hex digits).") var id: String

    func validate() throws { _ = try parseKey(id, what: "ID") }

    func run() async throws {
        let picture = try parseID(id, what: "ID", as: PictureID.self)
        try await perform(ChangePicture(picture, .delete), store, output)
    }
}

struct PictureGet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "get", abstract: "Write a picture's image bytes to a file.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The picture id (64 hex digits).") var id: String
    @Option(help: ArgumentHelp("The file to write (- for standard output).", valueName: "file")) var out: String

    func validate() throws { _ = try parseKey(id, what: "ID") }

    func run() async throws {
        let picture = try parseID(id, what: "ID", as: PictureID.self)
        let bytes: [UInt8] = try await withNode(store, readOnly: true) { node in
            do {
                return [UInt8](try await GetPictureBytes(picture).run(on: node).data)
            } catch let failure as OperationError {
                throw CommandFailure(message: failure.message)
            }
        }
        if out == "-" {
            Console.write(Data(bytes))
            return
        }
        guard FileManager.default.createFile(atPath: Console.path(out), contents: Data(bytes)) else {
            throw CommandFailure(message: "cannot write \(out): check the directory exists and is writable")
        }
        if output.json {
            printJSON(.object([("picture", .string(picture.hex)), ("bytes", .int(Int64(bytes.count))), ("file", .string(out))]))
        } else {
            emit("Wrote \(bytes.count) bytes to \(out)")
        }
    }
}
