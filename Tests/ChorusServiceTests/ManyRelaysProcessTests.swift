#if Service
import ChorusCrypto
import ChorusNode
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

/// Specs/sync.md §8.1, §4.11 and §9 with real processes: four relays
/// (`chorus serve --host listed`) and twelve users' stores driven by the
/// `chorus` command line, all on 127.0.0.1.
@Suite("Many relays, as separate processes", .closingNodes)
struct ManyRelaysProcessTests {
    let chorus: String
    init() throws { chorus = try productPath("chorus") }

    func cli(_ args: [String], expect status: Int32 = 0) async throws -> String {
        let r = try await runCommand(chorus, args)
        guard r.status == status else {
            throw TestFailure("chorus \(args.joined(separator: " ")) exited \(r.status), expected \(status): \(r.stderr)\(r.stdout)")
        }
        return r.stdout
    }

    func json(_ text: String) throws -> Any { try JSONSerialization.jsonObject(with: Data(text.utf8)) }

    func field(_ text: String, _ key: String) throws -> String {
        guard let object = try json(text) as? [String: Any], let value = object[key] as? String else {
            throw TestFailure("no \"\(key)\" in \(text)")
        }
        return value
    }

    /// The texts of a chat's messages as a store shows them: the text, or
    /// the state of a message it cannot read.
    func messages(_ store: String, _ chat: String) async throws -> [String] {
        let out = try await cli(["query", "chat", chat, "--store", store, "--json"])
        let list = (try json(out) as? [String: Any])?["messages"] as? [[String: Any]] ?? []
        return list.map { ($0["text"] as? String) ?? "[\($0["content"] as? String ?? "?")]" }
    }

    @Test("4 listed relays, 12 users: follows across relays, a chat across three relays with a removal, a move, and every user's scope equal to a node that holds everything")
    func fourRelaysTwelveUsers() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let founder = dir.store("u0")
        _ = try await cli(["init", "--store", founder, "--name", "u0"])
        let network = founder + "/network.json"

        // Four relays of the network, hosting what their users list.
        var relays: [(store: String, key: String, address: String, server: ServerProcess)] = []
        defer { for r in relays { r.server.kill() } }
        for i in 0..<4 {
            let store = dir.store("relay\(i)")
            _ = try await cli(["init", "--store", store, "--name", "relay\(i)", "--network", network])
            let key = try field(try await cli(["whoami", "--store", store, "--json"]), "device")
            // Relays 1-3 exchange the directory with relay 0 every second (Specs/sync.md §4.12).
            let server = try await ServerProcess.start(chorus: chorus, store: store, extra: ["--host", "listed", "--directory-interval", "1"])
            relays.append((store, key, "127.0.0.1:\(server.syncPort)", server))
            if i == 0 {
                // Relay 0 bootstraps the network: every invite made from now on carries it.
                _ = try await cli(["network", "relay-add", "--store", founder, "\(key)@\(relays[0].address)"])
            }
        }
        #expect(relays[0].server.output.contains("host=listed"))

        // Twelve users: user i lives on relays i and i+1 (home) and leaves
        // its inbox on relay i+2.
        var stores = [founder]
        for i in 1..<12 {
            let store = dir.store("u\(i)")
            _ = try await cli(["init", "--store", store, "--name", "u\(i)", "--network", network])
            stores.append(store)
        }
        var users: [String] = []
        for (i, store) in stores.enumerated() {
            users.append(try field(try await cli(["whoami", "--store", store, "--json"]), "user"))
            let (h1, h2, inbox) = (relays[i % 4], relays[(i + 1) % 4], relays[(i + 2) % 4])
            _ = try await cli([
                "relays", "set", "--store", store, "--relay", "home=\(h1.key)@\(h1.address)", "--relay", "home=\(h2.key)@\(h2.address)",
                "--relay", "inbox=\(inbox.key)@\(inbox.address)",
            ])
            _ = try await cli(["profile", "set", "--store", store, "bio", "bio of u\(i)"])
        }
        // Follows across relays: user i follows users i+1 and i+5.
        for i in 0..<12 {
            for j in [(i + 1) % 12, (i + 5) % 12] { _ = try await cli(["follow", users[j], "--store", stores[i]]) }
        }
        func round() async throws {
            for store in stores {
                let out = try await cli(["sync", "--hops", "1", "--store", store, "--json"])
                #expect(out.contains("\"complete\""), "\(out)")
            }
        }
        // Two rounds: a user early in the first ran before later users published.
        try await round()
        try await round()
        // Every relay holds every user's list, the users it is no relay of
        // included: relay 0 as the bootstrap relay every user gave its list
        // to, relays 1-3 from relay 0 in their directory exchanges.
        for r in relays {
            for (i, user) in users.enumerated() {
                let shown = try await waitFor(.seconds(120), "relay \(r.store) to hold the list of u\(i)") {
                    let out = try await cli(["relays", "show", user, "--store", r.store])
                    return out.contains("No relay list") ? nil : out
                }
                #expect(shown.contains("home"))
            }
        }

        // Everyone reads the users they follow, fetched from those users' home relays.
        for i in 0..<12 {
            let j = (i + 5) % 12
            let profile = try json(try await cli(["query", "profile", users[j], "--store", stores[i], "--json"])) as? [String: Any]
            #expect((profile?["fields"] as? [String: Any])?["bio"] as? String == "bio of u\(j)", "u\(i) reads u\(j): \(String(describing: profile))")
        }

        // A private chat whose members live on three different relays.
        let chat = try await cli(["chat", "create", "--store", stores[0], "--title", "three relays", "--member", users[1], "--member", users[6]])
            .split(separator: "\n").first.map(String.init) ?? ""
        _ = try await cli(["chat", "send", chat, "--store", stores[0], "--text", "first"])
        try await round()
        try await round()
        for i in [0, 1, 6] { #expect(try await messages(stores[i], chat) == ["first"], "u\(i) reads the chat") }
        // A non-member's store holds none of it in plain text, nor does any relay.
        for store in [stores[3]] + relays.map(\.store) {
            let data = try Data(contentsOf: URL(fileURLWithPath: store + "/data.mdb"))
            #expect(data.range(of: Data("three relays".utf8)) == nil && data.range(of: Data("first".utf8)) == nil)
        }

        // Member 6 is removed; what follows is not readable by it.
        _ = try await cli(["chat", "remove", chat, users[6], "--store", stores[0]])
        _ = try await cli(["chat", "send", chat, "--store", stores[0], "--text", "after the removal"])
        try await round()
        try await round()
        #expect(try await messages(stores[1], chat) == ["first", "after the removal"])
        let removed = try await messages(stores[6], chat)
        #expect(removed.first == "first" && !removed.contains("after the removal"), "\(removed)")

        // User 3 moves home to relay 0 alone; user 2, who follows it, finds it there.
        _ = try await cli(["relays", "set", "--store", stores[3], "--relay", "\(relays[0].key)@\(relays[0].address)"])
        _ = try await cli(["profile", "set", "--store", stores[3], "bio", "moved to relay 0"])
        try await round()
        try await round()
        let moved = try json(try await cli(["query", "profile", users[3], "--store", stores[2], "--json"])) as? [String: Any]
        #expect((moved?["fields"] as? [String: Any])?["bio"] as? String == "moved to relay 0")

        // Every user's scope equals, feed for feed, a node that holds
        // everything every relay holds.
        let reference = dir.store("reference")
        _ = try await cli(["init", "--store", reference, "--name", "reference", "--network", network])
        for r in relays { _ = try await cli(["sync", r.address, "--store", reference]) }
        let all = opened(try await Node.open(at: reference, readOnly: true))
        for (i, store) in stores.enumerated() {
            let node = opened(try await Node.open(at: store, readOnly: true))
            let feeds = try #require(try ReplicationScope(hops: 1).feeds(of: node))
            var differing: [String] = []
            for feed in feeds.sorted() where try node.head(of: feed) != all.head(of: feed) {
                let owner = try users.firstIndex(of: node.projections.user(of: feed).hex).map { "u\($0)" } ?? "?"
                var atRelays: [UInt64] = []
                for r in relays {
                    let relay = opened(try await Node.open(at: r.store, readOnly: true))
                    atRelays.append(try relay.head(of: feed)?.seq ?? 0)
                    await relay.close()
                }
                differing.append("\(feed.short) of \(owner): \(try node.head(of: feed)?.seq ?? 0) here, \(try all.head(of: feed)?.seq ?? 0) there, relays \(atRelays)")
            }
            await node.close()
            #expect(differing.isEmpty, "u\(i) differs from the reference in \(differing.count) of \(feeds.count) feeds of its scope: \(differing)")
        }
        await all.close()
        for r in relays { await r.server.stop() }
    }
}
#endif
