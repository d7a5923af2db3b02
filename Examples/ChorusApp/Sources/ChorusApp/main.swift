import Chorus
import Foundation

// Two people on two devices, in one process: Alice's phone and Bob's laptop.
let folder = FileManager.default.temporaryDirectory.appendingPathComponent("chorus-app-\(UUID().uuidString)")
defer { try? FileManager.default.removeItem(at: folder) }

// The network is created once, with its coin issuer (the shop); everyone
// else joins from its invite. Share the invite string; never rebuild a network.
let (shop, network) = try await Node.createNetwork(at: folder.appendingPathComponent("shop"))
let invite = network.invite
let alice = try await Node.create(at: folder.appendingPathComponent("alice"), deviceName: "iPhone", network: try NetworkConfig(invite: invite))
let bob = try await Node.create(at: folder.appendingPathComponent("bob"), deviceName: "laptop", network: try NetworkConfig(invite: invite))

// Bob serves sync on a free port of 127.0.0.1; Alice syncs with him.
let bobServing = try await bob.serve(port: 0)
func syncAlice() async throws { _ = try await alice.sync(with: "127.0.0.1", port: bobServing.port) }
try await syncAlice()  // each now knows the other's devices

// Profiles, a picture from Data, a follow. Every mutation returns once durable.
try await alice.setProfile(.city("Lisbon"))
try await alice.setProfile(.birthday(DateComponents(year: 1990, month: 4, day: 2)))
let photo = Data([0xFF, 0xD8, 0xFF, 0xE0] + Array(repeating: 7, count: 64))  // a JPEG's bytes
let picture = try await alice.addPicture(photo, caption: "rooftop").object
try await alice.setProfile(.avatar(picture))
guard try await alice.pictureData(picture) == photo else { fatalError("the picture's bytes differ") }
try await alice.follow(bob.identity.user)

// A chat, sealed to its members' devices. Alice's screen observes it: the
// page now, then a new page whenever a commit changes it.
let chat = try await alice.createChat(title: "trip", members: [bob.identity.user]).object
try await alice.sendMessage(chat, text: "look", picture: picture)
let screen = Task {
    var seen: [[String]] = []
    for try await page in alice.observe({ try $0.readableChatPage(chat, limit: 50) }) {
        let texts = page.messages.compactMap { $0.content.value?.text }
        seen.append(texts)
        print("Alice's screen: \(texts)")
        if texts.contains("lovely") { break }
    }
    return seen
}
// Her inbox: each chat with its last message and her unread count, newest
// first, 20 rows a page (the next page: `after: rows.last?.cursor`). It
// runs again only when a commit touches one of her chats.
let inbox = Task {
    for try await rows in alice.observe({ try $0.chatList(limit: 20) }) {
        print("Alice's inbox: \(rows.map { "\($0.chat.title?.value ?? "untitled"): \($0.unread) unread" })")
        if let row = rows.first, row.unread == 1 { return row }
    }
    fatalError("the inbox ended")
}
try await syncAlice()  // Bob gets the chat and its key
try await bob.sendMessage(chat, text: "lovely")
try await syncAlice()  // Bob's message arrives; Alice's screens update
let screens = try await screen.value
guard screens.last?.contains("lovely") == true else { fatalError("the observed chat did not update") }
let row = try await inbox.value
guard let newest = row.lastMessage, newest.content.value?.text == "lovely" else { fatalError("the inbox row lacks the last message") }
try await alice.markRead(chat, upTo: newest.view.id)  // read markers name messages
guard try alice.chatList().first?.unread == 0 else { fatalError("a read chat still shows unread messages") }
print("read at \(newest.view.hlc.date)")

// Coins: the shop credits a purchase; the store redelivers it after a
// crash, and the second credit is stored but takes no effect.
_ = try await shop.sync(with: "127.0.0.1", port: bobServing.port)
let credit = try await shop.creditCoins(100, to: alice.identity.user, receipt: "GPA.3372")
let again = try await shop.creditCoins(100, to: alice.identity.user, receipt: "GPA.3372")
guard credit.isApplied, case .noEffect(let why) = again.effect, why.code == "duplicate_receipt" else {
    fatalError("a redelivered receipt must not be credited twice")
}
print("redelivered receipt: \(why.code) (\(why.detail))")
_ = try await shop.sync(with: "127.0.0.1", port: bobServing.port)
try await syncAlice()
print("Alice's balance: \(try alice.balance(of: alice.identity.user).total) coins")

// Refusals are typed: an app branches on the case, or on the stable code
// every library error carries (`ChorusError`).
do {
    try await alice.spendCoins(1_000, for: "a gift box")
    fatalError("spending beyond one's coins must be refused")
} catch NodeError.refused(.insufficientRights(let held, let needed)) {
    print("refused: holds \(held) coins, \(needed) needed")
}
do {
    try await alice.follow(alice.identity.user)
    fatalError("following oneself must be refused")
} catch let error as any ChorusError where error.code == "self" {
    print("refused [\(error.code)]: \(error.message)")
}

// Queries read the projections; two nodes with the same events agree.
let profile = try alice.profile(of: alice.identity.user)
print("Alice: \(profile.city ?? "?"), born \(profile.birthday.map { "\($0.year ?? 0)" } ?? "?"), avatar \(profile.avatar != nil)")
let bobsView = try bob.readableChatPage(chat, limit: 50).messages.compactMap { $0.content.value?.text }
print("Bob's screen: \(bobsView)")
guard try alice.digest() == bob.digest() else { fatalError("the nodes disagree") }

// Close, then reopen the same store: everything acknowledged is there.
await bobServing.shutdown()
await alice.close()
let reopened = try await Node.open(at: folder.appendingPathComponent("alice"))
guard try reopened.profile(of: reopened.identity.user).city == "Lisbon" else { fatalError("lost after reopening") }
print("reopened: \(try reopened.balance(of: reopened.identity.user).total) coins, city Lisbon")
for node in [reopened, bob, shop] { await node.close() }
