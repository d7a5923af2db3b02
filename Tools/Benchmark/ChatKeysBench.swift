// `chorus-bench chatkeys`: what sharing chat keys after a sync costs
// (Specs/encryption.md §6 rule 5) in a long chat: after a sync that brought
// one message, against one that brought a chat event.
import ArgumentParser
import ChorusCrypto
import ChorusNode
import ChorusProjections
import ChorusSync
import Foundation

struct ChatKeysBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chatkeys",
        abstract: "Sharing chat keys after a sync in a long chat: after one received message, against after a chat event.",
        discussion: """
            Alice writes M messages in a chat with Bob, and Bob's node syncs them. Bob then writes one \
            message and Alice's node receives it in a sync. Measured on Alice's node, K times each, \
            alternately: the key-sharing pass as a sync that brought that message runs it (its epoch only), \
            and as a sync that brought a chat event runs it (the chat whole, every message read). Reports \
            p50/p99 of each and their ratio; the first stays flat as the chat grows, the second grows with it.
            """)

    @Option(help: "Messages in the chat.") var messages = 20_000
    @Option(help: "Passes of each kind.") var passes = 30
    @Flag(help: "Print machine-readable JSON.") var json = false

    func validate() throws {
        if messages < 10 || passes < 3 { throw ValidationError("--messages ≥ 10, --passes ≥ 3") }
    }

    func run() async throws {
        let dir = temporaryDirectory("chatkeys")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let nodes = try await TwoNodes(at: dir)
        let (alice, bob) = (nodes.alice, nodes.bob)
        func sync() async throws { try await nodes.sync() }
        let chat = try await alice.createChat(title: "long", members: [bob.identity.user]).object
        Bench.note("writing \(messages) messages...")
        for k in 0..<messages { _ = try await alice.sendMessage(chat, text: "message \(k) of a long chat") }
        try await sync()
        let late = try await bob.sendMessage(chat, text: "one more").object
        try await sync()
        guard try alice.projections.message(late.raw) != nil else { throw ValidationError("Bob's message did not reach Alice") }

        var received = ChatKeyTriggers()
        received.messages[chat.raw] = [late.raw]
        var chatEvent = ChatKeyTriggers()
        chatEvent.chats = [chat.raw]
        Bench.note("\(passes) passes of each...")
        var byMessage: [Double] = []
        var whole: [Double] = []
        for pass in 0..<passes {
            for kind in pass % 2 == 0 ? [0, 1] : [1, 0] {
                let start = Bench.clock()
                _ = try await alice.shareChatKeys(concerning: kind == 0 ? received : chatEvent)
                if kind == 0 { byMessage.append(Bench.clock() - start) } else { whole.append(Bench.clock() - start) }
            }
        }
        await nodes.close()
        let m = percentiles(byMessage)
        let w = percentiles(whole)
        if json {
            let object: [String: Any] = [
                "messages": messages + 1, "passes": passes,
                "after_received_message_ms": ["p50": m.p50, "p99": m.p99], "after_chat_event_ms": ["p50": w.p50, "p99": w.p99],
                "ratio_p50": w.p50 / max(m.p50, 1e-9),
            ]
            print(String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self))
            return
        }
        func f(_ x: Double) -> String { String(format: "%.3f", x) }
        print("sharing chat keys in a chat of \(messages + 1) messages, \(passes) passes each:")
        print("  after a sync that brought one message   p50 \(f(m.p50)) ms   p99 \(f(m.p99)) ms")
        print("  after a sync that brought a chat event  p50 \(f(w.p50)) ms   p99 \(f(w.p99)) ms   (\(String(format: "%.0f", w.p50 / max(m.p50, 1e-9)))× the first)")
    }
}
