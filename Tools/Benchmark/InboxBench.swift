// `chorus-bench inbox`: what an app's inbox screen costs: `Node.chatList()`
// of a user in many encrypted chats, each row's title and last message
// opened on the device, against the projections' list it decorates.
import ArgumentParser
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import Foundation

struct InboxBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inbox",
        abstract: "An inbox screen: Node.chatList() of a user in many encrypted chats, against the projections' list.",
        discussion: """
            Alice creates C chats with Bob, each titled and sealed, and writes M messages in each \
            (the last one edited in every third chat); Bob answers in every other chat after a sync, so \
            those chats show unread messages. Measured on Alice's node, Q times each, alternately: \
            Node.chatList() (every row's title and last message opened on her device, what an app \
            draws, as it redraws: with what earlier reads opened kept), the same as a first read \
            (with nothing kept, so every row is decrypted) and Projections.chatList(of:) (the sealed \
            rows it opens). Reports p50/p99 of each and the cost per row of opening.
            """)

    @Option(help: "Chats in Alice's inbox.") var chats = 200
    @Option(help: "Messages Alice writes in each chat.") var messages = 3
    @Option(help: "Queries of each kind.") var queries = 1000
    @Flag(help: "Print machine-readable JSON.") var json = false

    func validate() throws {
        if chats < 1 || messages < 1 || queries < 10 { throw ValidationError("--chats ≥ 1, --messages ≥ 1, --queries ≥ 10") }
    }

    func run() async throws {
        let dir = temporaryDirectory("inbox")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let nodes = try await TwoNodes(at: dir)
        let (alice, bob) = (nodes.alice, nodes.bob)
        func sync() async throws { try await nodes.sync() }
        Bench.note("writing \(chats) chats of \(messages) messages...")
        var ids: [ChatID] = []
        for c in 0..<chats {
            let chat = try await alice.createChat(title: "chat \(c)", members: [bob.identity.user]).object
            ids.append(chat)
            var last: MessageID? = nil
            for k in 0..<messages { last = try await alice.sendMessage(chat, text: "message \(k) in chat \(c)").object }
            if c % 3 == 0, let last { _ = try await alice.editMessage(last, text: "message edited in chat \(c)") }
        }
        try await sync()
        for (c, chat) in ids.enumerated() where c % 2 == 1 { _ = try await bob.sendMessage(chat, text: "an answer in chat \(c)") }
        try await sync()
        let rows = try alice.chatList()
        guard rows.count == chats, rows.allSatisfy({ $0.chat.title?.value != nil && $0.lastMessage?.content.value != nil }) else {
            throw ValidationError("Alice's inbox does not show \(chats) opened rows")
        }
        guard rows.filter({ $0.unread > 0 }).count == chats / 2 else { throw ValidationError("Bob's answers are not unread for Alice") }

        Bench.note("\(queries) queries of each...")
        var times: [[Double]] = [[], [], []]  // redrawn, first read, sealed
        let user = alice.identity.user
        let orders = [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
        for q in 0..<queries {
            for kind in orders[q % 3] {
                // A first read finds nothing kept; the redraw after it finds every row kept.
                if kind == 1 { alice.openedContent.removeAll() }
                let start = Bench.clock()
                let count = kind == 2 ? try alice.projections.chatList(of: user).count : try alice.chatList().count
                let elapsed = Bench.clock() - start
                guard count == chats else { throw ValidationError("a list of \(count) rows") }
                times[kind].append(elapsed)
            }
        }
        await nodes.close()
        let r = percentiles(times[0])
        let cold = percentiles(times[1])
        let s = percentiles(times[2])
        let perRow = (cold.p50 - s.p50) * 1000 / Double(chats)
        if json {
            let object: [String: Any] = [
                "chats": chats, "messages_per_chat": messages, "queries": queries,
                "readable_chat_list_ms": ["p50": r.p50, "p99": r.p99], "first_read_chat_list_ms": ["p50": cold.p50, "p99": cold.p99],
                "projections_chat_list_ms": ["p50": s.p50, "p99": s.p99],
                "opening_us_per_row_p50": perRow, "target_p99_ms": 1.0, "met": r.p99 <= 1.0,
            ]
            print(String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self))
            return
        }
        func f(_ x: Double) -> String { String(format: "%.3f", x) }
        print("the inbox of a user in \(chats) encrypted chats, \(queries) queries each:")
        print("  Node.chatList() (rows opened)          p50 \(f(r.p50)) ms   p99 \(f(r.p99)) ms   (target p99 ≤ 1 ms: \(r.p99 <= 1 ? "met" : "not met"))")
        print("  the same, a first read (none kept)     p50 \(f(cold.p50)) ms   p99 \(f(cold.p99)) ms")
        print("  Projections.chatList(of:) (sealed)     p50 \(f(s.p50)) ms   p99 \(f(s.p99)) ms")
        print("  opening, per row (first read)          \(String(format: "%.1f", perRow)) µs")
    }
}
