#if Service
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusOperations
import Foundation

/// One REST endpoint of the local API (Specs/api.md §5): its path, its
/// parameters and body fields, and what answers it: a typed operation
/// (`ChorusOperations`), or the `chorus` command line that prints the same
/// JSON with `--json` for endpoints not yet typed.
public struct CommandRoute: Sendable {
    public enum Method: String, Sendable { case get = "GET", post = "POST", delete = "DELETE" }

    /// Where a command-line argument comes from.
    public enum Argument: Sendable {
        /// Fixed text (the command's words).
        case word(String)
        /// A path parameter, `{name}` in the path: a positional argument.
        case path(String)
        /// An optional query parameter given as a positional argument.
        case query(String)
        /// An optional query parameter given as `--option=value`.
        case queryOption(String, String)
        /// A required field of the JSON body, as a positional argument.
        case field(String)
        /// An optional field of the JSON body, as a positional argument.
        case optionalField(String)
        /// An optional field of the JSON body given as `--option=value` (a list repeats it).
        case fieldOption(String, String)
        /// A boolean field of the JSON body: `--flag` when true.
        case fieldFlag(String, String)
        /// A boolean query parameter: `--flag` when "true" or "1".
        case queryFlag(String, String)
        /// The request body, saved to a temporary file whose path is the argument.
        case upload
        /// `-`: standard output or input.
        case dash
    }

    public let method: Method
    /// The path, with `{name}` for parameters.
    public let path: String
    public let summary: String
    public let arguments: [Argument]
    /// The typed operation that answers the endpoint: with JSON, or with
    /// bytes (an image, an export). Every endpoint has one: the two
    /// initializers take one or the other.
    let answer: Answer

    enum Answer: Sendable {
        case json(OperationEndpoint)
        case bytes(BytesEndpoint)
    }

    /// An endpoint answered with the JSON of `operation`.
    init(_ method: Method, _ path: String, _ summary: String, _ arguments: [Argument], operation: OperationEndpoint) {
        (self.method, self.path, self.summary, self.arguments) = (method, path, summary, arguments)
        answer = .json(operation)
    }

    /// An endpoint answered with the bytes of `bytes`.
    init(_ method: Method, _ path: String, _ summary: String, _ arguments: [Argument], bytes: BytesEndpoint) {
        (self.method, self.path, self.summary, self.arguments) = (method, path, summary, arguments)
        answer = .bytes(bytes)
    }

    /// The endpoint answers JSON (what its command prints with `--json`); otherwise bytes.
    public var json: Bool { if case .json = answer { true } else { false } }

    /// The operation that answers JSON, nil for bytes.
    var operation: OperationEndpoint? { if case .json(let o) = answer { o } else { nil } }

    /// The schema of a 200 answer with JSON, nil when the answer is bytes.
    public var answerSchema: JSONSchema? { operation?.resultSchema }

    public enum InputError: Error, CustomStringConvertible, Equatable {
        case missingField(String)
        case badField(String)
        case badBody(String)
        case unknownField(String)

        public var description: String {
            switch self {
            case .missingField(let f): "the JSON body needs the field \"\(f)\""
            case .badField(let f): "the field \"\(f)\" must be a string, a whole number, a boolean or a list of strings"
            case .badBody(let why): "the body must be a JSON object: \(why)"
            case .unknownField(let f): "the JSON body has a field \"\(f.prefix(80))\" this endpoint does not take"
            }
        }

        /// As an operation's failure: a request the endpoint cannot take (400).
        var failure: OperationError {
            let code: String =
                switch self {
                case .missingField: "missing_field"
                case .badField: "bad_field"
                case .badBody: "bad_body"
                case .unknownField: "unknown_field"
                }
            return OperationError(.badInput, code: code, description)
        }
    }

    /// The body fields the endpoint takes (any other is refused, Specs/api.md §5).
    var bodyFields: Set<String> {
        Set(arguments.compactMap {
            switch $0 {
            case .field(let name), .optionalField(let name), .fieldOption(let name, _), .fieldFlag(let name, _): name
            default: nil
            }
        })
    }


    /// The route a concrete path (`/v1/chats/ab12…`) names, with its path parameters.
    public static func match(_ method: Method, _ path: String) -> (CommandRoute, [String: String])? {
        let given = path.split(separator: "/", omittingEmptySubsequences: false)
        for route in all where route.method == method {
            let pattern = route.path.split(separator: "/", omittingEmptySubsequences: false)
            guard pattern.count == given.count else { continue }
            var parameters: [String: String] = [:]
            var matches = true
            for (p, g) in zip(pattern, given) {
                if p.hasPrefix("{") {
                    guard !g.isEmpty else { matches = false; break }
                    parameters[String(p.dropFirst().dropLast())] = String(g).removingPercentEncoding ?? String(g)
                } else if p != g {
                    matches = false
                    break
                }
            }
            if matches { return (route, parameters) }
        }
        return nil
    }

    var needsUpload: Bool { arguments.contains { if case .upload = $0 { true } else { false } } }
    var readsBody: Bool {
        arguments.contains {
            switch $0 {
            case .field, .optionalField, .fieldOption, .fieldFlag: true
            default: false
            }
        }
    }

    /// A relationship endpoint: `verb` of the path parameter `parameter`.
    static func relate(_ verb: Relate.Verb, _ parameter: String, _ what: String) -> OperationEndpoint {
        OperationEndpoint { r in Relate(verb, try r.pathID(parameter, what: what)) }
    }

    /// Every endpoint (Specs/api.md §5; Specs/api.openapi.json lists the same).
    /// The query parameters of a paged list (Specs/api.md §5).
    static let page: [Argument] = [.queryOption("limit", "--limit"), .queryOption("after", "--after")]

    public static let all: [CommandRoute] = [
        // Identity and network
        .init(.get, "/v1/whoami", "This node's user and device", [.word("whoami")], operation: OperationEndpoint { _ in GetIdentity() }),
        .init(
            .get, "/v1/network", "The network configuration: issuers, slot prices, bootstrap relays", [.word("network"), .word("show")],
            operation: OperationEndpoint { _ in GetNetwork() }),
        .init(
            .get, "/v1/network/invite", "The invite that joins a node to this network", [.word("network"), .word("invite")],
            operation: OperationEndpoint { _ in GetInvite() }),
        .init(
            .get, "/v1/devices", "A user's devices with their coin rights", [.word("query"), .word("devices"), .query("user")],
            operation: OperationEndpoint { r in ListDevices(user: try r.queryID("user").map(UserID.init)) }),
        .init(
            .post, "/v1/devices", "Bind a device to this user",
            [.word("device"), .word("add"), .field("device"), .fieldOption("proof", "--proof"), .fieldOption("name", "--name")],
            operation: OperationEndpoint { r in
                let proof = try r.requiredText("proof")
                guard let bytes = Hex.decode(proof.lowercased()), bytes.count == 64 else {
                    throw OperationError(.badInput, code: "bad_proof", "proof must be 128 hex digits (as printed by `chorus init --user`)")
                }
                return ChangeDevice(DeviceID(try r.requiredID("device")), .add(proof: bytes, name: try r.text("name")))
            }),
        .init(
            .delete, "/v1/devices/{device}", "Unbind a device from this user", [.word("device"), .word("remove"), .path("device"), .queryOption("reason", "--reason")],
            operation: OperationEndpoint { r in ChangeDevice(DeviceID(try r.pathID("device", what: "DEVICE")), .remove(reason: r.query["reason"])) }),
        // Profiles
        .init(
            .get, "/v1/profile", "A user's profile", [.word("query"), .word("profile"), .query("user")],
            operation: OperationEndpoint { r in GetProfile(user: try r.queryID("user").map(UserID.init)) }),
        .init(
            .post, "/v1/profile", "Set or clear one profile field (give value or clear: true)",
            [.word("profile"), .word("set"), .field("field"), .optionalField("value"), .fieldFlag("clear", "--clear")],
            operation: OperationEndpoint { r in
                let value = try r.text("value")
                guard (value == nil) == (try r.flag("clear")) else { throw OperationError(.badInput, code: "bad_field", "give either value or clear: true") }
                return try SetProfile(named: try r.requiredText("field"), text: value)
            }),
        // Relay lists
        .init(
            .get, "/v1/relays", "A user's relay list", [.word("relays"), .word("show"), .query("user")],
            operation: OperationEndpoint { r in GetRelays(user: try r.queryID("user").map(UserID.init)) }),
        .init(
            .post, "/v1/relays", "Publish this user's relay list, replacing the previous one (relays: [\"[ROLES=]KEY@HOST:PORT\", …], or clear: true)",
            [.word("relays"), .word("set"), .fieldOption("relays", "--relay"), .fieldFlag("clear", "--clear")],
            operation: OperationEndpoint { r in
                let relays = try r.texts("relays").map(Relay.init(parsing:))
                guard relays.isEmpty == (try r.flag("clear")) else { throw OperationError(.badInput, code: "bad_field", "give relays (one or more) or clear: true") }
                return PublishRelays(.set(relays))
            }),
        .init(
            .post, "/v1/relays/add", "Add a relay to this user's list, or change its roles", [.word("relays"), .word("add"), .field("relay")],
            operation: OperationEndpoint { r in PublishRelays(.add(try Relay(parsing: try r.requiredText("relay")))) }),
        .init(
            .delete, "/v1/relays/{relay}", "Remove a relay from this user's list, by its key (404 when the list has none)",
            [.word("relays"), .word("remove"), .path("relay")],
            operation: OperationEndpoint { r in PublishRelays(.remove(r.parameters["relay"] ?? "")) }),
        // Pictures
        .init(
            .get, "/v1/pictures", "A user's gallery in its order",
            [.word("query"), .word("pictures"), .query("user"), .queryOption("limit", "--limit"), .queryOption("offset", "--offset")],
            operation: OperationEndpoint { r in
                ListPictures(.gallery(try r.queryID("user").map(UserID.init), offset: try r.queryInt("offset") ?? 0), limit: try r.queryInt("limit") ?? 100)
            }),
        .init(
            .post, "/v1/pictures", "Add a picture: the body is the image",
            [.word("picture"), .word("add"), .upload, .queryOption("caption", "--caption"), .queryOption("mime", "--mime")],
            operation: OperationEndpoint { r in AddPicture(r.upload, mime: r.query["mime"], caption: r.query["caption"]) }),
        .init(
            .get, "/v1/pictures/{id}", "One picture (404 when this node holds none by that id)", [.word("query"), .word("picture"), .path("id")],
            operation: OperationEndpoint { r in GetPicture(PictureID(try r.pathID("id", what: "ID"))) }),
        .init(
            .get, "/v1/pictures/{id}/bytes", "A picture's image bytes", [.word("picture"), .word("get"), .path("id"), .word("--out=-")],
            bytes: .pictureBytes),
        .init(
            .post, "/v1/pictures/{id}/caption", "Set a picture's caption", [.word("picture"), .word("caption"), .path("id"), .field("caption")],
            operation: OperationEndpoint { r in ChangePicture(PictureID(try r.pathID("id", what: "ID")), .caption(try r.requiredText("caption"))) }),
        .init(
            .post, "/v1/pictures/{id}/move", "Move a picture in the gallery (exactly one of before, after, first, last)",
            [.word("picture"), .word("move"), .path("id"), .fieldOption("before", "--before"), .fieldOption("after", "--after"), .fieldFlag("first", "--first"), .fieldFlag("last", "--last")],
            operation: OperationEndpoint { r in ChangePicture(PictureID(try r.pathID("id", what: "ID")), .move(try r.placement())) }),
        .init(
            .delete, "/v1/pictures/{id}", "Delete a picture and purge its bytes", [.word("picture"), .word("delete"), .path("id")],
            operation: OperationEndpoint { r in ChangePicture(PictureID(try r.pathID("id", what: "ID")), .delete) }),
        .init(
            .get, "/v1/feed", "Pictures of the users this user follows, newest first (before: the HLC of the previous page's last picture)",
            [.word("query"), .word("feed"), .queryOption("limit", "--limit"), .queryOption("before", "--before")],
            operation: OperationEndpoint { r in
                let before = try r.queryInt("before")
                if let before, before < 0 { throw OperationError(.badInput, code: "bad_before", "before must not be negative") }
                return ListPictures(.feed(before: before.map { HLC(rawValue: UInt64($0)) }), limit: try r.queryInt("limit") ?? 50)
            }),
        // Relationships
        .init(
            .get, "/v1/followers", "Users following a user (default: this node's user)", [.word("query"), .word("followers"), .query("user")] + Self.page,
            operation: OperationEndpoint { r in ListRelated(.followers, of: try r.queryID("user"), after: try r.queryID("after"), limit: try r.queryInt("limit")) }),
        .init(
            .get, "/v1/following", "Users a user follows (default: this node's user)", [.word("query"), .word("following"), .query("user")] + Self.page,
            operation: OperationEndpoint { r in ListRelated(.following, of: try r.queryID("user"), after: try r.queryID("after"), limit: try r.queryInt("limit")) }),
        .init(.post, "/v1/following/{user}", "Follow a user", [.word("follow"), .path("user")], operation: relate(.follow, "user", "USER")),
        .init(.delete, "/v1/following/{user}", "Stop following a user", [.word("unfollow"), .path("user")], operation: relate(.unfollow, "user", "USER")),
        .init(
            .get, "/v1/likes/{object}", "Users who like a picture or message", [.word("query"), .word("likes"), .path("object")] + Self.page,
            operation: OperationEndpoint { r in
                ListRelated(.likes, of: try r.pathID("object", what: "OBJECT"), after: try r.queryID("after"), limit: try r.queryInt("limit"))
            }),
        .init(.post, "/v1/likes/{object}", "Like a picture or message", [.word("like"), .path("object")], operation: relate(.like, "object", "OBJECT")),
        .init(.delete, "/v1/likes/{object}", "Withdraw a like", [.word("unlike"), .path("object")], operation: relate(.unlike, "object", "OBJECT")),
        .init(.post, "/v1/blocks/{user}", "Block a user", [.word("block"), .path("user")], operation: relate(.block, "user", "USER")),
        .init(.delete, "/v1/blocks/{user}", "Unblock a user", [.word("unblock"), .path("user")], operation: relate(.unblock, "user", "USER")),
        // Chats
        .init(
            .get, "/v1/chats", "The chats this user is a member of", [.word("query"), .word("chats")] + Self.page,
            operation: OperationEndpoint { r in ListChats(after: try r.queryID("after").map(ChatID.init), limit: try r.queryInt("limit")) }),
        .init(
            .get, "/v1/inbox", "This user's chat list: each chat with its last message and unread count, newest activity first",
            [.word("query"), .word("inbox"), .queryOption("limit", "--limit"), .queryOption("after", "--after")],
            operation: OperationEndpoint { r in ListInbox(after: r.query["after"], limit: try r.queryInt("limit")) }),
        .init(
            .post, "/v1/chats", "Create a chat", [.word("chat"), .word("create"), .fieldOption("title", "--title"), .fieldOption("members", "--member")],
            operation: OperationEndpoint { r in CreateChat(title: try r.text("title"), members: try r.ids("members").map(UserID.init)) }),
        .init(
            .get, "/v1/chats/{id}", "A page of a chat's messages, oldest first (404 when this node holds no such chat)",
            [.word("query"), .word("chat"), .path("id"), .queryOption("limit", "--limit"), .queryOption("before", "--before")],
            operation: OperationEndpoint { r in
                GetChatPage(ChatID(try r.pathID("id", what: "CHAT")), limit: try r.queryInt("limit") ?? 50, before: r.query["before"])
            }),
        .init(
            .post, "/v1/chats/{id}/members", "Add a member (administrators only)", [.word("chat"), .word("add"), .path("id"), .field("user"), .fieldFlag("admin", "--admin")],
            operation: OperationEndpoint { r in
                ChangeMembership(ChatID(try r.pathID("id", what: "CHAT")), .add(UserID(try r.requiredID("user")), admin: try r.flag("admin")))
            }),
        .init(
            .delete, "/v1/chats/{id}/members/{user}", "Remove a member (administrators only)", [.word("chat"), .word("remove"), .path("id"), .path("user")],
            operation: OperationEndpoint { r in ChangeMembership(ChatID(try r.pathID("id", what: "CHAT")), .remove(UserID(try r.pathID("user", what: "USER")))) }),
        .init(
            .post, "/v1/chats/{id}/leave", "Leave a chat", [.word("chat"), .word("leave"), .path("id")],
            operation: OperationEndpoint { r in ChangeMembership(ChatID(try r.pathID("id", what: "CHAT")), .leave) }),
        .init(
            .post, "/v1/chats/{id}/messages", "Send a message", [.word("chat"), .word("send"), .path("id"), .fieldOption("text", "--text"), .fieldOption("picture", "--picture")],
            operation: OperationEndpoint { r in
                SendMessage(chat: ChatID(try r.pathID("id", what: "CHAT")), text: try r.text("text"), picture: try r.id("picture").map(PictureID.init))
            }),
        .init(
            .post, "/v1/chats/{id}/read", "Mark the chat read up to a message", [.word("chat"), .word("read"), .path("id"), .field("message")],
            operation: OperationEndpoint { r in MarkRead(chat: ChatID(try r.pathID("id", what: "CHAT")), upTo: MessageID(try r.requiredID("message"))) }),
        .init(
            .post, "/v1/messages/{id}/edit", "Edit the text of one of your messages", [.word("chat"), .word("edit"), .path("id"), .field("text")],
            operation: OperationEndpoint { r in ChangeMessage(MessageID(try r.pathID("id", what: "MESSAGE")), newText: try r.requiredText("text")) }),
        .init(
            .delete, "/v1/messages/{id}", "Delete one of your messages", [.word("chat"), .word("delete"), .path("id")],
            operation: OperationEndpoint { r in ChangeMessage(MessageID(try r.pathID("id", what: "MESSAGE")), newText: nil) }),
        // Coins and slots
        .init(
            .get, "/v1/balance", "A user's coin balance, by device", [.word("query"), .word("balance"), .query("user")],
            operation: OperationEndpoint { r in GetBalance(user: try r.queryID("user").map(UserID.init)) }),
        .init(
            .post, "/v1/coins/credit", "Credit a purchase (issuer key required)",
            [.word("coins"), .word("credit"), .field("user"), .field("amount"), .fieldOption("receipt", "--receipt"), .fieldOption("device", "--device"), .fieldOption("product", "--product")],
            operation: OperationEndpoint { r in
                let receipt = try r.requiredText("receipt")
                guard !receipt.isEmpty else { throw OperationError(.badInput, code: "bad_field", "the field \"receipt\" must not be empty") }
                return MoveCoins(
                    try r.amount("amount"),
                    .credit(user: UserID(try r.requiredID("user")), receipt: receipt, device: try r.id("device").map(DeviceID.init), product: try r.text("product")))
            }),
        .init(
            .post, "/v1/coins/spend", "Spend coins from this device's rights", [.word("coins"), .word("spend"), .field("amount"), .fieldOption("for", "--for")],
            operation: OperationEndpoint { r in MoveCoins(try r.amount("amount"), .spend(for: try r.requiredText("for"))) }),
        .init(
            .post, "/v1/coins/give", "Give coins to another user",
            [.word("coins"), .word("give"), .field("user"), .field("amount"), .fieldOption("device", "--device"), .fieldOption("note", "--note")],
            operation: OperationEndpoint { r in
                MoveCoins(try r.amount("amount"), .give(to: UserID(try r.requiredID("user")), device: try r.id("device").map(DeviceID.init), note: try r.text("note")))
            }),
        .init(
            .post, "/v1/coins/move", "Move spending rights to a sibling device", [.word("coins"), .word("move"), .field("device"), .field("amount")],
            operation: OperationEndpoint { r in MoveCoins(try r.amount("amount"), .moveRights(to: DeviceID(try r.requiredID("device")))) }),
        .init(
            .get, "/v1/audit", "Every coin traced from its purchase receipt, with the invariants checked (findings in the answer)",
            [.word("query"), .word("audit"), .query("user")], operation: OperationEndpoint { r in AuditCoins(user: try r.queryID("user")) }),
        .init(
            .get, "/v1/slots", "A user's lock slots", [.word("query"), .word("slots"), .query("user")],
            operation: OperationEndpoint { r in GetSlots(user: try r.queryID("user").map(UserID.init)) }),
        .init(
            .post, "/v1/slots/{slot}/unlock", "Unlock a slot, spending its price", [.word("slot"), .word("unlock"), .path("slot")],
            operation: OperationEndpoint { r in ChangeSlot(try r.slot("slot"), .unlock) }),
        .init(
            .post, "/v1/slots/{slot}", "Put a picture in an unlocked slot, or empty it (give picture or empty: true)",
            [.word("slot"), .word("set"), .path("slot"), .optionalField("picture"), .fieldFlag("empty", "--empty")],
            operation: OperationEndpoint { r in
                let picture = try r.id("picture")
                guard (picture == nil) == (try r.flag("empty")) else {
                    throw OperationError(.badInput, code: "bad_field", "give either picture (an id) or empty: true")
                }
                return ChangeSlot(try r.slot("slot"), .set(picture.map(PictureID.init)))
            }),
        // The log and the node
        .init(.get, "/v1/digest", "The projection digest", [.word("query"), .word("digest")], operation: OperationEndpoint { _ in GetDigest() }),
        .init(
            .get, "/v1/no-effect", "Stored events that took no effect", [.word("query"), .word("no-effect"), .queryOption("limit", "--limit")],
            operation: OperationEndpoint { r in ListNoEffect(limit: try r.queryInt("limit") ?? 100) }),
        .init(
            .get, "/v1/log", "Stored events in arrival order (latest=true: newest first); the cost follows limit, not the log's size",
            [.word("log"), .queryOption("author", "--author"), .queryOption("kind", "--kind"), .queryOption("since", "--since"), .queryOption("limit", "--limit"), .queryFlag("latest", "--latest")],
            operation: OperationEndpoint { r in
                var kind: EventKind?
                if let name = r.query["kind"] {
                    guard let k = EventKind(name: name) else {
                        throw OperationError(.badInput, code: "bad_kind", "unknown kind \"\(name.prefix(40))\"; kinds are \(EventKind.known.map(\.name).joined(separator: ", "))")
                    }
                    kind = k
                }
                let since = try r.queryInt("since") ?? 0
                guard since >= 0 else { throw OperationError(.badInput, code: "bad_since", "since must not be negative") }
                return ListLog(
                    author: try r.queryID("author"), kind: kind, since: UInt64(since), limit: try r.queryInt("limit"),
                    latest: ["true", "1"].contains(r.query["latest"] ?? ""))
            }),
        .init(.get, "/v1/export", "Every stored event, as an export file", [.word("export"), .dash, .queryOption("format", "--format")], bytes: .export),
        .init(
            .post, "/v1/import", "Verify and store the events of an export file: the body is the file", [.word("import"), .upload, .queryFlag("partial", "--partial")],
            operation: OperationEndpoint { r in ImportEvents(.bytes(r.upload), partial: try r.queryFlag("partial")) }),
        .init(
            .post, "/v1/sync", "Sync both ways with a peer, or without an address with the relays of the relay lists",
            [.word("sync"), .optionalField("address"), .fieldOption("hops", "--hops")],
            operation: OperationEndpoint { r in SyncOnce(address: try r.text("address"), hops: try r.count("hops")) }),
        .init(.get, "/v1/peers", "Known sync peers, latest first", [.word("peers")], operation: OperationEndpoint { _ in ListPeers() }),
    ]
}
#endif
