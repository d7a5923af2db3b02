import Chorus
import Foundation
import Testing

/// Views an app would cache (a profile, a gallery, a chat page, the chat
/// list, a balance, a relay list) read back from JSON equal to what the node
/// returned, with every byte string, key and clock exact.
@Suite("Views an app can cache")
struct CodableViewTests {
    static func roundTrip<T: Codable & Equatable>(_ value: T) throws -> T {
        try JSONDecoder().decode(T.self, from: JSONEncoder().encode(value))
    }

    @Test func viewsReadBackFromJSONAsTheyWere() async throws {
        let world = try await ObservationTests.World.make()
        let (alice, bob) = (world.alice, world.bob)
        try await alice.setProfile(.city("Lisbon"))
        try await alice.setProfile(.birthday(DateComponents(year: 1990, month: 4, day: 2)))
        let picture = try await alice.addPicture(jpeg(3), caption: "rooftop").object
        try await alice.setProfile(.avatar(picture))
        _ = try await alice.setRelays([Relay(address: "relay.example:7800", key: bob.identity.device.raw, roles: .all)])
        let chat = try await alice.createChat(title: "trip", members: [bob.identity.user]).object
        try await alice.sendMessage(chat, text: "look", picture: picture)
        try await world.exchange()
        try await bob.sendMessage(chat, text: "lovely")
        try await world.exchange()
        let credit = try await world.shop.creditCoins(100, to: alice.identity.user, receipt: "GPA.1")
        #expect(credit.isApplied)
        try await world.exchange()

        let profile = try alice.profile(of: alice.identity.user)
        #expect(profile.fields.count >= 3)
        #expect(try Self.roundTrip(profile) == profile)
        let gallery = try alice.pictures(of: alice.identity.user)
        #expect(gallery.count == 1)
        #expect(try Self.roundTrip(gallery) == gallery)
        let relays = try #require(try alice.relays(of: alice.identity.user))
        #expect(try Self.roundTrip(relays) == relays)
        let page = try alice.readableChatPage(chat, limit: 50)
        #expect(page.messages.compactMap { $0.content.value?.text } == ["look", "lovely"])
        #expect(try Self.roundTrip(page) == page)
        let inbox = try alice.chatList()
        #expect(inbox.first?.unread == 1)
        #expect(try Self.roundTrip(inbox) == inbox)
        let balance = try alice.balance(of: alice.identity.user)
        #expect(balance.total == 100)
        #expect(try Self.roundTrip(balance) == balance)
        // A key, an id and a clock are written as their text forms, so a
        // cached value is readable and a damaged one is refused, not misread.
        let json = String(decoding: try JSONEncoder().encode(page.chat.view), as: UTF8.self)
        #expect(json.contains(chat.description))
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(PublicKey.self, from: Data("\"\(String(repeating: "z", count: 64))\"".utf8))
        }
        await world.close()
    }
}
