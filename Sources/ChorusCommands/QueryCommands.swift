import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusEncryption
import ChorusEvents
import ChorusNode
import ChorusOperations
import ChorusProjections
import ChorusReplay
import Foundation

struct Query: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Read the projections: profiles, pictures, relationships, chats, coins, slots, digest.",
        discussion: """
            USER defaults to this node's user. Queries open the store read-only. \
            A picture reference shows as the picture, as "removed" (deleted) or as \
            "unresolved" (not received yet).
            """,
        subcommands: [
            QueryProfile.self, QueryPictures.self, QueryPicture.self, QueryFollowers.self, QueryFollowing.self,
            QueryLikes.self, QueryFeed.self, QueryInbox.self, QueryChats.self, QueryChat.self, QueryBalance.self, QuerySlots.self,
            QueryDevices.self, QueryDigest.self, QueryNoEffect.self, QueryAudit.self,
        ])
}

/// A query: opens the store read-only and hands over the node.
protocol QueryCommand: AsyncParsableCommand {
    var store: StoreOptions { get }
    var output: OutputOptions { get }
    func query(_ node: Node) async throws
}

extension QueryCommand {
    func run() async throws { try await withNode(store, readOnly: true) { node in try await query(node) } }
}

struct QueryProfile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "profile", abstract: "A user's profile fields, avatar and devices.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (default: this node's user).") var user: String?
    func validate() throws { if let user { _ = try parseKey(user, what: "USER") } }

    func run() async throws {
        let operation = GetProfile(user: try user.map { try parseID($0, what: "USER") })
        let result = try await withNode(store, readOnly: true) { node in try await operation.run(on: node) }
        if output.json { return printJSON(try JSONValueEncoder().encode(result)) }
        let p = result.profile
        let fields = p.fields.filter { $0.name != "avatar" }
        var rows = [["user", p.user.hex]]
        rows += fields.map { [$0.name, fieldText($0.value)] }
        rows.append(["avatar", referenceText(p.avatar)])
        rows.append(["devices", p.devices.isEmpty ? "-" : p.devices.map { "\($0.device.short)\($0.name.map { " (\($0))" } ?? "")\($0.removedHLC == nil ? "" : " removed")" }.joined(separator: ", ")])
        emit(table(rows, header: ["FIELD", "VALUE"]))
    }
}

func printPictures(_ result: ListPictures.Result, json: Bool, empty: String) throws {
    let pictures = result.pictures
    if json {
        printJSON(try JSONValueEncoder().encode(result))
    } else if pictures.isEmpty {
        emit(empty)
    } else {
        emit(table(pictures.map { [$0.id.hex, $0.owner.short, $0.caption ?? "-", $0.mime ?? "-", $0.size.map(String.init) ?? "-", $0.hlc.description] },
            header: ["PICTURE", "OWNER", "CAPTION", "TYPE", "BYTES", "TIME"]))
    }
}

struct QueryPictures: QueryCommand {
    static let configuration = CommandConfiguration(commandName: "pictures", abstract: "A user's gallery in its order.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (default: this node's user).") var user: String?
    @Option(help: "At most this many pictures.") var limit: Int = 100
    @Option(help: "Skip this many first.") var offset: Int = 0
    func validate() throws {
        if let user { _ = try parseKey(user, what: "USER") }
        if limit < 0 || offset < 0 { throw ValidationError("--limit and --offset must not be negative") }
    }
    func query(_ node: Node) async throws {
        let result = try await ListPictures(.gallery(try userOrSelf(user, node), offset: offset), limit: limit).run(on: node)
        try printPictures(result, json: output.json, empty: "No pictures.")
    }
}

struct QueryPicture: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "picture", abstract: "One picture: live, deleted or unknown here.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The picture id.") var id: String
    func validate() throws { _ = try parseKey(id, what: "ID") }
    func run() async throws {
        let operation = GetPicture(try parseID(id, what: "ID", as: PictureID.self))
        let result = try await withNode(store, readOnly: true) { node in try await operation.run(on: node) }
        if output.json { return printJSON(try JSONValueEncoder().encode(result)) }
        switch result.lookup {
        case .live(let p):
            let rows: [[String]] = [
                ["id", p.id.hex], ["owner", p.owner.hex], ["caption", p.caption ?? "-"], ["type", p.mime ?? "-"],
                ["bytes", p.size.map(String.init) ?? "-"], ["size", p.width.map { w in "\(w)x\(p.height ?? 0)" } ?? "-"],
                ["blob", p.blob?.hex ?? "-"], ["created", p.hlc.description], ["likes", String(result.likes)],
            ]
            emit(table(rows, header: ["FIELD", "VALUE"]))
        case .deleted(let id, let owner, let at, let by):
            emit("Picture \(id.hex) of \(owner.short) was deleted at \(at) (event \(by.short)); its bytes are purged.")
        case .unknown(let id):
            emit("This node holds no picture \(id.hex) (unresolved: not received yet).")
        }
    }
}

/// `--limit` and `--after` of a paged list (Specs/api.md §5).
struct PageOptions: ParsableArguments {
    @Option(help: "At most this many (a page); without it and --after, the whole list.") var limit: Int?
    @Option(help: ArgumentHelp("Start after this id: the last one of the previous page.", valueName: "id")) var after: String?

    func validate() throws {
        if let limit, limit < 0 { throw ValidationError("--limit must not be negative") }
        if let after { _ = try parseKey(after, what: "--after") }
    }

    var afterKey: Bytes32? { after.flatMap { try? parseKey($0, what: "--after") } }
}

/// Says on standard error where the next page starts, when there is one.
func notePage(_ next: String?) {
    guard let next else { return }
    Console.writeError(Data("More follow: run again with --after \(next)\n".utf8))
}

struct QueryFollowers: QueryCommand {
    static let configuration = CommandConfiguration(commandName: "followers", abstract: "Users following USER (minus those USER blocked).")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (default: this node's user).") var user: String?
    func validate() throws { if let user { _ = try parseKey(user, what: "USER") } }
    @OptionGroup var page: PageOptions
    func query(_ node: Node) async throws {
        let result = try await ListRelated(.followers, of: try userOrSelf(user, node).raw, after: page.afterKey, limit: page.limit).run(on: node)
        keyList(result.keys, json: output.json, empty: "No followers.")
        notePage(result.nextPage)
    }
}

struct QueryFollowing: QueryCommand {
    static let configuration = CommandConfiguration(commandName: "following", abstract: "Users USER follows.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (default: this node's user).") var user: String?
    func validate() throws { if let user { _ = try parseKey(user, what: "USER") } }
    @OptionGroup var page: PageOptions
    func query(_ node: Node) async throws {
        let result = try await ListRelated(.following, of: try userOrSelf(user, node).raw, after: page.afterKey, limit: page.limit).run(on: node)
        keyList(result.keys, json: output.json, empty: "Follows nobody.")
        notePage(result.nextPage)
    }
}

struct QueryLikes: QueryCommand {
    static let configuration = CommandConfiguration(commandName: "likes", abstract: "Users who like a picture or message.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The picture or message id.") var object: String
    func validate() throws { _ = try parseKey(object, what: "OBJECT") }
    @OptionGroup var page: PageOptions
    func query(_ node: Node) async throws {
        let result = try await ListRelated(.likes, of: try parseKey(object, what: "OBJECT"), after: page.afterKey, limit: page.limit).run(on: node)
        keyList(result.keys, json: output.json, empty: "No likes.")
        notePage(result.nextPage)
    }
}

struct QueryFeed: QueryCommand {
    static let configuration = CommandConfiguration(
        commandName: "feed", abstract: "Pictures of the users you follow, newest first.",
        discussion: "For the next page pass the last picture's hlc (shown by --json) as --before.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Option(help: "At most this many pictures.") var limit: Int = 50
    @Option(help: ArgumentHelp("Only pictures older than this HLC (a number from --json).", valueName: "hlc")) var before: UInt64?
    func validate() throws { if limit < 0 { throw ValidationError("--limit must not be negative") } }
    func query(_ node: Node) async throws {
        let result = try await ListPictures(.feed(before: before.map(HLC.init(rawValue:))), limit: limit).run(on: node)
        try printPictures(
            result, json: output.json,
            empty: before == nil ? "Your feed is empty: follow someone with `chorus follow USER`." : "No older pictures in your feed.")
    }
}

/// A chat title for a terminal: the text, or why it is not shown.
func titleText(_ title: Readable<String>?) -> String {
    guard let title else { return "-" }
    switch title {
    case .content(let t): return terminalSafe(t)
    case .locked: return "[locked]"
    case .unreadable: return "[unreadable]"
    case .sealed: return "[sealed]"
    }
}

struct QueryChats: QueryCommand {
    static let configuration = CommandConfiguration(commandName: "chats", abstract: "The chats you are a member of.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @OptionGroup var page: PageOptions
    func query(_ node: Node) async throws {
        let result = try await ListChats(after: page.afterKey.map(ChatID.init), limit: page.limit).run(on: node)
        defer { notePage(result.nextPage) }
        let chats = result.chats
        if output.json {
            printJSON(try JSONValueEncoder().encode(result))
        } else if chats.isEmpty {
            emit("No chats.")
        } else {
            emit(table(chats.map { [$0.view.id.hex, titleText($0.title), String($0.view.members.count), String($0.view.messageCount)] },
                header: ["CHAT", "TITLE", "MEMBERS", "MESSAGES"]))
        }
    }
}

struct QueryInbox: QueryCommand {
    static let configuration = CommandConfiguration(
        commandName: "inbox", abstract: "Your chat list: each chat with its last message and your unread count, newest activity first.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Option(help: "At most this many chats (a page); without it and --after, the whole list.") var limit: Int?
    @Option(help: ArgumentHelp("Start after this row: the cursor of the previous page's last row.", valueName: "cursor")) var after: String?

    func validate() throws {
        if let limit, limit < 0 { throw ValidationError("--limit must not be negative") }
        if let after, ChatListCursor(after) == nil {
            throw ValidationError("--after must be a row's cursor (as `chorus query inbox --json` prints it), not \(after)")
        }
    }

    func query(_ node: Node) async throws {
        let result = try await ListInbox(after: after, limit: limit).run(on: node)
        defer { notePage(result.nextPage) }
        if output.json {
            printJSON(try JSONValueEncoder().encode(result))
        } else if result.rows.isEmpty {
            emit("No chats.")
        } else {
            emit(table(result.rows.map { row in
                [row.chat.view.id.hex, titleText(row.chat.title), row.unread >= ChatSummary.unreadLimit ? "\(ChatSummary.unreadLimit - 1)+" : String(row.unread),
                 row.lastActivity.description, row.lastMessage.map(messageText) ?? "-"]
            }, header: ["CHAT", "TITLE", "UNREAD", "LAST ACTIVITY", "LAST MESSAGE"]))
        }
    }
}

/// A message's text for a terminal: the text, or what can be said of it
/// without the key (Specs/encryption.md §8).
func messageText(_ r: ReadableMessage) -> String {
    let m = r.view
    if m.deleted != nil { return "(deleted)" }
    if m.purged { return "(content not held here)" }
    let edited = m.edited != nil ? " (edited)" : ""
    switch r.content {
    case .content(let c): return terminalSafe(c.text ?? "") + edited
    case .locked: return "[locked: \(m.body?.count ?? 0) sealed bytes; this device holds no key of epoch \(m.epoch?.short ?? "?")]"
    case .unreadable: return "[unreadable: the sealed body does not open]"
    case .sealed: return "[sealed: \(m.body?.count ?? 0) bytes]"
    }
}

func messagePicture(_ r: ReadableMessage) -> String {
    if let a = r.content.value?.attachment {
        return "attachment \(a.mime) \(a.size) bytes" + (a.width.map { w in r.content.value?.attachment?.height.map { " \(w)x\($0)" } ?? "" } ?? "")
    }
    if r.view.blob != nil, r.content.value == nil { return "[encrypted attachment]" }
    return r.picture == nil ? "-" : referenceText(r.picture)
}

struct QueryChat: QueryCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat", abstract: "A page of a chat's messages, oldest first.",
        discussion: """
            Shows the newest messages; pass the printed cursor as --before for the older page. Messages are \
            end-to-end encrypted: a member's device shows their text, any other node only that they exist \
            (sender, time, size).
            """)
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The chat id.") var id: String
    @Option(help: "At most this many messages.") var limit: Int = 50
    @Option(help: ArgumentHelp("The cursor printed with the previous page.", valueName: "cursor")) var before: String?
    func validate() throws {
        _ = try parseKey(id, what: "ID")
        if limit < 1 { throw ValidationError("--limit must be at least 1") }
    }
    func query(_ node: Node) async throws {
        let result: GetChatPage.Result
        do {
            result = try await GetChatPage(try parseID(id, what: "ID"), limit: limit, before: before).run(on: node)
        } catch let error as QueryError {
            // The command line's exit status and message for a chat not held, as they were.
            throw NodeError.refused(.chatUnreadable(error.description))
        }
        if output.json { return printJSON(try JSONValueEncoder().encode(result)) }
        let page = result.page
        let title = page.chat.title.map { " " + ($0.value.map { "\"\(terminalSafe($0))\"" } ?? titleText($0)) } ?? ""
        emit("chat \(page.chat.view.id.hex)\(title)")
        emit("members: \(page.chat.view.members.map { $0.user.short + ($0.admin ? " (admin)" : "") }.joined(separator: ", "))")
        if page.messages.isEmpty {
            emit("No messages.")
        } else {
            emit(table(page.messages.map { r in
                [r.view.id.hex, r.view.sender.short, r.view.hlc.description, messageText(r), messagePicture(r)]
            }, header: ["MESSAGE", "SENDER", "TIME", "TEXT", "PICTURE"]))
        }
        if let older = page.older { emit("older messages: --before \(older)") }
    }
}

struct QueryBalance: QueryCommand {
    static let configuration = CommandConfiguration(commandName: "balance", abstract: "A user's coin balance, by device.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (default: this node's user).") var user: String?
    func validate() throws { if let user { _ = try parseKey(user, what: "USER") } }
    func query(_ node: Node) async throws {
        let result = try await GetBalance(user: try userOrSelf(user, node)).run(on: node)
        if output.json { return printJSON(try JSONValueEncoder().encode(result)) }
        let b = result.balance
        emit("balance \(b.total) coins (user \(b.user.short))")
        if !b.devices.isEmpty { emit(deviceRows(b.devices)) }
        if b.userKeyRights > 0 { emit("held by the user key itself: \(b.userKeyRights)") }
    }
}

struct QuerySlots: QueryCommand {
    static let configuration = CommandConfiguration(commandName: "slots", abstract: "A user's lock slots: price, state, picture.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (default: this node's user).") var user: String?
    func validate() throws { if let user { _ = try parseKey(user, what: "USER") } }
    func query(_ node: Node) async throws {
        let result = try await GetSlots(user: try userOrSelf(user, node)).run(on: node)
        if output.json { return printJSON(try JSONValueEncoder().encode(result)) }
        let slots = result.slots
        emit(table(slots.map { [String($0.slot), String($0.price), $0.unlocked ? "unlocked" : "locked", $0.unlocked ? ($0.picture == nil ? "(empty)" : referenceText($0.picture)) : "-"] },
            header: ["SLOT", "PRICE", "STATE", "PICTURE"]))
    }
}

struct QueryDevices: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "devices", abstract: "A user's devices with their coin rights.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The user (default: this node's user).") var user: String?
    func validate() throws { if let user { _ = try parseKey(user, what: "USER") } }
    func run() async throws { try await printDevices(store, output, user) }
}

struct QueryAudit: QueryCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit",
        abstract: "Trace every coin from its purchase receipt, checking the escrow counter's invariants (as `chorus-replay audit coins`).",
        discussion: "Exit status 0 when every invariant holds, 1 with findings.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "Only this user's devices and coins (default: everyone).") var user: String?
    func validate() throws { if let user { _ = try parseKey(user, what: "USER") } }

    func query(_ node: Node) async throws {
        let audit = try await AuditCoins(user: try user.map { try parseKey($0, what: "USER") }).run(on: node).audit
        printCoinAudit(audit, json: output.json)
        if !audit.findings.isEmpty { throw ExitCode(Exit.finding) }
    }
}

struct QueryDigest: QueryCommand {
    static let configuration = CommandConfiguration(
        commandName: "digest", abstract: "The projection digest: equal on two nodes exactly when their projected state is.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    func query(_ node: Node) async throws {
        let result = try await GetDigest().run(on: node)
        if output.json { printJSON(try JSONValueEncoder().encode(result)) } else { emit(result.digest) }
    }
}

struct QueryNoEffect: QueryCommand {
    static let configuration = CommandConfiguration(
        commandName: "no-effect", abstract: "Stored events that took no effect, with the rule that stopped them.")
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Option(help: "At most this many.") var limit: Int = 100
    func validate() throws { if limit < 0 { throw ValidationError("--limit must not be negative") } }
    func query(_ node: Node) async throws {
        let result = try await ListNoEffect(limit: limit).run(on: node)
        if output.json {
            printJSON(try JSONValueEncoder().encode(result))
        } else if result.entries.isEmpty {
            emit("Every stored event took effect.")
        } else {
            emit(table(result.entries.map { e in [String(e.event.prefix(16)), e.kind, e.code, e.reason] }, header: ["EVENT", "KIND", "CODE", "REASON"]))
        }
    }
}

struct Upgrade: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upgrade a store written by an older version of Chorus to this version's format.",
        discussion: """
            Copies every event (with its arrival position, payload or purge, and fork evidence) into the current \
            layout, then folds the projections again; blobs and keys stay as they are, and the projection digest \
            is the same afterwards. Stop any `chorus serve` on the store first. An interrupted upgrade resumes \
            where it stopped when run again. Progress goes to stderr when it is a terminal.
            """)
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let bar = ProgressBar()
        let upgraded = try await Node.upgrade(at: store.path) { done, total in bar.update("upgrading", done, total) }
        bar.finish()
        let (events, digest) = try await withNode(store) { node in (try node.log.eventCount(), try node.projections.digest()) }
        if output.json {
            printJSON(.object([
                ("upgraded", .bool(upgraded)), ("format", .uint(Node.storeFormat)), ("events", .int(Int64(events))),
                ("digest", .string(digest.hex)),
            ]))
        } else if upgraded {
            emit("Upgraded \(store.path) to store format \(Node.storeFormat): \(events) events kept, projections folded again.")
            emit("digest  \(digest.hex)")
        } else {
            emit("\(store.path) already has store format \(Node.storeFormat) (\(events) events); nothing to do.")
        }
    }
}

struct Compact: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Give the store file's free pages back to the file system.",
        discussion: """
            LMDB keeps the pages it frees for later writes, so after a large import or first sync the file \
            stays larger than the data in it. This writes a copy of the pages in use beside the store, checks \
            that it holds the same events and projection digest, and renames it over the store's file: stopped \
            at any moment, the store is either as it was or compacted. Stop every process that has the store open \
            (`chorus serve`, readers) first. Needs free disk space for the pages in use.
            """)
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        var options = NodeOptions()
        options.writerLockWait = StoreOptions.writerLockWait
        let bar = ProgressBar()
        let result = try await Node.compact(at: store.path, options: options) { stage, step, steps in bar.update(stage, step, steps) }
        bar.finish()
        if output.json {
            printJSON(.object([
                ("bytes_before", .int(Int64(result.bytesBefore))), ("bytes_after", .int(Int64(result.bytesAfter))),
                ("events", .int(Int64(result.events))), ("digest", .string(result.digest.hex)),
            ]))
        } else {
            let mib = { (bytes: Int) in String(format: "%.1f MiB", Double(bytes) / 1_048_576) }
            emit("Compacted \(store.path): \(mib(result.bytesBefore)) → \(mib(result.bytesAfter)) (\(result.events) events, digest unchanged).")
            emit("digest  \(result.digest.hex)")
        }
    }
}

struct Rebuild: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Rebuild the projections from the log and print the digest before and after.",
        discussion: """
            The digests are equal unless the projections were damaged. Also prints how long the rebuild \
            itself took (the digests apart). Progress goes to stderr when it is a terminal.
            """)
    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let bar = ProgressBar()
        let (before, after, events, seconds) = try await withNode(store) { node in
            let before = try node.projections.digest()
            let started = ContinuousClock.now
            try await node.rebuildProjections { done, total in bar.update("folding the log", done, total) }
            let elapsed = ContinuousClock.now - started
            bar.finish()
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            return (before, try node.projections.digest(), try node.log.eventCount(), seconds)
        }
        let took = String(format: "%.3f", seconds)
        if output.json {
            printJSON(.object([
                ("before", .string(before.hex)), ("after", .string(after.hex)), ("events", .int(Int64(events))),
                ("equal", .bool(before == after)), ("seconds", .string(took)),
            ]))
        } else {
            emit("before  \(before.hex)")
            emit("after   \(after.hex)")
            emit(
                before == after
                    ? "Rebuilt \(events) events in \(took) s; the digest is unchanged."
                    : "Rebuilt \(events) events in \(took) s; the digest CHANGED: the old projections differed from the log.")
        }
    }
}
