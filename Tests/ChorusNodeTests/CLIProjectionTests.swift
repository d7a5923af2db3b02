import Foundation
import ChorusTestSupport
import Testing

/// End-to-end tests of the projection commands of the `chorus` executable:
/// pictures, relationships, chats, coins, slots, queries and digests.
@Suite("chorus CLI projections")
struct CLIProjectionTests {
    let chorus: String
    init() throws { chorus = try productPath("chorus") }

    @discardableResult
    func run(_ args: String...) async throws -> CommandResult { try await runCommand(chorus, args) }

    /// Runs a command that must succeed and returns its stdout.
    func ok(_ args: String...) async throws -> String {
        let result = try await runCommand(chorus, args)
        #expect(result.status == 0, "chorus \(args.joined(separator: " ")): \(result.stderr)\(result.stdout)")
        return result.stdout
    }

    func object(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], "not a JSON object: \(text)")
    }

    func array(_ text: String) throws -> [[String: Any]] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]], "not a JSON array: \(text)")
    }

    /// Whether `time` is the readable form of the HLC `hlc` (Specs/api.md §5, Times):
    /// its physical milliseconds in ISO 8601 UTC, then `+` and its logical counter.
    func sameTime(_ hlc: Any?, _ time: Any?) -> Bool {
        guard let raw = (hlc as? NSNumber)?.uint64Value, let time = time as? String else { return false }
        let iso = ISO8601DateFormatter()
        iso.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return time == "\(iso.string(from: Date(timeIntervalSince1970: Double(raw >> 16) / 1000)))+\(raw & 0xFFFF)"
    }

    func user(_ store: String) async throws -> String {
        try #require(try object(try await ok("whoami", "--store", store, "--json"))["user"] as? String)
    }

    func device(_ store: String) async throws -> String {
        try #require(try object(try await ok("whoami", "--store", store, "--json"))["device"] as? String)
    }

    /// A PNG header of the given size, distinct per size.
    func png(_ path: String, width: UInt8, height: UInt8) throws {
        let bytes: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13] + Array("IHDR".utf8)
            + [0, 0, 0, width, 0, 0, 0, height, 8, 2, 0, 0, 0]
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    func addPicture(_ store: String, _ file: String, caption: String) async throws -> String {
        try #require(try object(try await ok("picture", "add", "--store", store, file, "--caption", caption, "--json"))["picture"] as? String)
    }

    /// Exports `from` and imports it into `to`.
    func move(_ from: String, to: String, via dir: String) async throws {
        let file = dir + "/" + UUID().uuidString + ".cbor"
        _ = try await ok("export", "--store", from, file)
        _ = try await ok("import", "--store", to, file)
    }

    func digest(_ store: String) async throws -> String {
        try await ok("query", "digest", "--store", store).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func everyNewCommandHasHelp() async throws {
        let commands: [[String]] = [
            ["init"], ["device"], ["device", "add"], ["device", "remove"], ["device", "list"], ["issuer", "create"],
            ["network", "show"], ["picture"], ["picture", "add"], ["picture", "caption"], ["picture", "move"],
            ["picture", "delete"], ["picture", "get"], ["follow"], ["unfollow"], ["like"], ["unlike"], ["block"], ["unblock"],
            ["chat"], ["chat", "create"], ["chat", "add"], ["chat", "remove"], ["chat", "leave"], ["chat", "send"],
            ["chat", "edit"], ["chat", "delete"], ["chat", "read"], ["coins"], ["coins", "credit"], ["coins", "spend"],
            ["coins", "give"], ["coins", "move"], ["slot", "unlock"], ["slot", "set"], ["query"], ["query", "profile"],
            ["query", "pictures"], ["query", "picture"], ["query", "followers"], ["query", "following"], ["query", "likes"],
            ["query", "feed"], ["query", "inbox"], ["query", "chats"], ["query", "chat"], ["query", "balance"], ["query", "slots"],
            ["query", "devices"], ["query", "digest"], ["query", "no-effect"], ["rebuild"], ["upgrade"], ["network", "invite"],
        ]
        for command in commands {
            let result = try await runCommand(chorus, command + ["--help"])
            #expect(result.status == 0, "\(command): \(result.stderr)")
            #expect(result.stdout.contains("USAGE: chorus \(command.joined(separator: " "))"), "\(command): \(result.stdout)")
        }
        let top = try await ok("--help")
        for name in ["device", "issuer", "network", "picture", "follow", "chat", "coins", "slot", "query", "rebuild"] {
            #expect(top.contains("  \(name)"), "top-level help lacks \(name)")
        }
    }

    @Test func galleryOrderAvatarAndDeletionClearingTheAvatar() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a")
        _ = try await ok("init", "--store", a, "--name", "Alice")
        try png(tmp.path + "/1.png", width: 4, height: 3)
        try png(tmp.path + "/2.png", width: 5, height: 3)
        try png(tmp.path + "/3.png", width: 6, height: 4)
        let p1 = try await addPicture(a, tmp.path + "/1.png", caption: "one")
        let p2 = try await addPicture(a, tmp.path + "/2.png", caption: "two")
        let p3 = try await addPicture(a, tmp.path + "/3.png", caption: "three")
        // Text output prints the id alone on the first line.
        try png(tmp.path + "/4.png", width: 7, height: 4)
        let textAdd = try await ok("picture", "add", "--store", a, tmp.path + "/4.png")
        let p4 = String(textAdd.split(separator: "\n").first ?? "")
        #expect(p4.count == 64)

        func order() async throws -> [String] {
            try array(try await ok("query", "pictures", "--store", a, "--json")).compactMap { $0["id"] as? String }
        }
        #expect(try await order() == [p1, p2, p3, p4])
        _ = try await ok("picture", "move", "--store", a, p3, "--first")
        _ = try await ok("picture", "move", "--store", a, p1, "--after", p2)
        _ = try await ok("picture", "move", "--store", a, p4, "--before", p2)
        #expect(try await order() == [p3, p4, p2, p1])
        _ = try await ok("picture", "move", "--store", a, p3, "--last")
        #expect(try await order() == [p4, p2, p1, p3])
        let paged = try array(try await ok("query", "pictures", "--store", a, "--limit", "2", "--offset", "1", "--json"))
        #expect(paged.compactMap { $0["id"] as? String } == [p2, p1])
        let badMove = try await run("picture", "move", "--store", a, p1, "--first", "--last")
        #expect(badMove.status == 2 && badMove.stderr.contains("exactly one of"))

        _ = try await ok("picture", "caption", "--store", a, p1, "first light")
        let shown = try object(try await ok("query", "picture", "--store", a, p1, "--json"))
        #expect(shown["status"] as? String == "live")
        let picture = try #require(shown["picture"] as? [String: Any])
        #expect(picture["caption"] as? String == "first light")
        #expect(picture["mime"] as? String == "image/png")
        #expect(picture["width"] as? Int == 4 && picture["height"] as? Int == 3)

        // picture get writes the exact bytes.
        _ = try await ok("picture", "get", "--store", a, p1, "--out", tmp.path + "/out.png")
        #expect(FileManager.default.contents(atPath: tmp.path + "/out.png") == FileManager.default.contents(atPath: tmp.path + "/1.png"))

        _ = try await ok("profile", "set", "--store", a, "avatar", p1)
        let before = try object(try await ok("query", "profile", "--store", a, "--json"))
        let avatar = try #require(before["avatar"] as? [String: Any])
        #expect(avatar["status"] as? String == "picture" && avatar["id"] as? String == p1)
        #expect((before["fields"] as? [String: Any])?["name"] as? String == "Alice")
        #expect((before["devices"] as? [[String: Any]])?.count == 1)

        _ = try await ok("picture", "delete", "--store", a, p1)
        let after = try object(try await ok("query", "profile", "--store", a, "--json"))
        #expect((after["avatar"] as? [String: Any])?["status"] as? String == "removed")
        #expect(try await ok("query", "profile", "--store", a).contains("removed"))
        #expect(try object(try await ok("query", "picture", "--store", a, p1, "--json"))["status"] as? String == "deleted")
        #expect(try await order() == [p4, p2, p3])
        let gone = try await run("picture", "get", "--store", a, p1, "--out", tmp.path + "/gone.png")
        #expect(gone.status == 1 && gone.stderr.contains("deleted"))
        // Deleting again is refused with a reason, exit 1.
        let again = try await run("picture", "delete", "--store", a, p1)
        #expect(again.status == 1 && again.stderr.contains("was deleted"))
        // A picture this node never saw is unknown, not an error.
        let unknown = String(repeating: "ab", count: 32)
        #expect(try object(try await ok("query", "picture", "--store", a, unknown, "--json"))["status"] as? String == "unknown")
    }

    @Test func followsLikesFeedAndBlocks() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a"), b = tmp.store("b")
        _ = try await ok("init", "--store", a, "--name", "Alice")
        _ = try await ok("init", "--store", b, "--name", "Bob")
        let alice = try await user(a), bob = try await user(b)
        try png(tmp.path + "/1.png", width: 4, height: 3)
        let p1 = try await addPicture(a, tmp.path + "/1.png", caption: "roof")
        try await move(a, to: b, via: tmp.path)

        let followed = try object(try await ok("follow", "--store", b, alice, "--json"))
        #expect(followed["effective"] as? Bool == true && (followed["event"] as? String)?.count == 64)
        _ = try await ok("like", "--store", b, p1)
        #expect(try array(try await ok("query", "feed", "--store", b, "--json")).compactMap { $0["id"] as? String } == [p1])
        #expect(try await ok("query", "following", "--store", b, bob, "--json") == "[\"\(alice)\"]\n")
        #expect(try await ok("query", "followers", "--store", b, alice, "--json") == "[\"\(bob)\"]\n")
        // Without USER, the lists are this node's user's, as every query's.
        #expect(try await ok("query", "following", "--store", b, "--json") == "[\"\(alice)\"]\n")
        #expect(try await ok("query", "followers", "--store", b, "--json") == "[]\n")
        #expect(try await ok("query", "likes", "--store", b, p1, "--json") == "[\"\(bob)\"]\n")

        // The other node sees the same after an import.
        try await move(b, to: a, via: tmp.path)
        #expect(try await ok("query", "followers", "--store", a, alice, "--json") == "[\"\(bob)\"]\n")
        #expect(try await digest(a) == digest(b))

        // Blocking Bob hides him from Alice's followers.
        _ = try await ok("block", "--store", a, bob)
        #expect(try await ok("query", "followers", "--store", a, alice, "--json") == "[]\n")
        _ = try await ok("unblock", "--store", a, bob)
        #expect(try await ok("query", "followers", "--store", a, alice, "--json") == "[\"\(bob)\"]\n")

        _ = try await ok("unlike", "--store", b, p1)
        _ = try await ok("unfollow", "--store", b, alice)
        #expect(try await ok("query", "likes", "--store", b, p1, "--json") == "[]\n")
        #expect(try await ok("query", "feed", "--store", b).contains("feed is empty"))
        let twice = try await run("unfollow", "--store", b, alice)
        #expect(twice.status == 1 && twice.stderr.contains("no follow"))
        let selfFollow = try await run("follow", "--store", b, bob)
        #expect(selfFollow.status == 1 && selfFollow.stderr.contains("yourself"))
        let badKey = try await run("follow", "--store", b, "xyz")
        #expect(badKey.status == 2 && badKey.stderr.contains("64 hex digits"))
    }

    @Test func chatMessagesPageWithACursor() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a"), b = tmp.store("b")
        _ = try await ok("init", "--store", a)
        _ = try await ok("init", "--store", b)
        let bob = try await user(b)
        try png(tmp.path + "/1.png", width: 4, height: 3)
        let picture = try await addPicture(a, tmp.path + "/1.png", caption: "roof")
        let chat = try #require(try object(try await ok("chat", "create", "--store", a, "--title", "Roofs", "--member", bob, "--json"))["chat"] as? String)
        var sent: [String] = []
        for i in 1...3 {
            let out = try await ok("chat", "send", "--store", a, chat, "--text", "message \(i)")
            sent.append(String(out.split(separator: "\n").first ?? ""))
        }
        let withPicture = try #require(try object(try await ok("chat", "send", "--store", a, chat, "--picture", picture, "--json"))["message"] as? String)
        sent.append(withPicture)

        let chats = try array(try await ok("query", "chats", "--store", a, "--json"))
        #expect(chats.count == 1 && chats.first?["title"] as? String == "Roofs" && chats.first?["messages"] as? Int == 4)
        #expect((chats.first?["members"] as? [[String: Any]])?.count == 2)
        // Each time comes as the HLC and as a person reads it (Specs/api.md §5, Times).
        #expect(sameTime(chats.first?["created"], chats.first?["created_time"]))
        #expect((chats.first?["members"] as? [[String: Any]])?.allSatisfy { sameTime($0["since"], $0["since_time"]) } == true)

        let first = try object(try await ok("query", "chat", "--store", a, chat, "--limit", "3", "--json"))
        let firstIDs = (first["messages"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
        #expect(firstIDs == Array(sent[1...]))
        let cursor = try #require(first["older"] as? String)
        #expect(try await ok("query", "chat", "--store", a, chat, "--limit", "3").contains("--before \(cursor)"))
        let second = try object(try await ok("query", "chat", "--store", a, chat, "--limit", "3", "--before", cursor, "--json"))
        #expect((second["messages"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String } == [sent[0]])
        #expect(second["older"] is NSNull)
        let bad = try await run("query", "chat", "--store", a, chat, "--before", "zz")
        #expect(bad.status == 1 && bad.stderr.contains("not a chat cursor"))

        // Edit, read marker, delete; the picture message shows the picture, then "removed".
        _ = try await ok("chat", "edit", "--store", a, sent[0], "edited text")
        _ = try await ok("chat", "read", "--store", a, chat, sent[3])
        _ = try await ok("chat", "delete", "--store", a, sent[1])
        _ = try await ok("picture", "delete", "--store", a, picture)
        let page = try object(try await ok("query", "chat", "--store", a, chat, "--json"))
        let messages = page["messages"] as? [[String: Any]] ?? []
        #expect(messages.count == 4)
        #expect(messages.first?["text"] as? String == "edited text" && !(messages.first?["edited"] is NSNull))
        #expect(!(messages[1]["deleted"] is NSNull))
        #expect(sameTime(messages.first?["edited"], messages.first?["edited_time"]) && messages.first?["deleted_time"] is NSNull)
        #expect(sameTime(messages[1]["deleted"], messages[1]["deleted_time"]))
        #expect((messages[3]["picture"] as? [String: Any])?["status"] as? String == "removed")
        #expect((page["read"] as? [String: Any])?.count == 1)
        let reader = try #require((page["read"] as? [String: Any])?.first)
        #expect(sameTime(reader.value, (page["read_time"] as? [String: Any])?[reader.key]))

        // Bob, a member, replies after importing; a non-member's message takes no effect.
        try await move(a, to: b, via: tmp.path)
        _ = try await ok("chat", "send", "--store", b, chat, "--text", "hi")
        // Bob's chat list: his reply is the last message; Alice's three live messages are unread.
        let inbox = try array(try await ok("query", "inbox", "--store", b, "--json"))
        #expect(inbox.count == 1 && (inbox.first?["chat"] as? [String: Any])?["id"] as? String == chat)
        #expect(inbox.first?["unread"] as? Int == 3 && (inbox.first?["last_message"] as? [String: Any])?["text"] as? String == "hi")
        #expect(inbox.first?["read"] is NSNull)
        #expect(sameTime(inbox.first?["last_activity"], inbox.first?["last_activity_time"]))
        let row = try #require(inbox.first?["cursor"] as? String)
        #expect(try array(try await ok("query", "inbox", "--store", b, "--after", row, "--json")).isEmpty)
        let text = try await ok("query", "inbox", "--store", b)
        #expect(text.contains(chat) && text.contains("hi") && text.contains("UNREAD"), "\(text)")
        let badRow = try await run("query", "inbox", "--store", b, "--after", chat)
        #expect(badRow.status == 2 && badRow.stderr.contains("--after must be a row's cursor"), "\(badRow.stderr)")
        let c = tmp.store("c")
        _ = try await ok("init", "--store", c)
        try await move(a, to: c, via: tmp.path)
        let intruder = try await run("chat", "send", "--store", c, chat, "--text", "let me in", "--json")
        #expect(intruder.status == 1)
        let report = try object(intruder.stdout)
        #expect(report["effective"] as? Bool == false && report["code"] as? String == "not_member")
        let noEffect = try array(try await ok("query", "no-effect", "--store", c, "--json"))
        #expect(noEffect.contains { $0["code"] as? String == "not_member" && $0["kind"] as? String == "message.sent" })
        let missing = try await run("chat", "send", "--store", c, chat)
        #expect(missing.status == 2 && missing.stderr.contains("--text, --picture, --image"))
    }

    @Test func anOversizedPictureIsRefusedFromItsSizeBeforeItIsRead() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a")
        _ = try await ok("init", "--store", a)
        // A 2 GiB sparse file: reading it would take seconds and gigabytes.
        let big = tmp.path + "/huge.jpg"
        #expect(FileManager.default.createFile(atPath: big, contents: Data([0xFF, 0xD8, 0xFF, 0xE0])))
        let handle = try #require(FileHandle(forWritingAtPath: big))
        try handle.truncate(atOffset: 2 << 30)
        try handle.close()
        let r = try await run("picture", "add", "--store", a, big)
        #expect(r.status == 2 && r.stderr.contains("2147483648 bytes") && r.stderr.contains("at most 16777216 bytes"), "\(r.stderr)")
        let chat = try await ok("chat", "create", "--store", a).split(separator: "\n").first.map(String.init) ?? ""
        let send = try await run("chat", "send", "--store", a, chat, "--image", big)
        #expect(send.status == 2 && send.stderr.contains("at most 16777216 bytes"), "\(send.stderr)")
        let dir = try await run("picture", "add", "--store", a, tmp.path)
        #expect(dir.status == 2 && dir.stderr.contains("is a directory"))
        #expect(try array(try await ok("query", "pictures", "--store", a, "--json")).isEmpty)
    }

    @Test func controlCharactersFromStoredTextNeverReachTheTerminalRaw() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a"), b = tmp.store("b")
        // ESC sequences that clear the screen, retitle the terminal, colour
        // text; BEL; CR; a C1 control (CSI).
        let evil = "\u{1b}[2J\u{1b}]0;pwned\u{07}\r\u{9b}31m"
        _ = try await ok("init", "--store", a, "--name", "Alice" + evil, "--device-name", "phone" + evil)
        _ = try await ok("init", "--store", b, "--name", "Bob")
        _ = try await ok("profile", "set", "--store", a, "bio", "bio" + evil)
        _ = try await ok("profile", "set", "--store", a, "city", "city" + evil)
        let file = tmp.path + "/p.png"
        try png(file, width: 3, height: 4)
        let picture = try await addPicture(a, file, caption: "caption" + evil)
        try await move(b, to: a, via: tmp.path)
        let chat = try await ok("chat", "create", "--store", a, "--title", "title" + evil, "--member", try await user(b))
            .split(separator: "\n").first.map(String.init) ?? ""
        _ = try await ok("chat", "send", "--store", a, chat, "--text", "message" + evil)
        #expect(try await run("coins", "spend", "--store", a, "1", "--for", "for" + evil).status == 1)  // refused: no rights
        try await move(a, to: b, via: tmp.path)
        _ = try await ok("follow", "--store", b, try await user(a))
        for store in [a, b] {
            let commands: [[String]] = [
                ["query", "profile", "--store", store, try await user(a)], ["query", "pictures", "--store", store, try await user(a)],
                ["query", "picture", "--store", store, picture], ["query", "feed", "--store", store],
                ["query", "chats", "--store", store], ["query", "chat", "--store", store, chat],
                ["query", "devices", "--store", store, try await user(a)], ["query", "no-effect", "--store", store],
                ["log", "--store", store], ["whoami", "--store", store],
            ]
            for command in commands {
                let r = try await runCommand(chorus, command)
                let bytes = Array((r.stdout + r.stderr).utf8)
                for raw: [UInt8] in [[0x1b], [0x07], [0x0d], [0xc2, 0x9b]] {
                    let found = bytes.indices.contains { i in bytes[i...].starts(with: raw) }
                    #expect(!found, "chorus \(command.joined(separator: " ")) printed \(raw) raw")
                }
            }
        }
        // The text is kept, escaped for display: the members still read it.
        #expect(try await ok("query", "chat", "--store", b, chat).contains("message\\u{1b}[2J"))
    }

    @Test func issuerCreditsOnceSpendsWithinRightsGivesAndUnlocksSlots() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let shop = tmp.store("shop"), a = tmp.store("a"), b = tmp.store("b")
        _ = try await ok("init", "--store", shop)
        let issuer = try #require(try object(try await ok("issuer", "create", "--store", shop, "--json"))["issuer"] as? String)
        let again = try object(try await ok("issuer", "create", "--store", shop, "--json"))
        #expect(again["issuer"] as? String == issuer && again["created"] as? Bool == false)
        _ = try await ok("init", "--store", a, "--issuer", issuer)
        _ = try await ok("init", "--store", b, "--network", shop + "/network.json")
        let network = try object(try await ok("network", "show", "--store", b, "--json"))
        #expect(network["issuers"] as? [String] == [issuer])
        #expect(network["slot_prices"] as? [Int] == [0, 50, 100, 200, 400, 800])
        // A bootstrap relay has no roles: they belong to a user's relay list.
        let relayKey = String(repeating: "ab", count: 32)
        let withRoles = try await run("network", "relay-add", "--store", shop, "home=\(relayKey)@127.0.0.1:7800")
        #expect(withRoles.status == 2 && withRoles.stderr.contains("without roles"), "\(withRoles.stderr)")
        let noKey = try await run("network", "relay-add", "--store", shop, "127.0.0.1:7800")
        #expect(noKey.status == 2 && noKey.stderr.contains("\"127.0.0.1:7800\" is not KEY@HOST:PORT"), "\(noKey.stderr)")
        let alice = try await user(a), bob = try await user(b)

        // A node that is not an issuer cannot credit.
        let notIssuer = try await run("coins", "credit", "--store", a, alice, "10", "--receipt", "X")
        #expect(notIssuer.status == 2 && notIssuer.stderr.contains("issuer"))

        try await move(a, to: shop, via: tmp.path)
        try await move(b, to: shop, via: tmp.path)
        let credit = try object(try await ok("coins", "credit", "--store", shop, alice, "120", "--receipt", "TX-1", "--product", "coins_120", "--json"))
        let aliceDevice = try await device(a)
        #expect(credit["effective"] as? Bool == true && credit["device"] as? String == aliceDevice)
        let duplicate = try await run("coins", "credit", "--store", shop, alice, "120", "--receipt", "TX-1")
        #expect(duplicate.status == 1 && duplicate.stdout.contains("took no effect") && duplicate.stdout.contains("duplicate_receipt"))
        try await move(shop, to: a, via: tmp.path)
        try await move(shop, to: a, via: tmp.path)  // delivered twice: duplicates, nothing changes
        let balance = try object(try await ok("query", "balance", "--store", a, "--json"))
        #expect(balance["total"] as? Int == 120)

        let beyond = try await run("coins", "spend", "--store", a, "500", "--for", "too much")
        #expect(beyond.status == 1 && beyond.stderr.contains("holds rights to 120 coins; 500 are needed"))
        _ = try await ok("coins", "spend", "--store", a, "20", "--for", "stickers")
        try await move(b, to: a, via: tmp.path)
        _ = try await ok("coins", "give", "--store", a, bob, "30", "--note", "thanks")
        _ = try await ok("slot", "unlock", "--store", a, "1")
        try png(tmp.path + "/1.png", width: 4, height: 3)
        let picture = try await addPicture(a, tmp.path + "/1.png", caption: "slot picture")
        _ = try await ok("slot", "set", "--store", a, "1", picture)
        var slots = try array(try await ok("query", "slots", "--store", a, "--json"))
        #expect(slots.count == 6 && slots[1]["unlocked"] as? Bool == true && slots[2]["unlocked"] as? Bool == false)
        #expect((slots[1]["picture"] as? [String: Any])?["status"] as? String == "picture")
        _ = try await ok("picture", "delete", "--store", a, picture)
        slots = try array(try await ok("query", "slots", "--store", a, "--json"))
        #expect((slots[1]["picture"] as? [String: Any])?["status"] as? String == "removed")
        #expect(try object(try await ok("query", "balance", "--store", a, "--json"))["total"] as? Int == 120 - 20 - 30 - 50)
        let locked = try await run("slot", "unlock", "--store", a, "2")
        #expect(locked.status == 1 && locked.stderr.contains("100 are needed"))

        try await move(a, to: b, via: tmp.path)
        try await move(shop, to: b, via: tmp.path)
        #expect(try object(try await ok("query", "balance", "--store", b, "--json"))["total"] as? Int == 30)
        #expect(try object(try await ok("query", "balance", "--store", b, alice, "--json"))["total"] as? Int == 20)
        try await move(b, to: shop, via: tmp.path)
        try await move(a, to: shop, via: tmp.path)
        #expect(try await digest(a) == digest(b))
        #expect(try await digest(b) == digest(shop))
    }

    @Test func secondDeviceJoinsWithInitUserAndMovesRights() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let phone = tmp.store("phone"), tablet = tmp.store("tablet")
        _ = try await ok("init", "--store", phone, "--slot-prices", "0,10,20")
        let alice = try await user(phone)
        let created = try object(try await ok("init", "--store", tablet, "--user", alice, "--slot-prices", "0,10,20", "--json"))
        let tabletDevice = try #require(created["device"] as? String)
        let proof = try #require(created["proof"] as? String)
        #expect(created["command"] as? String == "chorus device add \(tabletDevice) --proof \(proof)")
        // Every file of the store is its owner's only (Specs/storage.md §1),
        // the network key's file and the user's public key included.
        for store in [phone, tablet] {
            let files = try FileManager.default.subpathsOfDirectory(atPath: store)
            #expect(files.contains("keys/user.public") == (store == tablet))
            for file in files {
                let mode = try FileManager.default.attributesOfItem(atPath: store + "/" + file)[.posixPermissions] as? Int
                #expect(mode.map { $0 & 0o077 } == 0, "\(store)/\(file) is readable by others")
            }
        }
        let text = try await ok("init", "--store", tmp.store("other"), "--user", alice)
        #expect(text.contains("chorus device add ") && text.contains("--proof "))

        let badProof = try await run("device", "add", "--store", phone, tabletDevice, "--proof", String(repeating: "00", count: 64))
        #expect(badProof.status == 1 && badProof.stderr.contains("proof"))
        let noUserKey = try await run("device", "add", "--store", tablet, tabletDevice, "--proof", proof)
        #expect(noUserKey.status == 2 && noUserKey.stderr.contains("no user key"))
        _ = try await ok("device", "add", "--store", phone, tabletDevice, "--proof", proof, "--name", "tablet")
        try await move(phone, to: tablet, via: tmp.path)
        let devices = try array(try await ok("device", "list", "--store", tablet, "--json"))
        #expect(devices.count == 2 && devices.contains { $0["device"] as? String == tabletDevice && $0["name"] as? String == "tablet" })
        #expect(devices.allSatisfy { sameTime($0["added"], $0["added_time"]) && $0["removed_time"] is NSNull })
        #expect(try array(try await ok("query", "devices", "--store", phone, alice, "--json")).count == 2)
        #expect(try await ok("query", "profile", "--store", tablet, "--json").contains(alice))

        // The tablet edits the shared profile; the phone removes it later.
        _ = try await ok("profile", "set", "--store", tablet, "city", "Lisbon")
        try await move(tablet, to: phone, via: tmp.path)
        #expect(try object(try await ok("query", "profile", "--store", phone, "--json"))["fields"].flatMap { ($0 as? [String: Any])?["city"] as? String } == "Lisbon")
        _ = try await ok("device", "remove", "--store", phone, tabletDevice, "--reason", "lost")
        let removed = try array(try await ok("device", "list", "--store", phone, "--json"))
        #expect(removed.contains { $0["device"] as? String == tabletDevice && sameTime($0["removed"], $0["removed_time"]) })
        let bad = try await run("init", "--store", tmp.store("bad"), "--slot-prices", "5,10")
        #expect(bad.status == 2 && bad.stderr.contains("slot 0 is free"))
        let badList = try await run("init", "--store", tmp.store("bad2"), "--slot-prices", "0,x")
        #expect(badList.status == 2 && badList.stderr.contains("whole numbers"))
    }

    @Test func digestsAgreeAfterImportsInDifferentOrdersAndRebuild() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let stores = ["a", "b", "c"].map(tmp.store)
        for s in stores { _ = try await ok("init", "--store", s) }
        var users: [String] = []
        for s in stores { users.append(try await user(s)) }
        for (i, s) in stores.enumerated() {
            _ = try await ok("profile", "set", "--store", s, "bio", "bio \(i)")
            try png(tmp.path + "/\(i).png", width: UInt8(4 + i), height: 3)
            let p = try await addPicture(s, tmp.path + "/\(i).png", caption: "p\(i)")
            _ = try await ok("follow", "--store", s, users[(i + 1) % 3])
            _ = try await ok("like", "--store", s, p)
        }
        var files: [String] = []
        for (i, s) in stores.enumerated() {
            files.append(tmp.path + "/\(i).cbor")
            _ = try await ok("export", "--store", s, files[i])
        }
        let x = tmp.store("x"), y = tmp.store("y")
        _ = try await ok("init", "--store", x)
        _ = try await ok("init", "--store", y)
        for f in files { _ = try await ok("import", "--store", x, f) }
        for f in files.reversed() { _ = try await ok("import", "--store", y, f) }
        // x and y hold their own (different) device bindings too; exchange those.
        try await move(x, to: y, via: tmp.path)
        try await move(y, to: x, via: tmp.path)
        for s in stores {
            try await move(x, to: s, via: tmp.path)
        }
        var digests: [String] = []
        for s in stores + [x, y] { digests.append(try await digest(s)) }
        #expect(Set(digests).count == 1, "\(digests)")
        #expect(digests.allSatisfy { $0.count == 64 })

        let rebuilt = try object(try await ok("rebuild", "--store", y, "--json"))
        #expect(rebuilt["before"] as? String == digests[0] && rebuilt["after"] as? String == digests[0])
        #expect(rebuilt["equal"] as? Bool == true)
        #expect((rebuilt["seconds"] as? String).flatMap(Double.init).map { $0 >= 0 } == true)
        #expect(try await ok("rebuild", "--store", x).contains("digest is unchanged"))
        let json = try object(try await ok("query", "digest", "--store", x, "--json"))
        #expect(json["digest"] as? String == digests[0])
    }
}
